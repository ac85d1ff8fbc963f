"""The layout reads like the data flow: no stage imports a later one, and no module imports cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# topology -> controller -> workloads -> capture -> analysis -> report, the run model under all of
# them, the command line (incastlab) and the benchmarks on top
STAGES = [
    "runmodel",
    "topologies",
    "controller",
    "workloads",
    "capture",
    "analysis",
    "report",
    "incastlab",
    "bench",
]


def module_imports() -> dict[str, set[str]]:
    """Every product module -> the product modules it imports (at any depth of its code)."""
    graph: dict[str, set[str]] = {}
    for pkg in STAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mod = mod.removesuffix(".__init__")
            deps: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    # `from pkg import mod` imports the module pkg.mod; `from mod import name` the module
                    base = ROOT / node.module.replace(".", "/")
                    names = [
                        f"{node.module}.{a.name}" if (base / f"{a.name}.py").exists() else node.module
                        for a in node.names
                    ]
                deps |= {n for n in names if n.split(".")[0] in STAGES}
            graph[mod] = deps
    known = set(graph)
    return {m: {d for d in deps if d in known and d != m} for m, deps in graph.items()}


def test_no_stage_imports_a_later_stage():
    rank = {pkg: k for k, pkg in enumerate(STAGES)}
    wrong = [
        f"{m} imports {d}"
        for m, deps in module_imports().items()
        for d in deps
        if rank[d.split(".")[0]] > rank[m.split(".")[0]]
    ]
    assert not wrong, wrong


def test_the_module_graph_has_no_cycles():
    graph = module_imports()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(path[path.index(d) :] + [d] if d in path else [m, d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_the_run_model_imports_no_stage():
    outside = [
        f"{m} imports {d}"
        for m, deps in module_imports().items()
        if m.startswith("runmodel")
        for d in deps
        if not d.startswith("runmodel")
    ]
    assert not outside, outside
