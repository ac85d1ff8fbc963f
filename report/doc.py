"""The report as one document: a title, boxes at the top, sections of blocks.

Nothing here knows HTML or Markdown (report/html.py and report/markdown.py render it) or where the
numbers come from (report/sections/ builds it). A block is one of:

    Paragraph(text, note=False)          a sentence or two; note=True: small print
    Bullets(items)                       a list of sentences
    Table(heading, label_header, columns, rows, notes)
                                         a headed table; Column(header, doc, numeric); Row(label, cells, bad);
                                         `values` keeps the figures behind the cells (never rendered)
    Figure(key, png, title, caption)     a PNG with its caption; `data` keeps what was plotted
    Callout(title, items, tone)          a box: tone "warning", "info" or "verdict"
    Group(blocks)                        blocks side by side where the page is wide enough (small
                                         tables of one kind, e.g. one per strategy), one after the
                                         other in Markdown

and a Section is a title with blocks. Document(title, status, facts, callouts, sections) is the
whole page; callouts are the boxes shown above every section (warnings first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TONES = ("warning", "info", "verdict")


def slug(text: str) -> str:
    """An id for an anchor: "Bytes per link" -> "bytes-per-link"."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


@dataclass
class Paragraph:
    """Running text; `note` marks small print (sources, definitions)."""

    text: str
    note: bool = False


@dataclass
class Bullets:
    """A bulleted list of sentences."""

    items: list[str]


@dataclass
class Column:
    """A table column: its header, what it means (shown as a definition), numbers right-aligned."""

    header: str
    doc: str = ""
    numeric: bool = True


@dataclass
class Row:
    """A table row: its label (first column), the other cells as text, and whether to flag it."""

    label: str
    cells: list[str]
    bad: bool = False


@dataclass
class Table:
    """A table with a heading. `columns` covers every column after the label column, whose header is
    `label_header`; `notes` follow the table (what a "–" means, where the values come from)."""

    heading: str
    label_header: str
    columns: list[Column]
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    key: str = ""
    values: dict[str, dict[str, Any]] = field(default_factory=dict)  # row -> the figures shown (tests)

    def __post_init__(self) -> None:
        self.key = self.key or slug(self.heading)
        for row in self.rows:
            if len(row.cells) != len(self.columns):
                raise ValueError(
                    f"table {self.heading!r}: row {row.label!r} has {len(row.cells)} cells "
                    f"for {len(self.columns)} columns"
                )

    def cell(self, label: str, header: str) -> str:
        """The text of one cell (KeyError when there is no such row or column)."""
        j = [c.header for c in self.columns].index(header)
        return next(r for r in self.rows if r.label == label).cells[j]


@dataclass
class Figure:
    """A PNG figure. `title` is its short name (alt text, Markdown link text); `data` is what was
    plotted, kept for tests and never rendered."""

    key: str
    png: bytes
    title: str
    caption: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Callout:
    """A box: a warning (something is wrong with the run or its files), an info note, or a verdict."""

    title: str
    items: list[str]
    tone: str = "info"

    def __post_init__(self) -> None:
        if self.tone not in TONES:
            raise ValueError(f"callout tone must be one of {TONES}, got {self.tone!r}")


@dataclass
class Group:
    """Blocks shown side by side (wrapping) on the HTML page, one after the other in Markdown."""

    blocks: list[Paragraph | Bullets | Table | Figure | Callout]


Block = Paragraph | Bullets | Table | Figure | Callout | Group


def flat(blocks: list[Block]) -> list[Block]:
    """The blocks with every Group replaced by its own blocks, in page order."""
    out: list[Block] = []
    for b in blocks:
        out.extend(flat(list(b.blocks)) if isinstance(b, Group) else [b])
    return out


@dataclass
class Section:
    """A headed part of the page."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    key: str = ""

    def __post_init__(self) -> None:
        """A block that had nothing to show (None: e.g. a strategy killed before its data) is left out."""
        self.key = self.key or slug(self.title)
        self.blocks = [b for b in self.blocks if b is not None]

    def add(self, *blocks: Block | None) -> Section:
        """Append the blocks that are not None; returns the section."""
        self.blocks.extend(b for b in blocks if b is not None)
        return self


@dataclass
class Document:
    """The page: title, run status ("complete" or "incomplete"), one line of facts, the boxes at the
    top, then the sections."""

    title: str
    status: str
    facts: list[str] = field(default_factory=list)
    callouts: list[Callout] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def blocks(self) -> list[Block]:
        """Every block, callouts first, in page order (the blocks of a Group in its place)."""
        return flat([*self.callouts, *(b for s in self.sections for b in s.blocks)])

    def figures(self) -> list[Figure]:
        """The figures in page order."""
        return [b for b in self.blocks() if isinstance(b, Figure)]

    def tables(self) -> list[Table]:
        """The tables in page order."""
        return [b for b in self.blocks() if isinstance(b, Table)]

    def section(self, title: str) -> Section | None:
        """A section by title."""
        return next((s for s in self.sections if s.title == title), None)
