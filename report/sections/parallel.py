"""The ways of splitting the training side by side (section `parallel`): one row per strategy (iteration
time, bytes per worker per step against the theory, the traffic matrix's worst pair, the pipeline's
bubble, the hottest port, drops, timeouts), a paragraph on which split moved what where, read off the
theory's matrix (who sends to whom) and the summary's drops and timeouts at the ports receiving from
many, and each strategy's traffic matrix beside its theory.

Shown when the run has a model split (pp, tp, fsdp, moe, hybrid), with every strategy of the run as a
row and a matrix for each with a traffic_matrix_theory (the ring's too); every number is a field of
summary.json.
"""

from __future__ import annotations

import re
from typing import Any

from report.doc import Bullets, Paragraph, Section
from report.figures.matrix import FRAME_SHARE, matrix_figure
from report.run import RunView
from report.sections.common import figure
from report.sections.tables import DASH, DOCS, Col, bracketed, fmt, summary_table
from report.series import natural
from runmodel.strategy import MODEL_SPLITS
from runmodel.summary import StrategySummary

INCAST_FAN_IN = 3  # an incast receiver: receives from every other host of the job, and from this many or more


def _mb(v: float | None) -> str:
    return DASH if v is None else f"{v / 1e6:.3f}"


PARALLEL_COLUMNS = [
    Col("iteration (s)", "iter_time_s", "s"),
    Col(
        "MB per worker per step (pcap)",
        "bytes_per_worker_step_pcap",
        text=lambda f: _mb(f.bytes_per_worker_step_pcap),
    ),
    Col(
        "MB per worker per step (theory)",
        "bytes_per_worker_step_theory",
        text=lambda f: _mb(f.bytes_per_worker_step_theory),
    ),
    Col("matrix: worst pair's error", "traffic_matrix_error_max", "pct"),
    Col(
        "MB off the theory (whole run)",
        "traffic_matrix_off_theory",
        text=lambda f: _mb(sum(f.traffic_matrix_off_theory.values())) if f.traffic_matrix_error else DASH,
        doc="sum of traffic_matrix_off_theory: " + DOCS.get("traffic_matrix_off_theory", ""),
    ),
    Col(
        "bubble (theory)",
        "pp_bubble",
        text=lambda f: bracketed(f.pp_bubble, "f2", fmt(f.pp_bubble_theory, "f2")),
        doc=DOCS["pp_bubble"] + "; in brackets: pp_bubble_theory",
    ),
    Col(
        "hottest port (drops)",
        "worst_queue_port",
        "text",
        text=lambda f: f"{f.worst_queue_port} ({f.drops_by_port.get(f.worst_queue_port, 0)})"
        if f.worst_queue_port
        else DASH,
        doc=DOCS["worst_queue_port"] + "; in brackets: its drops (drops_by_port)",
    ),
    Col("queue drops, all ports", "queue_drops_total"),
    Col("timeouts (pcap)", "tcp_timeouts_pcap"),
    Col("timeouts (kernel)", "tcp_timeouts_kernel"),
]


def pairs(matrix: dict[str, Any]) -> list[tuple[str, str]]:
    """The cells ('h2->h3') of a matrix with bytes, as (sender, receiver)."""
    return [(a, b) for k, v in matrix.items() if v for a, _, b in [k.partition("->")]]


def fans(theory: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Per host, the hosts it sends to and the hosts it receives from in the theory."""
    out: dict[str, int] = {}
    into: dict[str, int] = {}
    for a, b in pairs(theory):
        out[a] = out.get(a, 0) + 1
        into[b] = into.get(b, 0) + 1
    return out, into


def pattern(theory: dict[str, int]) -> str:
    """Who sends to whom, in words, from the theory's cells."""
    out, into = fans(theory)
    hosts = set(out) | set(into)
    n = len(hosts)
    if n >= 3 and all(out.get(h) == n - 1 and into.get(h) == n - 1 for h in hosts):
        return f"every host sends to all {n - 1} others at once (an all-to-all)"
    if all(v == 1 for v in out.values()) and all(v == 1 for v in into.values()):
        return "each host sends to one other only, and receives from one other (a ring: the next rank)"
    if (
        max(out.values()) <= 2
        and max(into.values()) <= 2
        and all((b, a) in pairs(theory) for a, b in pairs(theory))
    ):
        return "each host sends only to its neighbours in a chain, both ways"
    return f"each host sends to up to {max(out.values())} hosts and receives from up to {max(into.values())}"


def incast_ports(run: RunView, f: StrategySummary) -> list[tuple[str, str, int]]:
    """(port, host, senders) of the host ports facing an incast receiver: one that every other host of
    the job sends to in a step (an all-to-all's), INCAST_FAN_IN of them or more."""
    out, into = fans(f.traffic_matrix_theory)
    others = len(set(out) | set(into)) - 1
    hosts = sorted((h for h, k in into.items() if k >= max(INCAST_FAN_IN, others)), key=natural)
    return [(run.plan.host(h).leaf_port, h, into[h]) for h in hosts]


def plural(n: int, what: str) -> str:
    """'1 drop', '2 drops'."""
    return f"{n} {what}" + ("" if n == 1 else "s")


def strategy_sentence(run: RunView, name: str) -> str:
    """One strategy's bytes against its theory, and its receivers' incast where it has one."""
    f = run.strategies[name].summary
    text = f"{name}: {_mb(f.bytes_per_worker_step_theory)} MB per worker per step in theory"
    if f.traffic_matrix_error_max is not None:
        text += (
            f", {_mb(f.bytes_per_worker_step_pcap)} MB measured; every host pair the theory counts within "
            f"{f.traffic_matrix_error_max * 100:.1f} % of it, and "
            f"{_mb(sum(f.traffic_matrix_off_theory.values()))} MB in the whole run on pairs it does not "
            "count (rendezvous, barriers)"
        )
    else:
        text += ", nothing measured to hold against it (no host captures)"
    if f.pp_bubble is not None and f.pp_bubble_theory is not None:
        text += (
            f"; its stages idle {f.pp_bubble * 100:.0f} % of their steps against "
            f"{f.pp_bubble_theory * 100:.0f} % for (S - 1)/(M + S - 1), the bubble of free communication"
        )
    ports = incast_ports(run, f)
    if ports:
        drops = sum(f.drops_by_port.get(p, 0) for p, _, _ in ports)
        items = ", ".join(
            f"{p} (to {h}, {k} senders: {plural(f.drops_by_port.get(p, 0), 'drop')}, "
            f"{plural(f.tcp_timeouts_by_receiver.get(h, 0), 'timeout')})"
            for p, h, k in ports
        )
        text += (
            ". The receivers' incast: the host ports that receive from every other host at "
            f"once, {items}; "
            + (
                f"{drops} of the strategy's {fmt(f.queue_drops_total, 'int')} queue drops"
                if f.queue_drops_total
                else "no switch queue dropped a packet"
            )
        )
    elif f.worst_queue_port:
        text += (
            f". No host receives from all others at once; its hottest port, {f.worst_queue_port}, "
            f"dropped {f.drops_by_port.get(f.worst_queue_port, 0)}"
        )
    return text + "."


def moved_what_where(run: RunView, names: list[str]) -> str:
    """The strategies grouped by who sends to whom."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(pattern(run.strategies[n].summary.traffic_matrix_theory), []).append(n)
    return " ".join(f"{enumerate_names(ns)}: {p}." for p, ns in groups.items())


def enumerate_names(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def matrix_grids(f: StrategySummary) -> tuple[list[str], list[list[float]] | None, list[list[float]]]:
    """The hosts of a strategy's matrices and both as MB per step (measured None without captures)."""
    cells = pairs(f.traffic_matrix_theory) + pairs(f.traffic_matrix_pcap)
    hosts = sorted({h for c in cells for h in c}, key=natural)
    steps = max(f.steps, 1)

    def grid(m: dict[str, int]) -> list[list[float]]:
        return [[m.get(f"{a}->{b}", 0) / steps / 1e6 for b in hosts] for a in hosts]

    measured = grid(f.traffic_matrix_pcap) if f.traffic_matrix_error_max is not None else None
    return hosts, measured, grid(f.traffic_matrix_theory)


def parallel(run: RunView) -> Section | None:
    """The section, for a run with a model split (None for the others: the Comparison says it all)."""
    if not any(s.spec and s.spec.kind in MODEL_SPLITS for s in run.present):
        return None
    return section(run)


def section(run: RunView) -> Section:
    """Every strategy's row, the paragraph on who moved what where, each traffic matrix beside its theory."""
    names = [s.name for s in run.present if s.summary.traffic_matrix_theory]
    table = summary_table(
        run,
        "One row per strategy",
        PARALLEL_COLUMNS,
        [s.name for s in run.present],
        by_design={"pp_bubble": f"{DASH} in bubble: only a pipeline (pp) has one."},
    )
    blocks: list[Any] = [
        table,
        Paragraph("Who sent to whom, by the strategies' own theories: " + moved_what_where(run, names)),
        Bullets([strategy_sentence(run, n) for n in names]),
    ]
    for n in names:
        f = run.strategies[n].summary
        hosts, measured, theory = matrix_grids(f)
        err = f.traffic_matrix_error_max
        title = f"{n}: MB per training step host to host, " + (
            f"measured beside theory (worst pair off by {err * 100:.1f} %)"
            if err is not None
            else "theory only (no host captures)"
        )
        blocks.append(
            figure(
                "traffic_matrix_" + re.sub(r"[^a-z0-9]+", "_", n.lower()),
                matrix_figure(n, hosts, measured, theory, title),
                f"Traffic matrix of {n}",
                "Left: payload bytes each receiving host's capture saw arrive from each sender (each "
                "byte once; summary.json traffic_matrix_pcap), / steps. Right: the strategy's "
                "traffic_theory(job) on the same hosts (traffic_matrix_theory / steps). Framed: cells the "
                f"theory leaves empty that carried at least {FRAME_SHARE * 100:g} % of the scale's top (the "
                "rendezvous store at rank 0's host, barriers); their bytes in the table's MB off the theory.",
                {"hosts": hosts, "measured_mb": measured, "theory_mb": theory, "error_max": err},
            )
        )
    return Section("Parallel strategies: who sent what where", blocks)
