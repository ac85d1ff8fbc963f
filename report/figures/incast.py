"""The incast sweep's two figures. The curve: goodput as a share of the client's link against the
number of senders, one line per curve (the base, each cure), sender axis logarithmic, with the timer
stalls per round that explain it under it. The timeline: one round of the most collapsed point, each
sender's packets as its own capture saw them leave, marked lost when the client's capture never saw
them, the wait for the retransmission timer drawn as a bar, and the client link's idle gap.
"""

from __future__ import annotations

from typing import Any

from report.figures.base import PALETTE, canvas, note
from runmodel.incast import IncastResult

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


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
