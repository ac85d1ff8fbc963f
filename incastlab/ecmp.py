"""`incastlab ecmp` (make ecmp): the ring's flows hashed onto the uplinks, once per routing policy
and seed, each run a compare of the collectives on a fabric where hashing can collide.

The fabric: 2 leaves x 5 hosts, 4 spines, every link at one rate; the PS host (h5, which the
config keeps off the ranks) and h10 idle, the 8 ranks interleaved over the leaves (h1,h6,h2,h7,...),
so every ring flow crosses the spines and each leaf hashes 4 flows onto its 4 uplinks: the best
placement gives every flow its own uplink, the hash shares one in 1 - 4!/4^4 of its draws.

Each (policy, seed) is one run folder under the sweep's folder, made the way `compare` makes
one (run_session, run_experiment, the summary), with the controller's --routing set to the
policy where the controller has that option. The sources ports a flow gets (and so its uplink)
are the kernel's ephemeral choice, new in each run; the seed is the run's --seed. Then
analysis.ecmp reads each run's uplink counters: <run>/ecmp.json per run (the report's ecmp
section), and <sweep>/ecmp.json (SCHEMA) with every row and the table printed at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.ecmp import SCHEMA, analyze_run, collision_share
from runmodel.config import ROUTINGS, ExperimentConfig, load_scenario
from runmodel.params import ParamError
from runmodel.records import read_json, write_json

FABRIC = {"spines": 4, "leaves": 2, "hosts_per_leaf": 5, "ps_host": "h5", "runtime": "netns"}
PLACEMENT = "h1,h6,h2,h7,h3,h8,h4,h9"  # 8 ranks interleaved over the two leaves, 4 on each
POLICIES = ROUTINGS  # every policy the controller has, the hash first
STRATEGIES = ("ring", "allreduce")


def sweep_configs(
    base: ExperimentConfig,
    policies: list[str],
    seeds: int,
    steps: int,
    grad_mb: float,
    strategies: tuple[str, ...] = STRATEGIES,
    link_mbit: float | None = None,
):
    """(policy, seed, config) of every run, validated before anything is built; a policy the
    controller does not know (no --routing yet, or not among its choices) is refused here, and so
    is a strategy that is not one of STRATEGIES (a test runs the ring alone, to be short).
    link_mbit: every link's rate (hosts and uplinks alike), None for the scenario's."""
    if not strategies or any(s not in STRATEGIES for s in strategies):
        given = ",".join(strategies) or "(none)"
        raise ParamError(f"strategies: {given}: give some of {','.join(STRATEGIES)}")
    fields = {f.name for f in dataclasses.fields(base.controller)}
    out = []
    for policy in policies:
        if "routing" not in fields and policy != "ecmp":
            raise ParamError(f"policies: {policy!r}: this controller has no routing policies but ecmp")
        ctl = {"routing": policy} if "routing" in fields else {}
        for seed in range(1, seeds + 1):
            cfg = base.overridden(
                FABRIC | ({} if link_mbit is None else {"host_mbit": link_mbit, "uplink_mbit": link_mbit}),
                ctl,
                {
                    "strategies": tuple(strategies),
                    "rank_placement": PLACEMENT,
                    "seed": seed,
                    "steps": steps,
                    "grad_mb": grad_mb,
                    "capture": "none",
                },
            )
            cfg.validate()
            out.append((policy, seed, cfg))
    return out


def run_one(cfg: ExperimentConfig, parent: Path, label: str, say: Callable[[str], None]) -> Path:
    """One compare-like run in parent/<label>: session, strategies, summary; returns its folder."""
    from analysis.summary import summarize
    from incastlab.runner import ExperimentError, run_experiment
    from incastlab.session import run_session
    from runmodel.folder import RunFolder

    folder = RunFolder.create(parent, name=label, link_latest=False)
    folder.write_config(cfg)
    say(f"{label}: {cfg.placement_line()}")
    try:
        with run_session(cfg, folder, say, (cfg.cc, None)) as sess:
            run_experiment(sess, cfg, folder, say)
    except ExperimentError as exc:
        say(f"{label}: {exc}")
    summarize(folder.path)
    return folder.path


def ecmp_table(rows: list[dict[str, Any]]) -> Any:
    """The sweep's table: per policy, seed and strategy, the ring flows per uplink of each leaf,
    how many collided, busbw and iteration time; the footer compares collisions with the hash's rate."""
    from report.console import Col, Table

    def per_uplink(r: dict[str, Any]) -> str | None:
        parts = [
            f"{leaf} {'/'.join(map(str, f['per_uplink'].values()))}"
            for leaf, f in r["leaves"].items()
            if f["flows"] and f["per_uplink"] is not None
        ]
        return " ".join(parts) or None

    cols = [
        Col("policy", "", "policy", align="<"),
        Col("seed", "", "seed"),
        Col("strategy", "", "strategy", align="<"),
        Col("flows/uplink", "per leaf", per_uplink, align="<", name="flows_per_uplink"),
        Col("collided", "flows", "collided"),
        Col("busbw", "Mbit/s", "busbw_mbit", "{:.2f}"),
        Col("iter", "s", "iter_time_s", "{:.3f}"),
    ]
    rate = next((r["expected_rate_leaf"] for r in rows if r.get("expected_rate_leaf") is not None), None)
    footer = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        hit, seen = collision_share(r for r in rows if r["policy"] == policy)
        if not seen:
            continue
        line = f"{policy}: 2+ ring flows on one uplink in {hit} of {seen} leaf draws ({hit / seen:.0%})"
        if policy == "ecmp" and rate is not None:
            line += f"; the hash's expected rate {rate:.0%} (1 - n!/((n-k)! n^k))"
        footer.append(line)
    return Table(cols, rows, footer=footer)


def rebuild(parent: Path) -> dict[str, Any]:
    """ecmp.json of a saved sweep (and each run's) recomputed from its runs' files, no network:
    the policy and seed of a run are its config.json's routing and seed."""
    from runmodel.folder import RunFolder

    rows: list[dict[str, Any]] = []
    policies: list[str] = []
    for run_dir in sorted(d for d in parent.iterdir() if (d / "config.json").is_file()):
        cfg = RunFolder(run_dir).config()
        policy, seed = getattr(cfg.controller, "routing", "ecmp"), cfg.seed
        found = analyze_run(run_dir)
        write_json(run_dir / "ecmp.json", {"schema": SCHEMA, "policy": policy, "seed": seed, "rows": found})
        rows += [{"policy": policy, "seed": seed, "run": run_dir.name, **r} for r in found]
        policies += [policy] if policy not in policies else []
    rows.sort(key=lambda r: (policies.index(r["policy"]), r["seed"]))
    old = read_json(parent / "ecmp.json") or {}
    seeds = max((r["seed"] for r in rows), default=0)
    doc = {"schema": SCHEMA, "policies": policies, "seeds": seeds, "rows": rows}
    if "seconds" in old:
        doc["seconds"] = old["seconds"]
    write_json(parent / "ecmp.json", doc)
    return doc


def run(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """The sweep: checks, every (policy, seed) run, the analysis, ecmp.json and the table."""
    from incastlab.cliflags import SCENARIO_DIR, require_root
    from runmodel.folder import RunFolder

    if args.rebuild:
        parent = Path(args.rebuild)
        if not parent.is_dir():
            raise ParamError(f"--rebuild: no such folder: {parent}")
        doc = rebuild(parent)
        table = ecmp_table(doc["rows"])
        print(table.render_json(run=str(parent)) if args.json else table.render(), flush=True)
        return 0

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise ParamError("policies: give at least one, e.g. ecmp")
    if not 1 <= args.seeds <= 20:
        raise ParamError(f"seeds must be in 1..20, got {args.seeds}")
    base = load_scenario(SCENARIO_DIR / "compare.json")
    strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    runs = sweep_configs(base, policies, args.seeds, args.steps, args.grad_mb, strategies, args.link_mbit)
    require_root()
    parent = RunFolder.create(Path(args.results), label=args.run_name or "ecmp").path
    say(f"ecmp sweep: {len(policies)} policies x {args.seeds} seeds in {parent}")
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"schema": SCHEMA, "policies": policies, "seeds": args.seeds, "rows": rows}
    for policy, seed, cfg in runs:
        run_dir = run_one(cfg, parent, f"{policy}-s{seed}", say)
        found = analyze_run(run_dir)
        write_json(run_dir / "ecmp.json", {"schema": SCHEMA, "policy": policy, "seed": seed, "rows": found})
        rows += [{"policy": policy, "seed": seed, "run": run_dir.name, **r} for r in found]
        write_json(parent / "ecmp.json", doc)
        if not args.no_report:
            from report import build_report

            build_report(run_dir)
    doc["seconds"] = round(time.monotonic() - t0, 1)
    write_json(parent / "ecmp.json", doc)
    say(f"ecmp sweep took {doc['seconds']:.0f} s")
    table = ecmp_table(rows)
    print(table.render_json(run=str(parent)) if args.json else table.render(), flush=True)
    return 0 if all(r["state"] == "complete" for r in rows) else 1


def add_ecmp_parser(sub: Any) -> None:
    """The `ecmp` subcommand's flags."""
    from incastlab.cliflags import add_json_flag, add_results_flags, say

    p = sub.add_parser(
        "ecmp",
        help="ring and gloo all-reduce over 4 spines: the hash's uplink collisions, per policy and seed",
        description="Runs ring and allreduce with 8 ranks interleaved over 2 leaves x 5 hosts "
        "under 4 spines, once per routing policy and seed, and counts from the leaves' uplink "
        "counters how many ring flows shared an uplink, beside the hash's expected rate.",
    )
    p.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"routing policies, comma-separated (default: {','.join(POLICIES)})",
    )
    p.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help=f"collectives each run runs, some of {','.join(STRATEGIES)} (default: all)",
    )
    p.add_argument("--seeds", type=int, default=3, help="runs per policy (default: 3)")
    p.add_argument("--steps", type=int, default=10, help="training steps per strategy (default: 10)")
    p.add_argument("--grad-mb", type=float, default=0.5, help="gradient MiB (default: 0.5)")
    p.add_argument(
        "--link-mbit",
        type=float,
        default=None,
        help="every link's rate, hosts and uplinks (default: the compare scenario's, 20)",
    )
    p.add_argument("--no-report", action="store_true", help="skip each run's report.html")
    p.add_argument(
        "--rebuild",
        metavar="SWEEP",
        help="recompute ecmp.json and the table of a saved sweep folder from its runs' files (no root)",
    )
    add_results_flags(p)
    add_json_flag(p)
    p.set_defaults(func=lambda a: run(a, say))


if __name__ == "__main__":
    sys.exit("run it as `incastlab ecmp`")
