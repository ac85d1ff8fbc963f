"""Faults and controller events: every fault action (faults.jsonl), controller event (port down/up,
reroute, switch (dis)connected) and hole in the controller's statistics, with its time since the
strategy's first training step, as sentences for the findings and as a section of their own; and the
routing policy's decisions (a flow pinned to a spine or moved off one, with why) as a table.
"""

from __future__ import annotations

from report import series as S
from report.doc import Bullets, Column, Paragraph, Row, Section, Table
from report.run import RunView
from report.sections.common import all_gaps, all_marks
from runmodel.records import ControllerEvent


def fault_sentences(run: RunView) -> list[str]:
    out = []
    gaps = all_gaps(run)
    for name, ms in all_marks(run).items():
        faults = [m for m in ms if m.source == "fault"]
        events = [m for m in ms if m.source == "controller"]
        parts = []
        if faults:
            parts.append(
                f"{len(faults)} fault action{'s' if len(faults) != 1 else ''} ("
                + ", ".join(f"{m.label} at {m.t:.2f} s" for m in faults)
                + ")"
            )
        if events:
            n = sum(m.count for m in events)
            parts.append(
                f"{n} controller event{'s' if n != 1 else ''} ("
                + ", ".join(f"{m.kind} at {m.t:.2f} s" for m in events)
                + ")"
            )
        parts += [
            f"controller statistics missing for {g['seconds']:.1f} s ({g['t0']:.2f}-{g['t1']:.2f} s)"
            for g in gaps.get(name, [])
        ]
        if parts:
            out.append(f"{name} faults and events: " + "; ".join(parts) + ".")
    return out


def faults_and_events(run: RunView) -> Section | None:
    """Every fault, controller event and hole in the statistics, with its time."""
    marks, gaps = all_marks(run), all_gaps(run)
    rows = [
        Row(
            n,
            [
                f"{m.t:.2f}",
                "faults.jsonl" if m.source == "fault" else "controller",
                m.label + (f" (x{m.count})" if m.count > 1 else ""),
            ],
        )
        for n, ms in marks.items()
        for m in ms
    ]
    gap_items = [
        f"{n}: controller statistics missing for {g['seconds']:.1f} s ({g['t0']:.2f} s to "
        f"{g['t1']:.2f} s; poll interval {run.config.controller.interval:g} s), shaded in the "
        "timelines."
        for n, gs in gaps.items()
        for g in gs
    ]
    if not rows and not gap_items:
        return None
    sec = Section(
        "Faults and events",
        [
            Paragraph(
                "Times are seconds since the strategy's first training step, the origin of every "
                "timeline. Faults "
                "from faults.jsonl; controller events (port down/up, reroute, switch (dis)connected) from "
                f"timeseries.jsonl, those of one kind within {S.EVENT_CLUSTER_S:g} s merged.",
                note=True,
            )
        ],
    )
    if gap_items:
        sec.add(Bullets(gap_items))
    if rows:
        sec.add(
            Table(
                "Fault actions and controller events",
                "strategy",
                [Column("t (s)"), Column("source", numeric=False), Column("what", numeric=False)],
                rows,
            )
        )
    return sec


ROUTING_EVENTS = ("flow_pinned", "flow_moved")  # a policy's decisions (controller/policy.py)
MAX_DECISIONS = 40  # rows per strategy; the rest are in its timeseries.jsonl and controller.jsonl


def _decision(e: ControllerEvent) -> list[str]:
    d = e.detail
    return [
        str(d.get("flow", "?")),
        f"{d.get('old_path') or '-'} -> {d.get('new_path') or '-'}",
        str(d.get("why", "")),
    ]


def routing_decisions(run: RunView) -> Section | None:
    """Every flow the routing policy placed or moved during a strategy: when, which, from where to
    where and why (the controller's own words); none under ecmp, which decides nothing."""
    rows: list[Row] = []
    more: list[str] = []
    for s in run.timed:
        t0, window = s.t0, s.window
        found = [
            e
            for e in s.controller.events
            if e.event in ROUTING_EVENTS and t0 is not None and (not window or window[0] <= e.t <= window[1])
        ]
        rows += [Row(s.name, [f"{e.t - t0:.2f}", e.event, *_decision(e)]) for e in found[:MAX_DECISIONS]]
        if len(found) > MAX_DECISIONS:
            more.append(f"{s.name}: {len(found) - MAX_DECISIONS} more decisions in {s.name}/timeseries.jsonl")
    if not rows:
        return None
    policy = run.config.controller.routing
    sec = Section(
        "Routing decisions",
        [
            Paragraph(
                f"The routing policy {policy!r} placed these flows: pinned at their first packet or "
                "moved from one spine to another, with the controller's reason. Times are seconds since "
                "the strategy's first training step.",
                note=True,
            )
        ],
    )
    sec.add(
        Table(
            "Flows placed by the controller",
            "strategy",
            [
                Column("t (s)"),
                Column("decision", numeric=False),
                Column("flow", numeric=False),
                Column("path", numeric=False),
                Column("why", numeric=False),
            ],
            rows,
        )
    )
    if more:
        sec.add(Bullets(more))
    return sec
