"""The incast sweep's report: incast.json and timeline.json -> report.html, report.md, figures/*.png.

Two figures carry it. The curve (figure `incast-curve`): goodput as a share of the client's link
against the number of senders, one line per curve (the base, each cure), sender axis logarithmic;
under it the timer stalls per round that explain it. The timeline (`incast-timeline`): one round
of the most collapsed point, each sender's packets as its own capture saw them leave, marked lost
when the client's capture never saw them, with the wait for the retransmission timer drawn as a
bar, and the client link's idle gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from report.doc import Bullets, Callout, Column, Document, Figure, Paragraph, Row, Section, Table
from report.figures.base import PALETTE, canvas, note, to_png
from report.html import render_html
from report.markdown import render_markdown
from runmodel.incast import IncastFolder, IncastResult, IncastRow
from runmodel.params import ParamError
from runmodel.records import read_json

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _num(v: Any, fmt: str = "{:d}") -> str:
    return "–" if v is None else fmt.format(v)


# -- figures ------------------------------------------------------------------------------------------
def curve_figure(result: IncastResult) -> tuple[Any, dict[str, Any]]:
    """Goodput share of the link vs senders, one line per curve; timer-stall waves per round below."""
    fig, axes = canvas(7.2, 2, 1, sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
    top, low = axes[0][0], axes[1][0]
    data: dict[str, Any] = {}
    senders = sorted({r.senders for r in result.rows})
    for k, line in enumerate(result.lines()):
        rows = sorted(
            (r for r in result.rows if r.line == line and r.goodput_frac is not None), key=lambda r: r.senders
        )
        if not rows:
            continue
        color, marker = PALETTE[k % len(PALETTE)], MARKERS[k % len(MARKERS)]
        xs = [r.senders for r in rows]
        ys = [r.goodput_frac for r in rows]
        top.plot(xs, ys, color=color, marker=marker, lw=1.6, ms=6, label=line, zorder=3)
        bad = [r for r in rows if r.verdict != "trustworthy"]
        if bad:
            top.scatter(
                [r.senders for r in bad],
                [r.goodput_frac for r in bad],
                s=140,
                facecolors="none",
                edgecolors="#c00000",
                lw=1.2,
                zorder=4,
            )
        per_round = [
            (r.timer_waits or 0) / r.rounds if r.rounds and r.timer_waits is not None else None for r in rows
        ]
        low.plot(
            xs,
            [p if p is not None else float("nan") for p in per_round],
            color=color,
            marker=marker,
            lw=1.2,
            ms=5,
            zorder=3,
        )
        data[line] = {"senders": xs, "goodput_frac": ys, "waves_per_round": per_round}
    if not data:
        note(top, "no point was measured")
    payload = 1448 / 1514
    top.axhline(payload, color="#777", ls=":", lw=1)
    top.text(
        senders[0] if senders else 1,
        payload + 0.01,
        " payload rate of the link (1448/1514 of a frame)",
        fontsize=7,
        color="#555",
        va="bottom",
    )
    top.set_ylim(0, 1.05)
    top.set_ylabel("goodput / client link rate")
    top.set_title("Incast: the client's goodput against the number of servers answering at once")
    top.legend(
        fontsize=8, loc="lower left", ncol=2, title="curve (red ring: fidelity degraded)", title_fontsize=8
    )
    top.grid(alpha=0.3)
    low.set_ylabel("timer stalls\nper round")
    low.set_xlabel("servers answering at once (N), log scale")
    low.grid(alpha=0.3)
    if senders:
        low.set_xscale("log", base=2)
        low.set_xticks(senders)
        low.set_xticklabels([str(n) for n in senders])
        low.minorticks_off()
    return fig, data


def timeline_figure(tl: dict[str, Any]) -> Any:
    """One collapsed round: every sender's packets over time, losses, the RTO waits, the idle link."""
    senders = tl["sender_packets"]
    fig, axes = canvas(
        max(4.5, 1.2 + 0.32 * len(senders)) + 1.8,
        2,
        1,
        sharex=True,
        gridspec_kw={"height_ratios": [max(2.5, 0.32 * len(senders)), 1.2]},
    )
    ax, low = axes[0][0], axes[1][0]
    kinds = {"sent": ([], []), "lost": ([], []), "rtx": ([], []), "rtx lost": ([], [])}
    for s in senders:
        y = s["index"]
        for t, _seq, _plen, rtx, lost in s["packets"]:
            key = ("rtx lost" if lost else "rtx") if rtx else ("lost" if lost else "sent")
            kinds[key][0].append(t)
            kinds[key][1].append(y)
        for st in s["stalls"]:
            ax.plot(
                [st["t_ms"] - st["idle_ms"], st["t_ms"]],
                [y, y],
                color="#d62728",
                lw=2.2,
                alpha=0.55,
                solid_capstyle="butt",
                zorder=2,
            )
        if s["done_ms"]:
            ax.plot([s["done_ms"]], [y], marker="|", color="#2ca02c", ms=10, mew=2, zorder=4)
    style = {
        "sent": ("#1f77b4", ".", 5, "sent, arrived"),
        "lost": ("#c00000", "x", 6, "sent, lost"),
        "rtx": ("#000000", "^", 6, "retransmission, arrived"),
        "rtx lost": ("#ff7f0e", "v", 6, "retransmission, lost"),
    }
    for key, (xs, ys) in kinds.items():
        if xs:
            c, m, size, label = style[key]
            ax.scatter(xs, ys, s=size**2 / 2, c=c, marker=m, label=label, zorder=3, lw=1)
    ax.plot([], [], color="#d62728", lw=2.2, alpha=0.55, label="waiting for the retransmission timer")
    ax.plot([], [], marker="|", color="#2ca02c", ms=10, mew=2, ls="", label="block complete")
    ax.set_yticks([s["index"] for s in senders])
    ax.set_yticklabels([f"{s['host']}" for s in senders], fontsize=7)
    ax.set_ylabel("sender (its own capture)")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    ax.set_title(
        f"One collapsed round: {tl['line']}, N={tl['senders']} servers, round {tl['round']} "
        f"({tl['duration_ms']:.0f} ms; minimum RTO {tl['rto_min_ms']:g} ms, client port "
        f"{tl['buffer_pkts']} packets)"
    )
    ax.grid(alpha=0.25)
    for a, b in tl["idle_gaps_ms"]:
        for axis in (ax, low):
            axis.axvspan(a, b, color="#999", alpha=0.18, lw=0, zorder=0)
    q = tl.get("queue") or []
    if q:
        low.step(
            [p[0] for p in q],
            [p[1] for p in q],
            where="post",
            color="#9467bd",
            lw=1.2,
            label="client port backlog (packets)",
        )
        low.axhline(tl["buffer_pkts"], color="#9467bd", ls="--", lw=0.8)
    arr = tl.get("arrivals_ms") or []
    if arr:
        ymax = max([p[1] for p in q] + [tl["buffer_pkts"], 1])
        low.vlines(
            arr, ymax * 1.05, ymax * 1.25, color="#1f77b4", lw=0.5, label="data arriving at the client"
        )
    low.set_ylabel("packets")
    low.set_xlabel("ms since the client asked (grey: the client's link idle > 2 ms)")
    low.legend(fontsize=7, loc="upper right")
    low.grid(alpha=0.25)
    return fig


# -- text ---------------------------------------------------------------------------------------------
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
            f"round, and the client's "
            f"link sat idle {top.timeout_idle_s:.2f} s of the {top.duration_s:.2f} s while a sender waited "
            f"for its timer."
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


# -- the document --------------------------------------------------------------------------------------
def build_incast_document(result: IncastResult, tl: dict[str, Any] | None, name: str) -> Document:
    cfg = result.config
    env = result.environment
    fab = cfg.get("fabric", {})
    facts = [
        f"{fab.get('spines')} spines x {fab.get('leaves')} leaves x {fab.get('hosts_per_leaf')} hosts",
        f"client {cfg.get('client')} at {fab.get('host_mbit')} Mbit/s",
        f"SRU {cfg.get('sru_bytes')} bytes",
        f"{cfg.get('rounds')} rounds per point",
        f"client port {fab.get('buffer_pkts')} packets",
        f"kernel {env.get('kernel', '?')} ({env.get('timer_hz') or '?'} Hz timer)",
        f"{env.get('datapath', '?')} datapath",
        f"default congestion control {env.get('default_cc', '?')}",
    ]
    doc = Document(
        title=f"incastlab incast: {name}", status="complete" if result.complete else "incomplete", facts=facts
    )
    fid = result.fidelity or {}
    doc.callouts.append(
        Callout(
            f"Fidelity: {fid.get('verdict', 'unknown')}",
            fid.get("reasons")
            or [
                "every point kept its link rate, counted its losses in the switch queues and had CPU to spare"
            ],
            "verdict" if fid.get("verdict") == "trustworthy" else "warning",
        )
    )
    goal_items = []
    for g in result.goals:
        mark = {True: "met", False: "NOT met", None: "not measured"}[g.get("met")]
        v = g.get("value")
        shown = f"{v:.0%}" if isinstance(v, float) else str(v)
        goal_items.append(
            f"{mark}: {g['goal']} (measured {shown})"
            + (f"; short: {', '.join(g['short'][:6])}" if g.get("short") else "")
        )
    if goal_items:
        doc.callouts.append(
            Callout("Goals", goal_items, "info" if all(g.get("met") for g in result.goals) else "warning")
        )
    if result.not_run:
        doc.callouts.append(
            Callout("Not run on this kernel", [f"{i['line']}: {i['reason']}" for i in result.not_run])
        )
    doc.sections.append(Section("Findings", [Bullets(findings(result))]))
    fig, data = curve_figure(result)
    curve = Figure(
        "incast-curve",
        to_png(fig),
        "The incast curve",
        "Top: the client's goodput (bytes of every block over the time of every round) as a share of "
        "its link rate, against the number of servers answering at once, one line per curve. The "
        "dotted line is the most TCP can carry (a frame's payload share). Bottom: waves of timer "
        "stalls per round: how often a round had to wait for a retransmission timer.",
        data,
    )
    doc.sections.append(
        Section(
            "The curve",
            [
                curve,
                Paragraph(
                    "How to read it: follow the base curve from left to right. With one or two senders the "
                    "client's port keeps up and goodput sits near the link rate. As more servers answer at "
                    "once, "
                    "their first windows arrive together, the client's shallow port buffer overflows, whole "
                    "windows (or a block's last segments) are lost, and a sender that has no segment left to "
                    "trigger a fast retransmission waits for its timer: at least the minimum RTO, 200 ms, "
                    "while "
                    "the round's other blocks are long done. The lower panel shows those waits per round. A "
                    "cure "
                    "that keeps its curve up removes either the loss (deeper buffer, fewer senders at once) "
                    "or "
                    "the wait (a 1 ms minimum RTO)."
                ),
            ],
        )
    )
    if tl:
        tfig = timeline_figure(tl)
        doc.sections.append(
            Section(
                "One collapsed round",
                [
                    Figure(
                        "incast-timeline",
                        to_png(tfig),
                        "One collapsed round",
                        "Each row is a sender, each mark one data packet as its own capture saw it leave: "
                        "blue "
                        "arrived, red x never reached the client's capture (dropped at the client's port), "
                        "black "
                        "triangles retransmissions. A red bar is a sender waiting for its retransmission "
                        "timer "
                        "after losing the last segments of its block, the green tick the moment its block "
                        "was "
                        "complete. Grey: the client's link carried nothing. Bottom: the client port's "
                        "backlog "
                        "(dashed: its size) and the data arriving at the client.",
                        {k: tl[k] for k in ("line", "senders", "round", "duration_ms", "rounds_with_stall")},
                    ),
                    Paragraph(
                        f"{tl['rounds_with_stall']} of the {tl['rounds']} rounds of this point waited for a "
                        "timer; "
                        "the one shown is the median of those by duration."
                    ),
                ],
            )
        )
    doc.sections.append(Section("The cause, point by point", [cause_table(result)]))
    doc.sections.append(Section("How the sweep maps to the papers", [Bullets(scaling_text(result))]))
    bad = [(r, r.fidelity.get("reasons") or []) for r in result.rows if r.verdict != "trustworthy"]
    if bad:
        doc.sections.append(
            Section(
                "Fidelity of the degraded points",
                [Bullets([f"{r.line} N={r.senders}: " + "; ".join(reasons) for r, reasons in bad])],
            )
        )
    return doc


def build_incast_report(run_dir: Path | str) -> dict[str, Any]:
    """Write report.html, report.md and figures/*.png of a sweep's run folder; returns the files."""
    folder = IncastFolder(Path(run_dir))
    result = folder.result()
    if result is None:
        raise ParamError(
            f"{folder.path}: no readable incast.json (run `incastlab incast --rebuild {folder.path}`)"
        )
    tl = read_json(folder.timeline_file) if result.timeline.get("file") else None
    doc = build_incast_document(result, tl if isinstance(tl, dict) else None, folder.path.name)
    folder.figures_dir.mkdir(parents=True, exist_ok=True)
    pngs = {}
    for f in doc.figures():
        path = folder.figures_dir / f"{f.key}.png"
        path.write_bytes(f.png)
        pngs[f.key] = path
    folder.report_html.write_text(render_html(doc), encoding="utf-8")
    folder.report_md.write_text(render_markdown(doc, folder.figures_dir.name), encoding="utf-8")
    return {"html": folder.report_html, "md": folder.report_md, "figures": pngs, "document": doc}


__all__ = ["IncastRow", "build_incast_document", "build_incast_report", "curve_figure", "timeline_figure"]
