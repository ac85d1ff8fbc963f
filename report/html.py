"""The document as one self-contained HTML page: inline CSS, figures inlined as base64 PNGs, no
scripts, no external links."""

from __future__ import annotations

import base64
from html import escape

from report.doc import Block, Bullets, Callout, Document, Figure, Group, Paragraph, Section, Table

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.2em auto;max-width:1320px;
color:#222;padding:0 1.2em;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}
h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
h3{font-size:1.02em;margin:1.2em 0 .4em}
.status{font-size:.6em;padding:.15em .5em;border-radius:.3em;vertical-align:middle}
.status.complete{background:#d4edda;color:#155724}.status.incomplete{background:#f8d7da;color:#721c24}
.facts{color:#444;font-size:.92em;margin:.2em 0 1em}
.callout{border:1px solid;border-radius:.35em;padding:.5em .9em;margin:.6em 0}
.callout p{margin:.1em 0 .3em;font-weight:600}.callout ul{margin:.2em 0;padding-left:1.3em}
.callout.warning{background:#fff3cd;border-color:#e0b000}
.callout.info{background:#eef5fb;border-color:#9cc3e4}
.callout.verdict{background:#f3f0fa;border-color:#a593cf}
.note{color:#555;font-size:.88em;margin:.3em 0}
table{border-collapse:collapse;font-size:.86em;font-variant-numeric:tabular-nums;margin:.2em 0 .3em}
th,td{border:1px solid #ccc;padding:.28em .5em}
td{text-align:right;white-space:nowrap}td.text{text-align:left}
thead th{background:#f2f2f2;text-align:center;vertical-align:bottom;font-weight:600;max-width:9em}
tbody th{text-align:left;max-width:13em}tr.bad th,tr.bad td.state{color:#b00;font-weight:600}
details{font-size:.85em;color:#444;margin:.2em 0 .8em}details dl{margin:.3em 0 0 .5em}
dt{font-weight:600;float:left;clear:left;margin-right:.5em}dd{margin:0 0 .15em 0}
figure{margin:1em 0 1.4em}figure img{max-width:100%;height:auto;display:block}
figcaption{color:#444;font-size:.88em;margin-top:.3em;max-width:62em}
.group{display:flex;flex-wrap:wrap;gap:.2em 1.6em;align-items:flex-start}.group>div{min-width:0}
.callout li{margin:.15em 0}
"""
TEXT_CELL, BAD_ROW, NOTE = " class='text'", " class='bad'", " class='note'"
SHY = {
    "retransmissions": "retrans&shy;missions",
    "retransmits": "retrans&shy;mits",
    "utilisation": "utili&shy;sation",
}  # long header words, where they may break


def _head(text: str) -> str:
    """A column header: escaped, long words given a place to break (soft hyphens)."""
    return " ".join(SHY.get(w, w) for w in escape(text).split(" "))


def _label(text: str) -> str:
    """A row label: escaped, free to wrap after a ':' (ps:shards=2:placement=colocated)."""
    return escape(text).replace(":", ":<wbr>")


def _table(t: Table) -> str:
    head = f"<th>{escape(t.label_header)}</th>" + "".join(
        f"<th title='{escape(c.doc, quote=True)}'>{_head(c.header)}</th>" for c in t.columns
    )
    body = []
    for r in t.rows:
        cells = "".join(
            f"<td{'' if c.numeric else TEXT_CELL}>{escape(v)}</td>"
            for c, v in zip(t.columns, r.cells, strict=True)
        )
        body.append(f"<tr{BAD_ROW if r.bad else ''}><th>{_label(r.label)}</th>{cells}</tr>")
    out = [
        f"<h3 id='table-{t.key}'>{escape(t.heading)}</h3>",
        f"<table id='{t.key}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>",
    ]
    out += [f"<p class='note'>{escape(n)}</p>" for n in t.notes]
    docs = [c for c in t.columns if c.doc]
    if docs:
        out.append(
            "<details><summary>What the columns mean</summary><dl>"
            + "".join(f"<dt>{escape(c.header)}</dt><dd>{escape(c.doc)}</dd>" for c in docs)
            + "</dl></details>"
        )
    return "\n".join(out)


def _figure(f: Figure) -> str:
    b64 = base64.b64encode(f.png).decode("ascii")
    return (
        f"<figure id='fig-{f.key}'><img alt='{escape(f.title, quote=True)}' "
        f"src='data:image/png;base64,{b64}'><figcaption>{escape(f.caption)}</figcaption></figure>"
    )


def _callout(c: Callout) -> str:
    mark = "&#9888; " if c.tone == "warning" else ""
    items = "".join(f"<li>{escape(i)}</li>" for i in c.items)
    return f"<div class='callout {c.tone}'><p>{mark}{escape(c.title)}</p><ul>{items}</ul></div>"


def _block(b: Block) -> str:
    if isinstance(b, Paragraph):
        return f"<p{NOTE if b.note else ''}>{escape(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Figure):
        return _figure(b)
    if isinstance(b, Callout):
        return _callout(b)
    if isinstance(b, Group):
        return "<div class='group'>" + "".join(f"<div>{_block(x)}</div>" for x in b.blocks) + "</div>"
    raise TypeError(f"not a block: {type(b).__name__}")


def _section(s: Section) -> str:
    return "\n".join([f"<h2 id='{s.key}'>{escape(s.title)}</h2>", *(_block(b) for b in s.blocks)])


def render_html(doc: Document) -> str:
    """The page."""
    status = "complete" if doc.status == "complete" else "incomplete"
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(doc.title)} <span class='status {status}'>{status.upper()}</span></h1>",
    ]
    if doc.facts:
        parts.append(f"<p class='facts'>{escape(' · '.join(doc.facts))}</p>")
    parts += [_callout(c) for c in doc.callouts]
    parts += [_section(s) for s in doc.sections]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
