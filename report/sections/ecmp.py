"""ECMP: how the leaves hashed the ring's flows onto their uplinks, in a run `make ecmp` made.

Reads the run's ecmp.json (analysis.ecmp, written by incastlab.ecmp beside summary.json): per
collective strategy and leaf, the ring flows per uplink over the window, how many shared an uplink,
the hash's expected collision rate, busbw and iteration time. No ecmp.json: no section. Every
number is a field of that file, formatted here.
"""

from __future__ import annotations

from typing import Any

from report.doc import Column, Paragraph, Row, Section, Table
from report.run import RunView
from runmodel.records import read_json

DASH = "-"


def _num(v: Any, fmt: str) -> str:
    return DASH if v is None else fmt.format(v)


def ecmp(run: RunView) -> Section | None:
    """The run's ring flows per uplink and collisions beside the hash's rate (ecmp.json)."""
    doc = read_json(run.folder.path / "ecmp.json", [])
    if not isinstance(doc, dict) or not doc.get("rows"):
        return None
    cols = [
        Column("leaf", "the leaf whose uplinks carry these flows toward the other leaf", numeric=False),
        Column("ring flows", "ring flows (rank r -> r+1) leaving this leaf for another"),
        Column(
            "flows per uplink",
            "each uplink's share of the leaf's uplink tx bytes over the strategy's window x its ring "
            "flows (the switches' port counters, largest-remainder rounding)",
            numeric=False,
        ),
        Column("collided", "flows on an uplink that carries 2 or more"),
        Column(
            "intervals collided",
            "controller sample intervals with uplink traffic in which 2+ flows shared an uplink, of all such "
            "intervals (a policy that moves flows ends collisions mid-run)",
            numeric=False,
        ),
        Column("expected collision rate", "1 - n!/((n-k)! n^k) for k flows on n uplinks"),
        Column("busbw (Mbit/s)", "grad bytes / comm_time_s x 2(n-1)/n"),
        Column("iteration (s)", "summary.json iter_time_s"),
    ]
    rows, values = [], {}
    for r in doc["rows"]:
        for leaf, f in r.get("leaves", {}).items():
            if r["strategy"].split(":")[0] == "ring" and not f.get("flows"):
                continue
            per = f.get("per_uplink")
            label = f"{r['strategy']} {leaf}"
            rows.append(
                Row(
                    label,
                    [
                        leaf,
                        str(f.get("flows") or DASH),
                        "/".join(map(str, per.values())) if per and f.get("flows") else DASH,
                        _num(f.get("collided") if f.get("flows") else None, "{}"),
                        (
                            f"{f.get('collided_intervals', 0)} of {len(f.get('over_time') or [])}"
                            if f.get("flows")
                            else DASH
                        ),
                        _num(r.get("expected_rate_leaf"), "{:.0%}"),
                        _num(r.get("busbw_mbit"), "{:.2f}"),
                        _num(r.get("iter_time_s"), "{:.3f}"),
                    ],
                    bad=bool(f.get("collided")),
                )
            )
            values[label] = {"per_uplink": per, "collided": f.get("collided")}
    table = Table(
        f"Ring flows per uplink (policy {doc.get('policy', '?')}, seed {doc.get('seed', '?')})",
        "strategy, leaf",
        cols,
        rows,
        key="ecmp",
        values=values,
    )
    text = (
        "Each leaf hashes its ring flows toward the other leaf onto its uplinks; the counts come from "
        "the leaves' uplink port counters (the ring moves equal bytes on every flow). A row in red "
        "put two or more flows on one uplink, which slows the whole ring to the shared link's pace."
    )
    return Section("ECMP collisions", [Paragraph(text), table], key="ecmp")
