"""The incast sweep's page: functions of an IncastView (incast.json, the collapsed round of
timeline.json, the folder's name), listed in page order by the INCAST page of the registry
(report/sections/__init__.py).

At the top the sweep's fidelity verdict, its goals and the curves the kernel could not run; then the
findings, the curve and one collapsed round (report/figures/incast.py), every point's goodput and its
cause, how the sweep maps to the incast papers, and the reasons of any degraded point. Every number is
a field of incast.json, formatted here and nowhere computed.
"""

from __future__ import annotations

from typing import Any

from report.console import goal_text
from report.doc import Bullets, Callout, Column, Figure, Paragraph, Row, Section, Table
from report.figures.base import to_png
from report.figures.incast import curve_figure, timeline_figure
from report.run import IncastView
from runmodel.incast import IncastResult


def _pct(v: float | None) -> str:
    """A share in whole percent ("–" when not measured)."""
    return "–" if v is None else f"{v:.0%}"


def _num(v: Any, fmt: str = "{:d}") -> str:
    """A count or a time in `fmt` ("–" when not measured)."""
    return "–" if v is None else fmt.format(v)


def scaling_text(result: IncastResult) -> list[str]:
    """How the sweep maps to the papers' setup, with its own numbers."""
    cfg = result.config
    fab = cfg.get("fabric", {})
    rate = float(fab.get("host_mbit", 20))
    sru = int(cfg.get("sru_bytes", 32768))
    buf = int(fab.get("buffer_pkts", 8))
    top = max(cfg.get("senders") or [1])
    tau = sru * 8 / (rate * 1e6) * 1514 / 1448 * 1000
    rnd = top * tau
    return [
        f"Link {rate:g} Mbit/s (the papers: 1 Gbit/s), SRU {sru // 1024} KiB = {-(-sru // 1448)} full-size "
        f"segments (the papers: 32-256 KB), client port buffer {buf} packets = {buf * 1.5:.0f} KB "
        f"(the papers: 32-128 KB), minimum RTO 200 ms as in the papers.",
        f"One block takes {tau:.1f} ms on the client's link and a round of {top} blocks {rnd:.0f} ms, "
        "against "
        f"a 200 ms timeout: ratio {200 / rnd:.1f} (the papers at 16 servers: 200 ms against 4-34 ms, ratio "
        "6-50). That ratio could not be kept: the emulated fabric's round trip (about 1.3 ms through 3 "
        "userspace switch hops) is paid once per round, so a block must take about 10 ms for one sender to "
        "reach 90 % of the link, and 15 such blocks take about 200 ms.",
        f"Kept instead: the block in segments (a 32 KB SRU is 23 segments, the papers' smallest), the buffer "
        f"against N x the initial window ({buf} packets against {top} x 10 = {top * 10}: "
        f"{buf / (top * 10):.2f}; the papers' 32 KB against 16 x 3 segments of 2008-era Linux: 0.46) and "
        f"against the path's bandwidth-delay product (about 2 packets here, 8 at 1 Gbit/s x 100 us).",
    ]


def findings(result: IncastResult) -> list[str]:
    """A few sentences: what the curve shows, what explains it, what cured it, what was not reached."""
    out = []
    lines = result.lines()
    base = lines[0] if lines else None
    rows = [r for r in result.rows if r.line == base and r.goodput_frac is not None]
    if rows:
        one = min(rows, key=lambda r: r.senders)
        worst = min(rows, key=lambda r: r.goodput_frac or 1.0)
        top = max(rows, key=lambda r: r.senders)
        out.append(
            f"{base}: {one.goodput_frac:.0%} of the link with {one.senders} sender, {top.goodput_frac:.0%} "
            f"with {top.senders} (lowest {worst.goodput_frac:.0%} at N={worst.senders}); at N={top.senders} "
            f"the senders' kernels counted {top.timeouts_kernel} timeouts and {top.loss_probes_kernel} loss "
            f"probes in {top.rounds} rounds, {top.timer_waits} timer waits on the slowest block of each "
            + (
                f"round, and the client's link sat idle {top.timeout_idle_s:.2f} s of the "
                f"{top.duration_s:.2f} s while a sender waited for its timer."
                if top.timeout_idle_s is not None
                else "round (no captures: the client's idle time is not known)."
            )
        )
    collapsed = [r for r in result.rows if r.goodput_frac is not None and r.goodput_frac < 0.5]
    if collapsed:
        ex = [r.explained_frac for r in collapsed if r.explained_frac is not None]
        if ex:
            out.append(
                f"Wherever goodput fell below half the link ({len(collapsed)} points), timer stalls x the "
                f"minimum RTO explain {min(ex):.0%}-{max(ex):.0%} of the lost time."
            )
    top_n = max((r.senders for r in result.rows), default=0)
    cures = []
    for line in lines[1:]:
        r = result.row(line, top_n)
        if r is not None and r.goodput_frac is not None:
            cures.append(f"{line} {r.goodput_frac:.0%}")
    if cures:
        out.append(f"At N={top_n}: " + ", ".join(cures) + ".")
    for item in result.not_run:
        out.append(f"{item['line']} was not run: {item['reason']}.")
    missed = [g for g in result.goals if g.get("met") is False]
    for g in missed:
        v = g["value"]
        out.append(
            f"Not reached: {g['goal']} (measured {v:.0%})."
            if isinstance(v, float)
            else f"Not reached: {g['goal']} ({v})."
        )
    return out


def cause_table(result: IncastResult) -> Table:
    """One row per point: goodput, the timeouts and probes counted two ways, the timer waits, and how
    much of the lost time they explain."""
    cols = [
        Column("N"),
        Column("goodput", "share of the client's link rate"),
        Column("rounds"),
        Column("RTOs (kernel)", "TcpExtTCPTimeouts over the senders' namespaces"),
        Column("RTOs (pcap)", "timeouts found in the senders' own captures (analysis.rto)"),
        Column("TLPs (kernel)", "TcpExtTCPLossProbes over the senders"),
        Column(
            "timer waits",
            "per round, the timer stalls (timeouts, and probes that waited >= 0.75 x the minimum RTO; "
            "2^k for a k-th backoff) of the sender that stalled most, summed over the rounds",
        ),
        Column("idle s", "the client's link idle (> 2 ms without data) while a sender waited for its timer"),
        Column("lost s", "duration - bytes at the link's payload rate"),
        Column("explained", "timer waits x minimum RTO / lost s (at most 100 %)"),
        Column("idle share", "idle s / lost s: the lost time the link was seen idle during a timer wait"),
        Column("verdict", "fidelity: trustworthy or degraded (reasons below)", numeric=False),
    ]
    rows, values = [], {}
    for r in result.rows:
        label = f"{r.line}"
        cells = [
            str(r.senders),
            _pct(r.goodput_frac),
            str(r.rounds),
            _num(r.timeouts_kernel),
            _num(r.timeouts_pcap),
            _num(r.loss_probes_kernel),
            _num(r.timer_waits),
            _num(r.timeout_idle_s, "{:.2f}"),
            _num(r.lost_s, "{:.2f}"),
            _pct(r.explained_frac),
            _pct(r.idle_frac),
            r.verdict or "–",
        ]
        rows.append(Row(f"{label} N={r.senders}", cells, bad=r.verdict != "trustworthy"))
        values[f"{label} N={r.senders}"] = r.to_dict()
    return Table(
        "Every point: goodput and its cause",
        "curve",
        cols,
        rows,
        key="incast-points",
        values=values,
        notes=["– : not measured (no capture, or the point did not run)."],
    )


# -- the page ----------------------------------------------------------------------------------------
def facts(view: IncastView) -> list[str]:
    """The sweep's parameters and the machine's, in one line."""
    cfg = view.result.config
    env = view.result.environment
    fab = cfg.get("fabric", {})
    return [
        f"{fab.get('spines')} spines x {fab.get('leaves')} leaves x {fab.get('hosts_per_leaf')} hosts",
        f"client {cfg.get('client')} at {fab.get('host_mbit')} Mbit/s",
        f"SRU {cfg.get('sru_bytes')} bytes",
        f"{cfg.get('rounds')} rounds per point",
        f"client port {fab.get('buffer_pkts')} packets",
        f"kernel {env.get('kernel', '?')} ({env.get('timer_hz') or '?'} Hz timer)",
        f"{env.get('datapath', '?')} datapath",
        f"default congestion control {env.get('default_cc', '?')}",
    ]


def fidelity_verdict(view: IncastView) -> Callout:
    """The sweep's fidelity verdict and its reasons (always shown)."""
    fid = view.result.fidelity or {}
    return Callout(
        f"Fidelity: {fid.get('verdict', 'unknown')}",
        fid.get("reasons")
        or ["every point kept its link rate, counted its losses in the switch queues and had CPU to spare"],
        "verdict" if fid.get("verdict") == "trustworthy" else "warning",
    )


def goals(view: IncastView) -> Callout | None:
    """Each goal of the sweep: met, not met or not measured, with the measured value."""
    items = []
    for g in view.result.goals:
        items.append(
            goal_text(g["goal"], g.get("met"), g.get("value"))
            + (f"; short: {', '.join(g['short'][:6])}" if g.get("short") else "")
        )
    if not items:
        return None
    return Callout("Goals", items, "info" if all(g.get("met") for g in view.result.goals) else "warning")


def not_run(view: IncastView) -> Callout | None:
    """The curves this kernel could not run, and why."""
    if not view.result.not_run:
        return None
    return Callout("Not run on this kernel", [f"{i['line']}: {i['reason']}" for i in view.result.not_run])


def findings_section(view: IncastView) -> Section:
    """The findings as bullets."""
    return Section("Findings", [Bullets(findings(view.result))])


def curve(view: IncastView) -> Section:
    """The incast curve and how to read it."""
    fig, data = curve_figure(view.result)
    return Section(
        "The curve",
        [
            Figure(
                "incast-curve",
                to_png(fig),
                "The incast curve",
                "Top: the client's goodput (bytes of every block over the time of every round) as a share of "
                "its link rate, against the number of servers answering at once, one line per curve. The "
                "dotted line is the most TCP can carry (a frame's payload share). Bottom: waves of timer "
                "stalls per round: how often a round had to wait for a retransmission timer.",
                data,
            ),
            Paragraph(
                "How to read it: follow the base curve from left to right. With one or two senders the "
                "client's port keeps up and goodput sits near the link rate. As more servers answer at "
                "once, their first windows arrive together, the client's shallow port buffer overflows, "
                "whole windows (or a block's last segments) are lost, and a sender that has no segment "
                "left to trigger a fast retransmission waits for its timer: at least the minimum RTO, "
                "200 ms, while the round's other blocks are long done. The lower panel shows those waits "
                "per round. A cure that keeps its curve up removes either the loss (deeper buffer, fewer "
                "senders at once) or the wait (a 1 ms minimum RTO)."
            ),
        ],
    )


def collapsed_round(view: IncastView) -> Section | None:
    """One collapsed round, packet by packet (None when the sweep saved no timeline)."""
    tl = view.timeline
    if not tl:
        return None
    return Section(
        "One collapsed round",
        [
            Figure(
                "incast-timeline",
                to_png(timeline_figure(tl)),
                "One collapsed round",
                "Each row is a sender, each mark one data packet as its own capture saw it leave: blue "
                "arrived, red x never reached the client's capture (dropped at the client's port), black "
                "triangles retransmissions. A red bar is a sender waiting for its retransmission timer "
                "after losing the last segments of its block, the green tick the moment its block was "
                "complete. Grey: the client's link carried nothing. Bottom: the client port's backlog "
                "(dashed: its size) and the data arriving at the client.",
                {k: tl[k] for k in ("line", "senders", "round", "duration_ms", "rounds_with_stall")},
            ),
            Paragraph(
                f"{tl['rounds_with_stall']} of the {tl['rounds']} rounds of this point waited for a timer; "
                "the one shown is the median of those by duration."
            ),
        ],
    )


def cause(view: IncastView) -> Section:
    """Every point's goodput and its cause, as a table."""
    return Section("The cause, point by point", [cause_table(view.result)])


def scaling(view: IncastView) -> Section:
    """How the sweep's link, block and buffer map to the papers' setup."""
    return Section("How the sweep maps to the papers", [Bullets(scaling_text(view.result))])


def degraded_points(view: IncastView) -> Section | None:
    """Why each point whose fidelity was not trustworthy was degraded."""
    bad = [(r, r.fidelity.get("reasons") or []) for r in view.result.rows if r.verdict != "trustworthy"]
    if not bad:
        return None
    return Section(
        "Fidelity of the degraded points",
        [Bullets([f"{r.line} N={r.senders}: " + "; ".join(reasons) for r, reasons in bad])],
    )
