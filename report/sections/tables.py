"""The summary tables: how a summary.json value is written in a cell, the columns of each table (the
StrategySummary field each shows), one row per strategy, notes on why a cell is "–", and the
Comparison section made of them.

Every number in a table is a field of summary.json (the RunSummary), formatted here and nowhere
computed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from report.doc import Column, Paragraph, Row, Section, Table
from report.run import RunView
from runmodel.summary import StrategySummary

DASH = "–"
DOCS = {f.name: f.metadata.get("doc", "") for f in fields(StrategySummary)}
PCAP_FIELDS = {f.name for f in fields(StrategySummary) if f.metadata.get("source") == "pcaps"}


def is_num(v: Any) -> bool:
    """A number, and not a bool."""
    return isinstance(v, int | float) and not isinstance(v, bool)


# how a number of each kind is written (int: truncated to a whole number; pct: a share, x 100)
FORMATS = {"int": "{:d}", "s": "{:.3f}", "loss": "{:.4f}", "pct": "{:.1f} %", "f1": "{:.1f}", "f2": "{:.2f}"}


def fmt(v: Any, kind: str) -> str:
    """A summary value as table text ("–" when there is none; kinds without a format: as it is)."""
    if v is None or (kind != "text" and not is_num(v)):
        return DASH
    if kind not in FORMATS:
        return str(v)
    return FORMATS[kind].format(int(v) if kind == "int" else v * 100 if kind == "pct" else v)


class Col:
    """A column of a summary table: its header, the summary field it shows (the first of `keys` that
    StrategySummary has: fields get renamed), how it is formatted."""

    def __init__(
        self,
        header: str,
        keys: str | tuple[str, ...],
        kind: str = "int",
        text: Callable[[StrategySummary], str] | None = None,
        doc: str = "",
    ) -> None:
        names = (keys,) if isinstance(keys, str) else keys
        self.key = next((k for k in names if k in DOCS), "")
        self.header, self.kind, self._text = header, kind, text
        self.doc = doc or DOCS.get(self.key, "")

    def cell(self, fig: StrategySummary) -> str:
        return self._text(fig) if self._text else fmt(getattr(fig, self.key, None), self.kind)

    def column(self) -> Column:
        return Column(self.header, self.doc, numeric=self.kind != "text")


def known(cols: list[Col]) -> list[Col]:
    """The columns whose field the summary has."""
    return [c for c in cols if c.key]


def ratio_text(a: float | None, b: float | None) -> str:
    """a / b in two decimals ("–" without both)."""
    return f"{a / b:.2f}" if is_num(a) and is_num(b) and b else DASH


def bracketed(v: Any, kind: str, bracket: str | None) -> str:
    """A value as table text with `bracket` after it in brackets, where both are there: the port with
    the most drops, the busiest link direction."""
    text = fmt(v, kind)
    return f"{text} ({bracket})" if bracket and text != DASH else text


def bracket_col(
    header: str, key: str, kind: str, bracket: Callable[[StrategySummary], str | None], bracket_doc: str
) -> Col:
    """A column of the field `key` with `bracket` of the strategy in brackets (bracket_doc says what)."""
    return Col(
        header,
        key,
        kind,
        text=lambda f: bracketed(getattr(f, key), kind, bracket(f)),
        doc=DOCS[key] + "; in brackets: " + bracket_doc,
    )


def busiest_utilised(f: StrategySummary) -> str | None:
    """The link direction with busiest_link_utilisation (the highest of link_utilisation)."""
    lu = f.link_utilisation
    return max(lu, key=lambda k: lu[k]) if lu else None


def busiest_util_text(f: StrategySummary) -> str:
    """busiest_link_utilisation as a percentage, the link direction in brackets."""
    return bracketed(f.busiest_link_utilisation, "pct", busiest_utilised(f))


TIMING_COLUMNS = [
    Col("state", "state", "text"),
    Col("steps", "steps"),
    Col("iteration (s)", "iter_time_s", "s"),
    Col("comm (s)", "comm_time_s", "s"),
    Col("wait (s)", "wait_time_s", "s"),
    Col("compute (s)", "compute_time_s", "s"),
    Col("wall time (s)", "wall_time_s", "s"),
    Col("throughput (samples/s)", "throughput_samples_per_s", "f1"),
    Col("compute share", "worker_compute_share", "pct"),
    Col("first loss", "first_loss", "loss"),
    Col("final loss", "final_loss", "loss"),
]


QUEUE_COLUMNS = [
    Col("queue drops, all ports", "queue_drops_total"),
    Col("PS-port drops", "ps_port_drops"),
    bracket_col(
        "most drops at one port", "max_port_drops", "int", lambda f: f.max_drop_port, DOCS["max_drop_port"]
    ),
    Col("lost in the fabric (pcap)", "fabric_drops_pcap"),
    Col("lost before the PS port (pcap)", "drops_on_path_to_ps_pcap"),
    bracket_col(
        "busiest link utilisation",
        "busiest_link_utilisation",
        "pct",
        busiest_utilised,
        "that link direction (the highest of link_utilisation: " + DOCS["link_utilisation"] + ")",
    ),
    bracket_col(
        "busiest link, share of all link bytes",
        "max_link_share",
        "pct",
        lambda f: f.busiest_link,
        DOCS["busiest_link"],
    ),
    Col("links under 5 % of the busiest", "links_under_5pct_of_busiest"),
    Col("ECMP imbalance", "ecmp_imbalance", "f2"),
]


TCP_COLUMNS = [
    Col("retransmissions (kernel)", "tcp_retransmits_kernel"),
    Col("retransmissions (pcap)", "tcp_retransmits_pcap"),
    Col("timeouts (kernel)", "tcp_timeouts_kernel"),
    Col("timeouts (pcap)", "tcp_timeouts_pcap"),
    Col("tail-loss probes (kernel)", "tcp_loss_probes_kernel"),
    Col("fast retransmits (kernel)", "tcp_fast_retrans_kernel"),
    Col("fast retransmissions (tshark)", "wireshark_fast_retransmits"),
    Col("dup-ACK retransmissions (our rule)", ("dupack_retransmits_pcap", "tcp_fast_retransmits")),
    Col("timeout stall (s)", "timeout_stall_s", "s"),
    Col("timeout idle (s)", "timeout_idle_s", "s"),
    Col("dup ACKs", "dup_acks"),
    Col("out of order", "out_of_order"),
]


BOUND_COLUMNS = [
    Col("iteration (s)", "iter_time_s", "s"),
    Col("comm (s)", "comm_time_s", "s"),
    Col("bound (s)", "bound_s", "s"),
    Col("push-then-pull (s)", "push_then_pull_s", "s"),
    Col("pipeline bubble", "pp_bubble", "f2"),
    Col("bubble theory", "pp_bubble_theory", "f2"),
    Col(
        "iteration / bound",
        "bound_s",
        "f2",
        text=lambda f: ratio_text(f.iter_time_s, f.bound_s),
        doc="iter_time_s / bound_s: how many times its communication bound a step took",
    ),
    Col(
        "comm: bound part (s)",
        "comm_split",
        text=lambda f: fmt(f.comm_split.get("bound_s"), "s"),
        doc="comm_split bound_s: " + DOCS.get("comm_split", ""),
    ),
    Col(
        "comm: timeouts (s)",
        "comm_split",
        text=lambda f: fmt(f.comm_split.get("timeouts_s"), "s"),
        doc="comm_split timeouts_s: timeout_idle_s / steps",
    ),
    Col(
        "comm: rest (s)",
        "comm_split",
        text=lambda f: fmt(f.comm_split.get("rest_s"), "s"),
        doc="comm_split rest_s: comm_time_s - bound - timeouts (never below 0)",
    ),
]


PS_COLUMNS = [
    Col("updates applied", "updates_applied"),
    Col("updates discarded", "updates_discarded"),
    Col("max staleness", "staleness_max"),
    Col("mean staleness", "staleness_mean", "f2"),
    Col("SSP max step gap", "ssp_max_gap"),
]


def summary_table(
    run: RunView,
    heading: str,
    cols: list[Col],
    names: list[str] | None = None,
    by_design: dict[str, str] | None = None,
) -> Table:
    """One row per strategy, the summary's figures in the given columns; notes say what a "–" means
    (`by_design`: field -> the note of a column whose "–" means the field does not apply)."""
    names = names if names is not None else list(run.strategies)
    cols = known(cols)
    rows, values = [], {}
    for name in names:
        fig = run.strategies[name].summary
        rows.append(Row(name, [c.cell(fig) for c in cols], bad=fig.state != "complete"))
        values[name] = {c.key: getattr(fig, c.key, None) for c in cols}
    notes = dash_notes(run, [c for c in cols if c.key not in (by_design or {})], names)
    notes += list((by_design or {}).values())
    return Table(heading, "strategy", [c.column() for c in cols], rows, notes=notes, values=values)


def dash_notes(run: RunView, cols: list[Col], names: list[str]) -> list[str]:
    """Why cells are "–", per reason."""
    pcap_cols = [c.header for c in cols if c.key in PCAP_FIELDS]
    missing = [n for n in names if not run.strategies[n].present]
    out = []
    if missing:
        out.append(f"{DASH} for {', '.join(missing)}: the strategy did not run (no folder).")
    if pcap_cols and not run.host_captures:
        out.append(
            f"{DASH} in {', '.join(pcap_cols)}: these count what the hosts' own captures saw, and "
            f"this run captured capture={run.config.capture} (no host captures)."
        )
    for n in names:
        err = run.strategies[n].summary.pcap_error
        if pcap_cols and err:
            out.append(f"{DASH} in the pcap columns of {n}: the captures could not be read ({err}).")
    shown = [n for n in names if n not in missing]
    empty: dict[str, list[str]] = {}
    for c in cols:
        if c.key in PCAP_FIELDS and (
            not run.host_captures or any(run.strategies[n].summary.pcap_error for n in shown)
        ):
            continue
        who = [n for n in shown if c.cell(run.strategies[n].summary) == DASH]
        if who:
            empty.setdefault(", ".join(who), []).append(c.header)
    for who, heads in empty.items():
        out.append(
            f"{DASH} in {', '.join(heads)} ({who}): summary.json holds no value (a field of a newer "
            "summary, or nothing was recorded to compute it from)."
        )
    return out


def comparison(run: RunView) -> Section:
    """The summary's figures side by side, in headed tables."""
    src = "recomputed from the run folder" if run.rebuilt else "as written after the run"
    queues = summary_table(run, "Switch queues and links", QUEUE_COLUMNS)
    elsewhere = [s.name for s in run.ps_family if run.ps_port not in run.shard_ports(s.name)]
    if elsewhere:
        queues.notes.append(
            f"{', '.join(elsewhere)}: no parameter server on {run.config.fabric.ps_host}, so "
            f"PS-port drops are {run.ps_port}'s, a port its parameter servers do not use "
            "(their hottest port: table Cures, Hot ports)."
        )
    return Section(
        "Comparison",
        [
            summary_table(run, "Timing and loss", TIMING_COLUMNS),
            queues,
            Paragraph(link_sentence(run)) if link_sentence(run) else None,
            summary_table(run, "TCP", TCP_COLUMNS),
            Paragraph(
                "Timeouts are counted twice, independently: by the kernel (TcpExtTCPTimeouts, every host) "
                "and in the senders' captures (a retransmission after at least 0.75 x the minimum RTO "
                "without ACK progress). Timeout stall: seconds in which at least one flow waited for its "
                "timer; timeout idle: those of them in which the bottleneck host's link carried nothing, "
                "the time the timeouts cost.",
                note=True,
            ),
            Paragraph(
                f'Every value is a field of summary.json ({src}); "What the columns mean" gives each '
                "field's definition.",
                note=True,
            ),
        ],
    )


def link_sentence(run: RunView) -> str:
    """What busiest_link_utilisation, links_under_5pct_of_busiest and ecmp_imbalance mean."""
    if not any(
        s.summary.links_under_5pct_of_busiest is not None or s.summary.ecmp_imbalance is not None
        for s in run.present
    ):
        return ""
    return (
        "Busiest link utilisation, the headline: the busiest link direction's bytes x 8 over its "
        "configured rate x the training time, how close the strategy came to a link's capacity (its "
        "share of all link bytes, next to it, only says how concentrated the traffic was). Links under 5 "
        "% of the busiest: the link directions that carried less than 5 % of the busiest one's bytes, "
        "idle while it was loaded. ECMP imbalance: over the leaves whose uplinks carried traffic, the "
        "largest (max - min) / max of one leaf's uplink bytes; 0 when ECMP spread every leaf's traffic "
        "evenly over the spines, 1 when a spine got none of a leaf's traffic."
    )
