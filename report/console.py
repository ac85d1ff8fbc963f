"""The one writer of the tables a command prints on the terminal, in the shape nccl-tests prints:
a header row, a units row, one row per result, and `#` footer lines that carry the fidelity verdict
and any goal's verdict. `compare`, `incast` and `make bench` print through it; analysis/ and bench/
compute the figures, this module only formats them.

A Table is its columns (title, unit, key, format, alignment) and its rows (objects or dicts); a cell
whose value is missing (None or NaN) shows as '-'. Columns are as wide as their widest text, so a
long name or value never shifts the columns after it.

`--json` prints the same Table as JSON (Table.to_doc, schema TABLE_SCHEMA): the columns (title,
unit, key), one object per row holding each column's value unformatted under its key (null when
missing) and the row's note, and the footer lines; a script reads the figures, not the text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = "-"
GAP = 2  # spaces between two columns
GOAL_MARK = {True: "met", False: "NOT met", None: "not measured"}
TABLE_SCHEMA = "incastlab.table/1"  # Table.to_doc's shape; a new number when a key changes meaning


@dataclass(frozen=True)
class Col:
    """One column: its title and unit (the two header rows), where its value is (an attribute or
    dict key of the row, or a function of the row), and how it is written (a format string or a
    function of the value)."""

    title: str
    unit: str = ""
    key: str | Callable[[Any], Any] = ""
    fmt: str | Callable[[Any], str] = "{}"
    align: str = ">"  # ">" numbers, "<" names
    name: str = ""  # the value's key in the JSON rows (default: `key` when it is a name, else title)

    @property
    def json_key(self) -> str:
        """The key of this column's value in Table.to_doc's rows."""
        return self.name or (self.key if isinstance(self.key, str) and self.key else self.title)

    def value(self, row: Any) -> Any:
        """The row's value of this column (None when the row has none, or it is NaN or infinite)."""
        if callable(self.key):
            v = self.key(row)
        else:
            key = self.key or self.title
            v = row.get(key) if isinstance(row, dict) else getattr(row, key, None)
        return None if isinstance(v, float) and not math.isfinite(v) else v

    def text(self, row: Any) -> str:
        """The cell's text: the formatted value, or '-' when it is missing."""
        v = self.value(row)
        if v is None:
            return MISSING
        return self.fmt(v) if callable(self.fmt) else self.fmt.format(v)


@dataclass
class Table:
    """Columns, rows, an optional trailing note per row (e.g. a run's state) and `#` footer lines."""

    columns: Sequence[Col]
    rows: Sequence[Any]
    footer: list[str] = field(default_factory=list)
    note: Callable[[Any], str] | None = None

    def render(self) -> str:
        """The table as aligned text lines joined by newlines."""
        body = [[c.text(r) for c in self.columns] for r in self.rows]
        widths = [
            max([len(c.title), len(c.unit), *(len(cells[i]) for cells in body)])
            for i, c in enumerate(self.columns)
        ]

        def line(cells: list[str], note: str = "") -> str:
            parts = [f"{t:{c.align}{w}}" for t, c, w in zip(cells, self.columns, widths, strict=True)]
            return ((" " * GAP).join(parts) + (f"  {note}" if note else "")).rstrip()

        out = [line([c.title for c in self.columns]), line([c.unit for c in self.columns])]
        for r, cells in zip(self.rows, body, strict=True):
            out.append(line(cells, self.note(r) if self.note else ""))
        out += [f"# {text}" for text in self.footer]
        return "\n".join(out)

    def to_doc(self) -> dict[str, Any]:
        """The table as a JSON document: schema, columns (title, unit, key), rows (each column's
        value under its key, null when missing; `note` when the row has one) and footer lines."""
        rows = []
        for r in self.rows:
            obj = {c.json_key: c.value(r) for c in self.columns}
            note = self.note(r) if self.note else ""
            rows.append({**obj, "note": note} if note else obj)
        return {
            "schema": TABLE_SCHEMA,
            "columns": [{"title": c.title, "unit": c.unit, "key": c.json_key} for c in self.columns],
            "rows": rows,
            "footer": list(self.footer),
        }

    def render_json(self, **extra: Any) -> str:
        """to_doc, and `extra` keys (e.g. the run folder), as strict JSON text (what `--json` prints)."""
        return json.dumps({**self.to_doc(), **extra}, indent=1, allow_nan=False)


def fidelity_footer(fid: dict[str, Any] | None, shown: int = 3) -> list[str]:
    """The fidelity verdict as footer lines: the verdict, then its first `shown` reasons."""
    fid = fid or {}
    reasons = list(fid.get("reasons") or [])
    out = [f"fidelity: {fid.get('verdict') or 'unknown'}"]
    out += [f"  {r}" for r in reasons[:shown]]
    if len(reasons) > shown:
        out.append(f"  ... and {len(reasons) - shown} more (see the report)")
    return out


def goal_text(goal: str, met: bool | None, value: Any = None) -> str:
    """A goal and its verdict, the one wording every goal is said in: 'met: <goal> (measured <v>)'."""
    shown = (
        ""
        if value is None
        else f" (measured {value:.0%})"
        if isinstance(value, float)
        else f" (measured {value})"
    )
    return f"{GOAL_MARK[met]}: {goal}{shown}"


# -- the tables of the commands ---------------------------------------------------------------------
def _pct(v: float) -> str:
    return f"{v:.0%}"


def comparison_table(summary: Any) -> str:
    """The side-by-side table printed at the end of `compare` (a RunSummary), as text."""
    return comparison(summary).render()


def comparison(summary: Any) -> Table:
    """The side-by-side Table of `compare` (a RunSummary): one row per strategy, its JSON keys the
    summary's field names, the run's fidelity verdict in the footer."""
    cols = [
        Col("strategy", "", lambda kv: kv[0], align="<", name="strategy"),
        *(
            Col(title, unit, lambda kv, k=key: getattr(kv[1], k, None), fmt, name=key)
            for key, title, unit, fmt in (
                ("iter_time_s", "iter", "s", "{:.3f}"),
                ("comm_time_s", "comm", "s", "{:.3f}"),
                ("final_loss", "loss", "", "{:.4f}"),
                ("ps_port_drops", "PS-port drops", "pkts", "{:d}"),
                ("queue_drops_total", "queue drops", "pkts", "{:d}"),
                ("tcp_retransmits_kernel", "retx (kernel)", "segs", "{:d}"),
                ("tcp_retransmits_pcap", "retx (pcap)", "segs", "{:d}"),
                ("tcp_timeouts_kernel", "RTOs (kernel)", "count", "{:d}"),
                ("tcp_timeouts_pcap", "RTOs (pcap)", "count", "{:d}"),
                ("busiest_link_utilisation", "busiest link", "of rate", _pct),
            )
        ),
    ]
    return Table(
        cols,
        list(summary.strategies.items()),
        footer=fidelity_footer(summary.fidelity),
        note=lambda kv: "" if kv[1].state == "complete" else f"({kv[1].state})",
    )


def incast_table(result: Any) -> str:
    """The table printed at the end of `incastlab incast` (an IncastResult), as text."""
    return incast(result).render()


def incast(result: Any) -> Table:
    """The Table of `incastlab incast` (an IncastResult): one row per point, its JSON keys and values
    incast.json's row fields (the round in s, shown in ms); a point's state when it is not complete
    as the row's note; the curves not run, the sweep's fidelity verdict and its goals in the footer."""
    cols = [
        Col("curve", "", "line", align="<"),
        Col("N", "senders", "senders", "{:d}"),
        Col("goodput", "Mbit/s", "goodput_mbit", "{:.2f}"),
        Col("link", "share", "goodput_frac", _pct),
        Col("round", "ms", "round_s_median", lambda v: f"{v * 1000:.1f}"),
        Col("RTOs kernel", "count", "timeouts_kernel", "{:d}"),
        Col("RTOs pcap", "count", "timeouts_pcap", "{:d}"),
        Col("TLPs kernel", "count", "loss_probes_kernel", "{:d}"),
        Col("waits", "x RTOmin", "timer_waits", "{:d}"),
        Col("idle", "s", "timeout_idle_s", "{:.2f}"),
        Col("explained", "share", "explained_frac", _pct),
        Col("verdict", "", "verdict", align="<"),
    ]
    footer = [f"{item['line']}: not run: {item['reason']}" for item in result.not_run]
    footer += fidelity_footer(result.fidelity)
    footer += [f"goal {goal_text(g['goal'], g['met'], g['value'])}" for g in result.goals]
    return Table(
        cols, result.rows, footer=footer, note=lambda r: "" if r.state == "complete" else f"({r.state})"
    )


def table_text(table: Table, run_dir: Path | str, as_json: bool) -> str:
    """A command's table as text, or with as_json as JSON with the run folder's path under `run`
    (a script's one stdout document)."""
    return table.render_json(run=str(run_dir)) if as_json else table.render()
