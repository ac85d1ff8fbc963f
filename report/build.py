"""build_report(run_dir): summary.json and the run folder -> report.html, report.md, figures/*.png."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from report.doc import Callout, Document, Section
from report.html import render_html
from report.markdown import render_markdown
from report.run import RunView
from report.sections import RUN
from runmodel.folder import RunFolder


def build_document(
    run: RunView,
    sections: list[Callable[[RunView], Section | None]] | None = None,
    callouts: list[Callable[[RunView], Callout | None]] | None = None,
) -> Document:
    """The page of a run: every callout and section function of the run page (report/sections) that
    has something to say; `sections` and `callouts` replace its lists."""
    return RUN.document(run, sections, callouts)


def write_document(doc: Document, run: RunView | RunFolder, out: Path | None = None) -> dict[str, Any]:
    """report.html (self-contained), report.md and figures/<key>.png into the run's folder (a RunView's,
    or a RunFolder such as an IncastFolder), or into `out` (made if missing) under the same names; stale
    PNGs of an older build go."""
    folder = run if isinstance(run, RunFolder) else run.folder
    dest = folder.path if out is None else Path(out)
    figures_dir = dest / folder.figures_dir.name
    html, md = dest / folder.report_html.name, dest / folder.report_md.name
    figures_dir.mkdir(parents=True, exist_ok=True)
    pngs = {}
    for f in doc.figures():
        path = figures_dir / f"{f.key}.png"
        path.write_bytes(f.png)
        pngs[f.key] = path
    for old in figures_dir.glob("*.png"):
        if old not in pngs.values():
            old.unlink()
    html.write_text(render_html(doc), encoding="utf-8")
    md.write_text(render_markdown(doc, figures_dir.name), encoding="utf-8")
    return {"html": html, "md": md, "figures": pngs}


def build_report(run_dir: Path | str, out: Path | None = None) -> dict[str, Any]:
    """Write the report of a run folder (into `out` when given); returns the files written and what
    the page shows.

    Keys: files (html, md, figures: key -> path), complete, summary_rebuilt (why, or None), ps_port,
    strategies, straggler, sections (titles), callouts ({title, tone, items}), findings, tables
    (key -> heading, label_header, headers, rows: label -> cells, values: label -> summary figures)
    and figures (key -> the data it plots)."""
    run = RunView.open(run_dir)
    doc = build_document(run)
    files = write_document(doc, run, out)
    found = doc.section("Findings")
    return {
        "run_dir": run.folder.path,
        "files": files,
        "complete": run.summary.complete,
        "summary_rebuilt": run.rebuilt,
        "ps_port": run.ps_port,
        "strategies": list(run.strategies),
        "straggler": run.has_stragglers,
        "sections": [s.title for s in doc.sections],
        "callouts": [{"title": c.title, "tone": c.tone, "items": c.items} for c in doc.callouts],
        "findings": [i for b in (found.blocks if found else []) for i in getattr(b, "items", [])],
        "tables": {
            t.key: {
                "heading": t.heading,
                "label_header": t.label_header,
                "headers": [c.header for c in t.columns],
                "rows": {r.label: r.cells for r in t.rows},
                "values": t.values,
            }
            for t in doc.tables()
        },
        "figures": {f.key: f.data for f in doc.figures()},
    }
