"""The one writer of the tables a command prints on the terminal, in the shape nccl-tests prints:
a header row, a units row, one row per result, and `#` footer lines that carry the fidelity verdict
and any goal's verdict. `compare`, `incast` and `make bench` print through it; analysis/ and bench/
compute the figures, this module only formats them.

A Table is its columns (title, unit, key, format, alignment) and its rows (objects or dicts); a cell
whose value is missing (None or NaN) shows as '-'. Columns are as wide as their widest text, so a
long name or value never shifts the columns after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

MISSING = "-"
GAP = 2  # spaces between two columns
GOAL_MARK = {True: "met", False: "NOT met", None: "not measured"}


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

    def value(self, row: Any) -> Any:
        """The row's value of this column (None when the row has none)."""
        if callable(self.key):
            return self.key(row)
        key = self.key or self.title
        return row.get(key) if isinstance(row, dict) else getattr(row, key, None)

    def text(self, row: Any) -> str:
        """The cell's text: the formatted value, or '-' when it is missing."""
        v = self.value(row)
        if v is None or (isinstance(v, float) and math.isnan(v)):
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
    """The side-by-side table printed at the end of `compare` (a RunSummary): one row per strategy,
    the run's fidelity verdict in the footer."""
    cols = [
        Col("strategy", "", lambda kv: kv[0], align="<"),
        *(
            Col(title, unit, lambda kv, k=key: getattr(kv[1], k, None), fmt)
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
    ).render()


def incast_table(result: Any) -> str:
    """The table printed at the end of `incastlab incast` (an IncastResult): one row per point; the
    curves not run, the sweep's fidelity verdict and its goals in the footer."""

    def verdict(r: Any) -> str:
        return (r.verdict or MISSING) + ("" if r.state == "complete" else f" ({r.state})")

    cols = [
        Col("curve", "", "line", align="<"),
        Col("N", "senders", "senders", "{:d}"),
        Col("goodput", "Mbit/s", "goodput_mbit", "{:.2f}"),
        Col("link", "share", "goodput_frac", _pct),
        Col("round", "ms", lambda r: None if r.round_s_median is None else r.round_s_median * 1000, "{:.1f}"),
        Col("RTOs kernel", "count", "timeouts_kernel", "{:d}"),
        Col("RTOs pcap", "count", "timeouts_pcap", "{:d}"),
        Col("TLPs kernel", "count", "loss_probes_kernel", "{:d}"),
        Col("waits", "x RTOmin", "timer_waits", "{:d}"),
        Col("idle", "s", "timeout_idle_s", "{:.2f}"),
        Col("explained", "share", "explained_frac", _pct),
        Col("verdict", "", verdict, align="<"),
    ]
    footer = [f"{item['line']}: not run: {item['reason']}" for item in result.not_run]
    footer += fidelity_footer(result.fidelity)
    footer += [f"goal {goal_text(g['goal'], g['met'], g['value'])}" for g in result.goals]
    return Table(cols, result.rows, footer=footer).render()
