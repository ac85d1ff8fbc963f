"""Did the emulator keep its promise: the verdict box at the top of the page (which strategies a
failed check concerns, by how much, which figures it affects) and the Fidelity section (the checks per
strategy, the departure-gap CDF, the CPU over time), all from summary.json fidelity and the limits
analysis.fidelity judges by.
"""

from __future__ import annotations

from typing import Any

from analysis.fidelity import GAP_RATIO_RANGE, MAX_SATURATED_SHARE, MAX_UNEXPLAINED_LOSS, SATURATED
from report import series as S
from report.doc import Callout, Column, Paragraph, Row, Section, Table
from report.figures.fidelity import cpu_figure, dequeue_cdf_figure
from report.run import RunView
from report.sections.common import colors, figure, time_range
from report.sections.tables import DASH, fmt, is_num

FIDELITY_CHECKS = {  # check -> (what failed, limit, what it means, what it affects)
    "loss": (
        "losses no switch queue counted",
        f"more than {MAX_UNEXPLAINED_LOSS * 100:.0f} % of the losses the captures saw",
        "drop and retransmission counts include losses a real switch would not have",
        "the drop and retransmission counts (tables Switch queues and links, TCP; the drops, "
        "retransmissions and timeouts timeline)",
    ),
    "pace": (
        "the bottleneck off its rate",
        f"median departure gap / ideal outside {GAP_RATIO_RANGE[0]}-{GAP_RATIO_RANGE[1]}",
        "the link did not run at its configured rate",
        "every time and rate (iteration time and bounds, goodput, link utilisation{cures})",
    ),
    "cpu": (
        "CPU saturated",
        f"every core >= {SATURATED * 100:.0f} % busy in more than "
        f"{MAX_SATURATED_SHARE * 100:.0f} % of the seconds from the strategy's start",
        "workers, switch and captures competed for the CPU",
        "the times (iteration time and bounds{cures}), which include waiting for the CPU",
    ),
}


FIDELITY_FIGURE = {
    "loss": "unexplained_loss_share",
    "pace": "dequeue_gap_median_over_ideal",
    "cpu": "cpu_saturated_share",
}


def fidelity_problems(fid: dict[str, Any]) -> list[str]:
    """Which of analysis.fidelity's checks a strategy failed ("loss", "pace", "cpu"), from its figures
    and the same limits the verdict uses."""
    out = []
    loss, gap, sat = (
        fid.get(k) for k in ("unexplained_loss_share", "dequeue_gap_median_over_ideal", "cpu_saturated_share")
    )
    if is_num(loss) and loss > MAX_UNEXPLAINED_LOSS:
        out.append("loss")
    if is_num(gap) and not GAP_RATIO_RANGE[0] <= gap <= GAP_RATIO_RANGE[1]:
        out.append("pace")
    if is_num(sat) and sat > MAX_SATURATED_SHARE:
        out.append("cpu")
    return out


def _fid_numbers(fid: dict[str, Any]) -> str:
    bits = []
    if is_num(fid.get("unexplained_loss_share")):
        bits.append(f"unexplained loss {fid['unexplained_loss_share'] * 100:.0f} %")
    if is_num(fid.get("dequeue_gap_median_over_ideal")):
        bits.append(
            f"departure gap / ideal {fid['dequeue_gap_median_over_ideal']:.3f} at {fid.get('dequeue_port')}"
        )
    if is_num(fid.get("cpu_saturated_share")):
        bits.append(f"all cores saturated {fid['cpu_saturated_share'] * 100:.0f} % of the seconds")
    return ", ".join(bits)


def fidelity_verdict(run: RunView) -> Callout | None:
    """The fidelity verdict at the top of the page: the run's (summary.json fidelity) and each
    strategy's; per failed check, which strategies failed it, by how much, and the figures it makes
    less trustworthy."""
    present = run.present
    if not present:
        return None
    verdict = str((run.summary.fidelity or {}).get("verdict") or "unknown")
    judged = {s.name: s.summary.fidelity for s in present if s.summary.fidelity.get("verdict")}
    if not judged:
        return Callout(
            "Fidelity verdict: unknown",
            [
                "summary.json holds no fidelity checks (a summary of an older schema, or nothing was "
                "recorded "
                "to check): the figures below come without a verdict."
            ],
            "info",
        )
    bad = [n for n, f in judged.items() if f.get("verdict") == "degraded"]
    good = [n for n, f in judged.items() if f.get("verdict") == "trustworthy"]
    items = [
        f"Run {verdict.upper()}: {len(bad)} of {len(judged)} strategies degraded"
        + (f" ({', '.join(bad)})" if bad else "")
        + (f"; trustworthy: {', '.join(good)}" if good else "")
        + ". The checks and their figures: section Fidelity."
    ]
    cures_shown = len([s for s in run.timed if s.ps_family]) >= 2
    explained: set[str] = set()
    for key, (what, limit, meaning, affects) in FIDELITY_CHECKS.items():
        failed = [n for n in bad if key in fidelity_problems(judged[n])]
        if not failed:
            continue
        field = FIDELITY_FIGURE[key]
        vals = ", ".join(f"{n} {_fid_value(key, judged[n].get(field))}" for n in failed)
        items.append(
            f"{what[0].upper() + what[1:]} ({limit}): {vals}. {meaning[0].upper() + meaning[1:]}. "
            f"Affected: {affects.format(cures=', Cures' if cures_shown else '')}."
        )
        explained.update(failed)
    for n in bad:  # a reason the checks above do not cover (a check of a newer summary): verbatim
        if n not in explained:
            items.append(f"{n}: " + "; ".join(str(r) for r in judged[n].get("reasons") or []) + ".")
    for n in good:
        items.append(f"{n}: trustworthy ({_fid_numbers(judged[n])}).")
    for s in present:
        if s.name not in judged:
            items.append(f"{s.name}: no fidelity checks in summary.json.")
    tone = "warning" if verdict == "degraded" or bad else "verdict"
    return Callout(f"Fidelity verdict: {verdict}", items, tone)


def _fid_value(key: str, v: Any) -> str:
    if not is_num(v):
        return DASH
    return f"{v:.3f}" if key == "pace" else f"{v * 100:.0f} %"


FIDELITY_COLUMNS = [
    (
        "verdict",
        "verdict",
        "text",
        "trustworthy, or degraded when a check failed (limits: unexplained loss "
        f"<= {MAX_UNEXPLAINED_LOSS:.0%}, departure gap / ideal "
        f"{GAP_RATIO_RANGE[0]}-{GAP_RATIO_RANGE[1]}, all "
        f"cores >= {SATURATED:.0%} busy in <= {MAX_SATURATED_SHARE:.0%} of the seconds)",
    ),
    (
        "unexplained loss",
        "unexplained_loss_share",
        "pct",
        "max(0, fabric_drops_pcap - queue_drops_total) / "
        "fabric_drops_pcap: losses the captures saw that no switch queue counted (a lower bound)",
    ),
    ("dequeue port", "dequeue_port", "text", "the strategy's worst host port, whose departures are checked"),
    (
        "departure gap / ideal (median)",
        "dequeue_gap_median_over_ideal",
        "f3",
        "median gap between packets "
        "leaving that port while its queue was backlogged, over the serialization time at its rate (1: the "
        "configured rate exactly)",
    ),
    ("gaps", "dequeue_gaps", "int", "departure gaps measured"),
    ("busiest second, mean core busy", "cpu_busy_max", "pct", "the busiest second's mean core busy share"),
    (
        "seconds with every core saturated",
        "cpu_saturated_share",
        "pct",
        f"share of the seconds with every core >= {SATURATED:.0%} busy",
    ),
    (
        "ovs-vswitchd peak (of one core)",
        "switch_cpu_max",
        "pct",
        "the software switch's peak share of a core",
    ),
]


def fidelity_table(run: RunView) -> Table | None:
    """summary.json fidelity of every strategy, one row each."""
    names = [s.name for s in run.present if s.summary.fidelity]
    if not names:
        return None
    rows, values = [], {}
    for n in names:
        fid = run.strategies[n].summary.fidelity
        cells = []
        for _, key, kind, _ in FIDELITY_COLUMNS:
            v = fid.get(key)
            cells.append(
                f"{v:.3f}"
                if kind == "f3" and is_num(v)
                else (DASH if v is None else str(v))
                if kind == "text"
                else fmt(v, kind)
            )
        rows.append(Row(n, cells, bad=fid.get("verdict") == "degraded"))
        values[n] = {key: fid.get(key) for _, key, _, _ in FIDELITY_COLUMNS}
    cols = [Column(h, doc, numeric=kind != "text") for h, _, kind, doc in FIDELITY_COLUMNS]
    return Table("Fidelity checks", "strategy", cols, rows, values=values)


def fidelity(run: RunView) -> Section | None:
    """Did the emulator keep its promise: the checks per strategy, the departure-gap CDF at each
    strategy's worst host port, the CPU over time."""
    table = fidelity_table(run)
    cdfs = {s.name: c for s in run.present if (c := S.dequeue_cdf(s)) is not None}
    cpu = {s.name: c for s in run.timed if (c := S.cpu_series(s)) is not None}
    if table is None and not cdfs and not cpu:
        return None
    sec = Section(
        "Fidelity",
        [
            Paragraph(
                "Before its figures are trusted an emulator must show it kept its promise (after "
                "Handigol et al., "
                "CoNEXT 2012): every loss the captures saw should be a switch queue's drop, a "
                "backlogged bottleneck "
                "should send one packet per serialization time at its configured rate, and the "
                "machine's CPU must "
                "not be the bottleneck. summary.json fidelity holds these checks and the verdict; "
                "the box at the "
                "top of the page says which figures a failed check affects."
            ),
            table,
        ],
    )
    if cdfs:
        sec.add(
            figure(
                "dequeue_cdf",
                dequeue_cdf_figure(cdfs, GAP_RATIO_RANGE, colors(run)),
                "Departure gaps at the bottleneck",
                "CDF of the gaps between consecutive packets leaving each strategy's worst host port "
                "while its queue was backlogged, over one packet's serialization time at the port's "
                "configured rate (dequeue.json; the port's own capture where there is one, else the "
                "receiver's). Dashed: the ideal, 1; shaded: the range in which the median counts as "
                "the configured rate. A curve far left of 1 is packets leaving in bursts, far right a "
                "link slower than configured.",
                cdfs,
            )
        )
    if cpu:
        facts = {}
        for n in cpu:
            fid = run.strategies[n].summary.fidelity
            sat, top = fid.get("cpu_saturated_share"), fid.get("switch_cpu_max")
            facts[n] = (
                f"every core >= {SATURATED * 100:.0f} % busy in {fmt(sat, 'pct')} of the seconds "
                f"from its start (the fidelity check), ovs-vswitchd at most {fmt(top, 'pct')} of a "
                "core"
            )
        sec.add(
            figure(
                "cpu",
                cpu_figure(cpu, SATURATED, time_range(run), facts),
                "CPU over time",
                "Per strategy, each core's busy share per second and ovs-vswitchd's CPU time per "
                "second (of one core; it can exceed 100 % with several threads), from cpu.jsonl, over "
                "the seconds the fidelity check counts: from the strategy's start, the setup before "
                "its first training step (shaded: processes starting, TCP set, captures started) "
                "included. Dotted: the saturation line of the check. Where every core is saturated, "
                "workers, switch and captures waited for the CPU.",
                cpu,
            )
        )
    return sec
