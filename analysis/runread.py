"""Load a run folder (docs/DESIGN.md "Run folder") into plain dataclasses.

The reader is tolerant on purpose: a run that died half-way (truncated JSONL line, missing
files, a strategy whose status is incomplete or failed) must still be readable so that the
report can show what was measured and say that the run is incomplete. Only a folder that is
not a run at all, or a *complete* run that lacks a strategy it lists, is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.errors import AnalysisError

STRAGGLER_STRATEGIES = ("async", "ssp", "backup")


class RunFolderError(AnalysisError):
    """A run folder that cannot be read; the message is one line for the command line."""


@dataclass
class StrategyRun:
    """Everything one `<strategy>/` folder holds; absent files are None or empty."""

    name: str
    path: Path
    present: bool = True
    state: str = "complete"
    error: str | None = None
    workers: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    workers_done: dict[int, bool] = field(default_factory=dict)
    ps_events: list[dict[str, Any]] = field(default_factory=list)
    timeseries: list[dict[str, Any]] = field(default_factory=list)
    queue_depth: list[dict[str, Any]] = field(default_factory=list)
    capture: dict[str, Any] | None = None
    hosts: dict[str, Any] | None = None
    retransmits_timeline: dict[str, Any] | None = None
    goodput_timeline: dict[str, Any] | None = None
    faults: list[dict[str, Any]] = field(default_factory=list)
    t_start: float | None = None
    t_end: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Complete = status says so and every worker log ends with its done event."""
        return (
            self.present
            and self.state == "complete"
            and bool(self.workers_done)
            and all(self.workers_done.values())
        )

    @property
    def t0(self) -> float | None:
        """Start of training (earliest worker t_start), else of the first sample: the time origin."""
        starts = [r["t_start"] for recs in self.workers.values() for r in recs if _num(r.get("t_start"))]
        if starts:
            return float(min(starts))
        for series in (self.timeseries, self.queue_depth):
            ts = [s["t"] for s in series if _num(s.get("t"))]
            if ts:
                return float(min(ts))
        return None


@dataclass
class Run:
    """A whole run folder: config, topology, summary and one StrategyRun per strategy."""

    path: Path
    config: dict[str, Any]
    topology: dict[str, Any] | None
    summary: dict[str, Any] | None
    strategies: dict[str, StrategyRun]
    problems: list[str] = field(default_factory=list)

    @property
    def marked_incomplete(self) -> bool:
        """The run itself says it did not finish (no summary, or summary complete false)."""
        return self.summary is None or self.summary.get("complete") is False

    @property
    def complete(self) -> bool:
        """A run is complete when it says so and every strategy finished."""
        return not self.marked_incomplete and all(s.complete for s in self.strategies.values())

    @property
    def capture_complete(self) -> bool | None:
        """summary.capture.complete, or None when the summary does not say."""
        cap = (self.summary or {}).get("capture")
        if isinstance(cap, dict) and isinstance(cap.get("complete"), bool):
            return cap["complete"]
        return None

    def strategy_summary(self, name: str) -> dict[str, Any]:
        """summary.json's figures of one strategy ({} when absent)."""
        strategies = (self.summary or {}).get("strategies") or {}
        value = strategies.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def ps_port(self) -> str | None:
        """Interface name of the PS port (e.g. lf1-eth3), from topology, else capture, else summary."""
        topo = self.topology or {}
        pp = topo.get("ps_port")
        if isinstance(pp, dict) and pp.get("switch") and pp.get("port") is not None:
            return f"{pp['switch']}-eth{pp['port']}"
        ps_host = topo.get("ps_host") or self.config.get("ps_host")
        for host in topo.get("hosts") or []:
            if isinstance(host, dict) and (host.get("name") == ps_host or host.get("ps")):
                if host.get("leaf") and host.get("port") is not None:
                    return f"{host['leaf']}-eth{host['port']}"
        for strat in self.strategies.values():
            for point in (strat.capture or {}).get("points") or []:
                if isinstance(point, dict) and point.get("name") == "ps-port" and point.get("iface"):
                    return str(point["iface"])
        name = (self.summary or {}).get("ps_port")
        return str(name) if isinstance(name, str) else None


def _num(value: Any) -> bool:
    """True for an int/float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects of a JSONL file plus problems; a bad (e.g. truncated last) line is skipped, not fatal."""
    problems: list[str] = []
    try:
        raw = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return [], []
    lines = raw.split("\n")
    records: list[dict[str, Any]] = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            what = "truncated last line" if i == last else f"unreadable line {i + 1}"
            problems.append(f"{path.parent.name}/{path.name}: {what} skipped")
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return records, problems


def read_json(path: Path, problems: list[str], label: str | None = None) -> dict[str, Any] | None:
    """A JSON object file, or None (missing files are silent, unreadable ones become problems)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        problems.append(f"{label or path.name}: unreadable ({exc.msg if hasattr(exc, 'msg') else exc})")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{label or path.name}: not a JSON object")
        return None
    return obj


_WORKER_RE = re.compile(r"^worker-(\d+)\.jsonl$")


def load_strategy(path: Path, name: str) -> StrategyRun:
    """Read one `<strategy>/` folder; missing or damaged files become problems, not exceptions."""
    strat = StrategyRun(name=name, path=path)
    if not path.is_dir():
        strat.present = False
        strat.state = "missing"
        strat.error = "strategy folder missing"
        strat.problems.append(f"{name}/: folder missing")
        return strat
    probs = strat.problems
    status = read_json(path / "status.json", probs, f"{name}/status.json")
    if status is None:
        strat.state = "incomplete"
        strat.error = "status.json missing"
        probs.append(f"{name}/status.json missing")
    else:
        strat.state = str(status.get("state") or "incomplete")
        err = status.get("error")
        strat.error = str(err) if err else None
        strat.t_start = float(status["t_start"]) if _num(status.get("t_start")) else None
        strat.t_end = float(status["t_end"]) if _num(status.get("t_end")) else None
    for wpath in sorted(path.glob("worker-*.jsonl")):
        m = _WORKER_RE.match(wpath.name)
        if not m:
            continue
        rank = int(m.group(1))
        recs, p = read_jsonl(wpath)
        probs.extend(f"{name}/{x}" if not x.startswith(f"{name}/") else x for x in p)
        steps = [r for r in recs if "event" not in r and "step" in r]
        strat.workers[rank] = sorted(steps, key=lambda r: (r.get("step", 0), r.get("t_start", 0)))
        strat.workers_done[rank] = any(r.get("event") == "done" for r in recs)
        if not strat.workers_done[rank]:
            probs.append(f"{name}/{wpath.name}: no done event")
    if not strat.workers:
        probs.append(f"{name}/: no worker logs")
    for attr, fname in (("ps_events", "ps.jsonl"), ("timeseries", "timeseries.jsonl"),
                        ("queue_depth", "queue_depth.jsonl"), ("faults", "faults.jsonl")):
        recs, p = read_jsonl(path / fname)
        probs.extend(p)
        setattr(strat, attr, recs)
    strat.queue_depth.sort(key=lambda r: r.get("t", 0))
    strat.timeseries.sort(key=lambda r: r.get("t", 0))
    strat.faults = sorted((f for f in strat.faults if _num(f.get("t"))), key=lambda f: f["t"])
    strat.capture = read_json(path / "capture.json", probs, f"{name}/capture.json")
    strat.hosts = read_json(path / "hosts.json", probs, f"{name}/hosts.json")
    strat.retransmits_timeline = _timeline(path / "retransmits_timeline.json", "counts", probs, name)
    strat.goodput_timeline = _timeline(path / "goodput_timeline.json", "bytes", probs, name)
    return strat


def _timeline(path: Path, key: str, problems: list[str], name: str) -> dict[str, Any] | None:
    """A `{"bin_s","t0",key:[...]}` file, or None when absent or malformed."""
    obj = read_json(path, problems, f"{name}/{path.name}")
    if obj is None:
        return None
    if not (_num(obj.get("bin_s")) and obj["bin_s"] > 0 and _num(obj.get("t0"))
            and isinstance(obj.get(key), list) and all(_num(v) for v in obj[key])):
        problems.append(f"{name}/{path.name}: expected bin_s>0, t0 and a list of numbers in {key!r}")
        return None
    return obj


def strategy_names(config: dict[str, Any], summary: dict[str, Any] | None) -> list[str]:
    """Strategies the run lists, config order first, then any only the summary names."""
    names: list[str] = []
    listed = config.get("strategies")
    if isinstance(listed, str):
        listed = [x.strip() for x in listed.split(",") if x.strip()]
    for n in listed or []:
        if isinstance(n, str) and n not in names:
            names.append(n)
    for n in ((summary or {}).get("strategies") or {}):
        if n not in names:
            names.append(n)
    return names


def load_run(run_dir: Path) -> Run:
    """Read a run folder; raises RunFolderError (one line) when it is not a usable run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunFolderError(f"run folder not found: {run_dir}")
    problems: list[str] = []
    summary = read_json(run_dir / "summary.json", problems)
    config = read_json(run_dir / "config.json", problems)
    if config is None:
        config = (summary or {}).get("config") if isinstance((summary or {}).get("config"), dict) else None
    if config is None:
        raise RunFolderError(f"not a run folder (no readable config.json or summary.json): {run_dir}")
    if summary is None:
        problems.append("summary.json missing: the run did not finish")
    topology = read_json(run_dir / "topology.json", problems)
    names = strategy_names(config, summary)
    if not names:
        names = sorted(p.parent.name for p in run_dir.glob("*/status.json"))
    if not names:
        raise RunFolderError(f"run folder lists no strategies: {run_dir}")
    run = Run(path=run_dir, config=config, topology=topology, summary=summary, strategies={},
              problems=problems)
    missing = [n for n in names if not (run_dir / n).is_dir()]
    if missing and not run.marked_incomplete:
        raise RunFolderError(
            f"run folder {run_dir} lacks strategy folder(s) {', '.join(missing)} listed in "
            "config/summary, and the run is not marked incomplete"
        )
    for n in names:
        run.strategies[n] = load_strategy(run_dir / n, n)
    return run
