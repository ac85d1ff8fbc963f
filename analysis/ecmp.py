"""ECMP collisions of the ring's flows, seen from the switches (the leaves' uplink port counters).

With ranks interleaved over two leaves every ring flow (rank r -> r+1) crosses the spines, and a
leaf's flows toward the other leaf are hashed onto its uplinks. The ring moves the same bytes on
every flow in every step, so over any window of whole steps an uplink's share of its leaf's
uplink bytes is its share of that leaf's ring flows: flows on an uplink = share x the leaf's ring
flows (largest-remainder rounding, so the counts add up). Two or more on one uplink is a collision;
the hash's expected rate for k flows on n uplinks is 1 - n!/((n-k)! n^k) (4 on 4: 1 - 24/256).

analyze_run(run_dir) reads one compare-like run (config.json, plan, each strategy's controller
samples, summary.json) and returns its figures; ecmp.json (SCHEMA) of a whole `make ecmp` holds
one such row per policy, seed and strategy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SCHEMA = "incastlab.ecmp/1"
RING_KINDS = ("ring", "allreduce")  # the collectives whose flows the analysis counts
MIN_WINDOW_BYTES = 20_000  # an interval with less uplink traffic than this says nothing of shares


def expected_collision_rate(flows: int, uplinks: int) -> float:
    """Probability that hashing `flows` flows uniformly onto `uplinks` uplinks puts two on one:
    1 - uplinks!/((uplinks-flows)! uplinks^flows); 1 when flows > uplinks, 0 for 0 or 1 flow."""
    if flows <= 1:
        return 0.0
    if flows > uplinks:
        return 1.0
    distinct = math.perm(uplinks, flows) / uplinks**flows
    return 1.0 - distinct


def collided(counts: Iterable[int]) -> int:
    """How many flows share an uplink with another: the sum of the counts of 2 or more."""
    return sum(n for n in counts if n >= 2)


def flows_from_bytes(bytes_by_uplink: dict[str, float], flows: int) -> dict[str, int]:
    """The `flows` equal flows apportioned to uplinks by their share of the bytes (largest remainder,
    so the counts sum to `flows`); every uplink 0 when none carried anything."""
    total = sum(max(b, 0.0) for b in bytes_by_uplink.values())
    if total <= 0 or flows <= 0:
        return dict.fromkeys(bytes_by_uplink, 0)
    quota = {u: max(b, 0.0) / total * flows for u, b in bytes_by_uplink.items()}
    out = {u: int(q) for u, q in quota.items()}
    left = flows - sum(out.values())
    for u in sorted(quota, key=lambda u: (out[u] - quota[u], u))[:left]:
        out[u] += 1
    return out


def ring_flows(hosts: Sequence[str], leaf_of: dict[str, str]) -> dict[str, int]:
    """The ring's flows (rank r's host -> rank r+1's) that leave each leaf for another, by leaf."""
    out: dict[str, int] = {}
    n = len(hosts)
    for r in range(n if n > 1 else 0):
        a, b = hosts[r], hosts[(r + 1) % n]
        if leaf_of[a] != leaf_of[b]:
            out[leaf_of[a]] = out.get(leaf_of[a], 0) + 1
    return out


def uplink_series(rows: list[dict[str, Any]], leaf: str, spines: Sequence[str]) -> list[tuple[float, dict]]:
    """(t, cumulative tx bytes per spine) of `leaf`'s uplinks, sample by sample, from controller rows."""
    by_t: dict[float, dict[str, float]] = {}
    for r in rows:
        if r.get("switch") == leaf and r.get("peer") in spines and r.get("kind", "port") == "port":
            by_t.setdefault(float(r["t"]), {})[r["peer"]] = float(r.get("tx_bytes") or 0)
    return [(t, v) for t, v in sorted(by_t.items()) if len(v) == len(spines)]


def leaf_figures(series: list[tuple[float, dict]], flows: int, spines: Sequence[str]) -> dict[str, Any]:
    """One leaf's ring flows per uplink over the window (first to last sample) and over time."""
    if len(series) < 2:
        return {
            "flows": flows,
            "per_uplink": None,
            "collided": None,
            "over_time": [],
            "collided_intervals": 0,
        }
    first, last = series[0][1], series[-1][1]
    window = {sp: last[sp] - first[sp] for sp in spines}
    per_uplink = flows_from_bytes(window, flows)
    over_time = []
    for (_t0, a), (t1, b) in zip(series, series[1:], strict=False):
        delta = {sp: b[sp] - a[sp] for sp in spines}
        if sum(delta.values()) >= MIN_WINDOW_BYTES:
            over_time.append({"t": t1, "flows": flows_from_bytes(delta, flows)})
    mean = sum(window.values()) / len(window) if window else 0.0
    return {
        "flows": flows,
        "bytes": window,
        "busiest_over_mean": max(window.values()) / mean if mean > 0 else None,
        "per_uplink": per_uplink,
        "collided": collided(per_uplink.values()),
        "over_time": over_time,
        "collided_intervals": sum(collided(o["flows"].values()) > 0 for o in over_time),
    }


def busbw_mbit(grad_bytes: int, seconds: float | None, ranks: int) -> float | None:
    """nccl-tests' bus bandwidth of an all-reduce: grad_bytes / seconds x 2(n-1)/n, in Mbit/s."""
    if not seconds or seconds <= 0 or ranks < 2:
        return None
    return grad_bytes * 8 / seconds / 1e6 * 2 * (ranks - 1) / ranks


def analyze_run(run_dir: Path) -> list[dict[str, Any]]:
    """One row per collective strategy of a run: its leaves' flows per uplink, collisions, the
    expected rate, busbw and iteration time (summary.json's medians)."""
    from runmodel.folder import RunFolder
    from runmodel.records import read_jsonl

    folder = RunFolder(run_dir)
    cfg = folder.config()
    plan = folder.plan()
    summary = (folder.summary_doc() or {}).get("strategies", {})
    leaf_of = {h.name: h.leaf for h in plan.hosts}
    spines = [s.name for s in plan.switches if s.role == "spine"]
    hosts = cfg.worker_hosts
    rows = []
    for name in cfg.strategies:
        kind = name.split(":")[0]
        if kind not in RING_KINDS:
            continue
        sf = folder.strategy(name)
        samples = read_jsonl(sf.timeseries_file) if sf.timeseries_file.exists() else []
        flows = ring_flows(hosts, leaf_of) if kind == "ring" else {}
        leaves = {}
        for leaf in sorted({leaf_of[h] for h in hosts}):
            series = uplink_series(samples, leaf, spines)
            leaves[leaf] = leaf_figures(series, flows.get(leaf, 0), spines)
        s = summary.get(name, {})
        comm = s.get("comm_time_s")
        known = [f["collided"] for f in leaves.values() if f["collided"] is not None]
        rows.append(
            {
                "strategy": name,
                "state": s.get("state", "missing"),
                "ranks": len(hosts),
                "uplinks": len(spines),
                "leaves": leaves,
                "ring_flows": sum(flows.values()) if kind == "ring" else None,
                "collided": sum(known) if kind == "ring" and known else None,
                "collision": any(k > 0 for k in known) if kind == "ring" and known else None,
                "expected_rate_leaf": (
                    expected_collision_rate(max(flows.values(), default=0), len(spines))
                    if kind == "ring"
                    else None
                ),
                "expected_rate": (
                    1 - math.prod(1 - expected_collision_rate(k, len(spines)) for k in flows.values())
                    if kind == "ring"
                    else None
                ),
                "iter_time_s": s.get("iter_time_s"),
                "comm_time_s": comm,
                "busbw_mbit": busbw_mbit(int(s.get("grad_bytes") or 0), comm, len(hosts)),
            }
        )
    return rows


def collision_share(rows: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(leaves whose ring flows collided on an uplink, leaves with ring flows measured), over the
    ring rows: each leaf's flows toward the other leaf are one draw of the hash."""
    seen = [
        f["collided"] > 0
        for r in rows
        if r.get("ring_flows")
        for f in r["leaves"].values()
        if f["flows"] and f["collided"] is not None
    ]
    return sum(seen), len(seen)
