"""The incast sweep's report: incast.json and timeline.json -> report.html, report.md, figures/*.png.

The page is the registry's INCAST page (report/sections/incast.py: its callouts and sections, in page
order), its two figures those of report/figures/incast.py: the curve (`incast-curve`), goodput against
the number of senders, one line per curve, and the timeline (`incast-timeline`), one collapsed round
packet by packet. It is written the way a compare run's report is (report/build.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from report.build import write_document
from report.doc import Document
from report.figures.incast import curve_figure, timeline_figure
from report.run import IncastView
from report.sections import INCAST
from runmodel.incast import IncastFolder, IncastResult, IncastRow


def build_incast_document(result: IncastResult, tl: dict[str, Any] | None, name: str) -> Document:
    """The page of a sweep: its result, the collapsed round of timeline.json (or None), its name."""
    return INCAST.document(IncastView(result, tl, name))


def build_incast_report(run_dir: Path | str, out: Path | None = None) -> dict[str, Any]:
    """Write report.html, report.md and figures/*.png of a sweep's run folder (into `out` when given);
    returns the files and the document. ParamError (one line) when the folder has no readable
    incast.json."""
    folder = IncastFolder(Path(run_dir))
    doc = INCAST.document(IncastView.open(folder))
    return {**write_document(doc, folder, out), "document": doc}


__all__ = ["IncastRow", "build_incast_document", "build_incast_report", "curve_figure", "timeline_figure"]
