"""The document as Markdown: pipe tables, figures linked as figures/<key>.png next to the file."""

from __future__ import annotations

from report.doc import Block, Bullets, Callout, Document, Figure, Group, Paragraph, Section, Table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> list[str]:
    out = [
        f"### {t.heading}",
        "",
        "| " + " | ".join(_cell(h) for h in [t.label_header, *(c.header for c in t.columns)]) + " |",
        "|---|" + "".join("---:|" if c.numeric else "---|" for c in t.columns),
    ]
    out += ["| " + " | ".join(_cell(v) for v in [r.label, *r.cells]) + " |" for r in t.rows]
    for n in t.notes:
        out += ["", n]
    docs = [c for c in t.columns if c.doc]
    if docs:
        out += ["", "Columns:", ""] + [f"- **{c.header}**: {c.doc}" for c in docs]
    return out


def _callout(c: Callout) -> list[str]:
    head = f"WARNING: {c.title}" if c.tone == "warning" else c.title
    return [f"> **{head}**", ">"] + [f"> - {i}" for i in c.items]


def _block(b: Block, figures: str) -> list[str]:
    if isinstance(b, Paragraph):
        return [f"*{b.text}*" if b.note else b.text]
    if isinstance(b, Bullets):
        return [f"- {i}" for i in b.items]
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Figure):
        return [f"![{b.title}]({figures}/{b.key}.png)", "", f"*{b.caption}*"]
    if isinstance(b, Callout):
        return _callout(b)
    if isinstance(b, Group):
        out: list[str] = []
        for x in b.blocks:
            out += ([""] if out else []) + _block(x, figures)
        return out
    raise TypeError(f"not a block: {type(b).__name__}")


def _section(s: Section, figures: str) -> list[str]:
    out = [f"## {s.title}"]
    for b in s.blocks:
        out += [""] + _block(b, figures)
    return out


def render_markdown(doc: Document, figures: str = "figures") -> str:
    """The page; `figures` is the folder of the PNGs relative to the Markdown file."""
    status = "complete" if doc.status == "complete" else "INCOMPLETE"
    out = [f"# {doc.title} ({status})", ""]
    if doc.facts:
        out += [" · ".join(doc.facts), ""]
    for c in doc.callouts:
        out += _callout(c) + [""]
    for s in doc.sections:
        out += _section(s, figures) + [""]
    return "\n".join(out).rstrip("\n") + "\n"
