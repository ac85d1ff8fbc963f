"""What the page says, as one registry: for each kind of report page, its boxes at the top and its
sections, each built by one function of the run's view.

A callout function takes the view (for a compare run the RunView: run.summary, the RunSummary, and
run.folder, the RunFolder) and returns a Callout or None; a section function returns a Section or None
(None: nothing to say for this run, so no empty panel). A Page (report/sections/page.py) lists them in
page order; a new section, or a verdict box at the top, is one more function in one of these lists.

    tables.py      cell formatting, the summary tables' columns, the Comparison section
    common.py      colours, marks, the time axis, series several sections plot
    overview.py    the facts line, the warning boxes, the Findings
    fidelity.py    the fidelity verdict box and the Fidelity section
    timing.py      iteration time against the bounds, the split of communication time
    cures.py       the PS variants against the plain PS and the ring
    parallel.py    the model splits beside the ring: who sent what where, traffic matrix vs theory
    ecmp.py        the ring's flows per uplink and their collisions (a `make ecmp` run's ecmp.json)
    queues.py      switch queues, hot ports, drops and retransmissions over time
    traffic.py     goodput, link utilisation, bytes per link
    events.py      faults, controller events, holes in the statistics, the routing policy's decisions
    stragglers.py  stragglers and convergence
    incast.py      the incast sweep's page (an IncastView: incast.json, timeline.json)

Every number in a table or a sentence is a field of summary.json (the RunSummary), formatted here and
nowhere computed; the figures plot the series of report/series.py.
"""

from __future__ import annotations

from collections.abc import Callable

from report.doc import Callout, Section
from report.run import IncastView, RunView
from report.sections import (
    cures,
    ecmp,
    events,
    fidelity,
    incast,
    overview,
    parallel,
    queues,
    stragglers,
    tables,
    timing,
    traffic,
)
from report.sections.overview import facts
from report.sections.page import Page

CALLOUTS: list[Callable[[RunView], Callout | None]] = [
    fidelity.fidelity_verdict,
    overview.incomplete_run,
    overview.capture_problems,
    overview.damaged_files,
    overview.summary_rebuilt,
]
SECTIONS: list[Callable[[RunView], Section | None]] = [
    overview.findings,
    tables.comparison,
    timing.iteration_time,
    cures.cures,
    parallel.parallel,
    ecmp.ecmp,
    queues.ps_queue,
    queues.drops_over_time,
    traffic.goodput,
    traffic.utilisation,
    traffic.bytes_per_link,
    fidelity.fidelity,
    events.faults_and_events,
    events.routing_decisions,
    stragglers.stragglers,
]
RUN: Page[RunView] = Page(
    title=lambda run: f"incastlab report: {run.folder.path.name}",
    status=lambda run: "complete" if run.summary.complete else "incomplete",
    facts=facts,
    callouts=CALLOUTS,
    sections=SECTIONS,
)
INCAST: Page[IncastView] = Page(
    title=lambda sweep: f"incastlab incast: {sweep.name}",
    status=lambda sweep: "complete" if sweep.result.complete else "incomplete",
    facts=incast.facts,
    callouts=[incast.fidelity_verdict, incast.goals, incast.not_run],
    sections=[
        incast.findings_section,
        incast.curve,
        incast.collapsed_round,
        incast.cause,
        incast.scaling,
        incast.degraded_points,
    ],
)
PAGES: dict[str, Page] = {"run": RUN, "incast": INCAST}  # every kind of report page, by its kind of run

__all__ = ["CALLOUTS", "INCAST", "PAGES", "RUN", "SECTIONS", "Page", "facts"]
