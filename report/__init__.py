"""The report: the top of the data flow (topologies -> controller -> workloads -> capture -> analysis ->
report). It renders summary.json (rebuilt by analysis.summary when missing) and plots time series
binned from the run model's records and from the per-strategy files analysis.summary writes next to
it (goodput_timeline.json, retransmits_timeline.json, rto_events.json, dequeue.json): the pcaps are
read once, by the summary. At the top of the page: the fidelity verdict.

    run.py       RunView: the RunSummary and the RunFolder's typed records, read once; IncastView
                 for an incast sweep
    series.py    the data of the figures (per step, per poll, per bin), nothing the summary holds
    figures/     matplotlib figures on the Agg canvas, one module per job of the page
    doc.py       the document model: Document, Section, Paragraph, Bullets, Table, Figure, Callout
    sections/    the callouts and sections of each page, one function of the view each, and the
                 registry of pages (Page: title, facts, callouts and sections in page order)
    html.py, markdown.py   the two renderers
    console.py   the tables the commands print (compare, incast, make bench): a header row, a units
                 row, the rows and `#` footer lines with the fidelity and goal verdicts
    build.py     build_report(run_dir): all of it, written into the run folder
    incast.py    build_incast_report(run_dir): the incast sweep's page, through the same registry
"""

from report.build import build_report

__all__ = ["build_report"]
