"""Faults and controller events: every fault action (faults.jsonl), controller event (port down/up,
reroute, switch (dis)connected) and hole in the controller's statistics, with its time since the
strategy's first training step, as sentences for the findings and as a section of their own.
"""

from __future__ import annotations

from report import series as S
from report.doc import Bullets, Column, Paragraph, Row, Section, Table
from report.run import RunView
from report.sections.common import all_gaps, all_marks


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
