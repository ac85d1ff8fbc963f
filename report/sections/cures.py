"""The cures: each parameter-server variant (sharding, a lower minimum RTO, another TCP, serial
replies) against the plain PS and the ring, as a table and in sentences made of summary.json's
numbers: which cure removed which loss.
"""

from __future__ import annotations

from report.doc import Bullets, Column, Row, Section, Table
from report.run import RunView, StrategyView
from report.sections.tables import DASH, DOCS, busiest_util_text, fmt, is_num, ratio_text
from report.sections.timing import reference_collective
from runmodel.summary import StrategySummary


def hottest_shard_port(run: RunView, s: StrategyView) -> tuple[str | None, int | None]:
    """The port toward one of the variant's PS hosts with the most drops (drops_by_port), and its drops."""
    ports = run.shard_ports(s.name)
    if not ports or s.summary.queue_drops_total is None:
        return None, None
    by = s.summary.drops_by_port
    port = max(ports, key=lambda p: (by.get(p, 0), -ports.index(p)))
    return port, int(by.get(port, 0))


def _tcp_text(f: StrategySummary) -> str:
    t = f.tcp or {}
    if not t:
        return DASH
    rto = t.get("rto_min_ms")
    return f"{t.get('cc', '?')}, RTO min " + (f"{rto:g} ms" if is_num(rto) else "?")


def cures(run: RunView) -> Section | None:
    """Each PS-family variant (sharding, a lower minimum RTO, another TCP) against the plain PS and the
    ring: what each cure changed, in a table and in sentences made of the numbers."""
    variants = [s for s in run.timed if s.ps_family]
    if len(variants) < 2:
        return None
    rows_of = [*variants, *(s for s in run.timed if not s.ps_family)]
    cols = [
        Column(
            "TCP",
            "summary.json tcp: the congestion control and minimum RTO read back from the "
            "kernel when the strategy started",
            numeric=False,
        ),
        Column("iteration (s)", DOCS["iter_time_s"]),
        Column("bound (s)", DOCS["bound_s"]),
        Column("iteration / bound", "iter_time_s / bound_s"),
        Column(
            "hottest PS-port drops",
            "queue drops at the busiest-dropping port toward one of the "
            "variant's PS hosts (drops_by_port; for one PS: ps_port_drops), in brackets that port",
        ),
        Column("timeouts (kernel)", DOCS["tcp_timeouts_kernel"]),
        Column("timeout cost per step (s)", "comm_split timeouts_s: timeout_idle_s / steps"),
        Column("busiest link utilisation", DOCS["busiest_link_utilisation"] + "; in brackets: that link"),
        Column("fidelity", "summary.json fidelity verdict", numeric=False),
    ]
    rows, values = [], {}
    for s in rows_of:
        f = s.summary
        port, drops = hottest_shard_port(run, s)
        to = f.comm_split.get("timeouts_s") if f.comm_split else None
        rows.append(
            Row(
                s.name,
                [
                    _tcp_text(f),
                    fmt(f.iter_time_s, "s"),
                    fmt(f.bound_s, "s"),
                    ratio_text(f.iter_time_s, f.bound_s),
                    f"{drops} ({port})" if port is not None else DASH,
                    fmt(f.tcp_timeouts_kernel, "int"),
                    fmt(to, "s"),
                    busiest_util_text(f),
                    str(f.fidelity.get("verdict") or DASH),
                ],
                bad=f.state != "complete",
            )
        )
        values[s.name] = {
            "tcp": f.tcp,
            "iter_time_s": f.iter_time_s,
            "bound_s": f.bound_s,
            "iter_over_bound": (f.iter_time_s / f.bound_s if f.iter_time_s and f.bound_s else None),
            "hottest_ps_port": port,
            "hottest_ps_port_drops": drops,
            "tcp_timeouts_kernel": f.tcp_timeouts_kernel,
            "timeouts_s": to,
            "busiest_link_utilisation": f.busiest_link_utilisation,
            "verdict": f.fidelity.get("verdict"),
        }
    table = Table(
        "Cures: one row per variant",
        "variant",
        cols,
        rows,
        values=values,
        notes=[f"{DASH} in hottest PS-port drops: the strategy has no parameter server."]
        if len(rows_of) > len(variants)
        else [],
    )
    return Section("Cures", [table, Bullets(cure_sentences(run, variants))])


def base_variant(variants: list[StrategyView]) -> StrategyView | None:
    """The plain variant the cures are measured against: a PS kind with no option (ps), else None."""
    for s in variants:
        sp = s.spec
        if sp and sp.shards == 1 and sp.rto_min_ms is None and sp.cc is None and sp.placement == "dedicated":
            return s
    return None


def _change(a: float, b: float, what: str, unit: str = "", digits: int = 3) -> str:
    """ "cut the step from 3.213 s to 1.029 s" / "raised ..." / "left ... at ..."."""
    fa, fb = f"{a:.{digits}f}{unit}", f"{b:.{digits}f}{unit}"
    if fa == fb:
        return f"left {what} at {fa}"
    return f"{'cut' if b < a else 'raised'} {what} from {fa} to {fb}"


def cure_of(s: StrategyView, base: StrategyView) -> str:
    """What the variant changes against the base, in words."""
    sp, bp = s.spec, base.spec
    if sp is None or bp is None:
        return s.name
    what = []
    if sp.shards != bp.shards or sp.placement != bp.placement:
        what.append(
            f"placing {sp.shards} shards on worker hosts"
            if sp.placement == "colocated"
            else f"sharding over {sp.shards} hosts"
        )
    if sp.rto_min_ms is not None:
        what.append(f"the {sp.rto_min_ms:g} ms minimum RTO")
    if sp.cc is not None:
        what.append(f"{sp.cc} congestion control")
    if sp.pull != bp.pull:
        what.append(
            "the models sent one worker after another" if sp.pull == "serial" else "every model sent at once"
        )
    return (" with ".join(what) or "the variant") + f" ({s.name})"


def cure_sentences(run: RunView, variants: list[StrategyView]) -> list[str]:
    """Which cure removed which loss: each variant against the plain PS, from summary.json's figures."""
    base = base_variant(variants)
    out: list[str] = []
    if base is None:
        out.append(
            "No plain parameter server (ps without options) in this run: the variants are not "
            "compared with one."
        )
    else:
        b = base.summary
        bport, bdrops = hottest_shard_port(run, base)
        for s in variants:
            if s is base:
                continue
            f = s.summary
            if f.iter_time_s is None or b.iter_time_s is None:
                continue
            port, drops = hottest_shard_port(run, s)
            bits = []
            if drops is not None and bdrops is not None:
                verb = "cut" if drops < bdrops else ("raised" if drops > bdrops else "left")
                bits.append(
                    f"{verb} the hottest PS port's drops from {bdrops} ({bport}) to {drops} ({port})"
                    if verb != "left"
                    else f"left the hottest PS port's drops at {drops} ({port})"
                )
            step = _change(b.iter_time_s, f.iter_time_s, "the step", " s")
            if f.bound_s is not None and b.bound_s is not None:
                same = f"{f.bound_s:.3f}" == f"{b.bound_s:.3f}"
                bound = (
                    f"bound {f.bound_s:.3f} s, unchanged"
                    if same
                    else f"bound {b.bound_s:.3f} s -> {f.bound_s:.3f} s"
                )
                step += (
                    f" ({bound}; iteration / bound {ratio_text(b.iter_time_s, b.bound_s)} -> "
                    f"{ratio_text(f.iter_time_s, f.bound_s)})"
                )
            bits.append(step)
            text = cure_of(s, base) + " " + " and ".join(bits) + "."
            if (
                f.tcp_timeouts_kernel is not None
                and b.tcp_timeouts_kernel is not None
                and f.comm_split
                and b.comm_split
            ):
                c0 = float(b.comm_split.get("timeouts_s") or 0)
                c1 = float(f.comm_split.get("timeouts_s") or 0)
                more = "less" if c1 < c0 else "more"
                text += (
                    f" Timeouts (kernel): {b.tcp_timeouts_kernel} -> {f.tcp_timeouts_kernel}; they cost "
                    f"{c1:.3f} s a step against {c0:.3f} s"
                )
                text += f", {abs(c1 - c0):.3f} s {more}." if f"{c0:.3f}" != f"{c1:.3f}" else ", the same."
            if f.comm_split and b.comm_split and f.comm_time_s is not None and b.comm_time_s is not None:
                d = {
                    k: float(f.comm_split.get(k) or 0) - float(b.comm_split.get(k) or 0)
                    for k in ("bound_s", "timeouts_s", "rest_s")
                }
                names = {"bound_s": "the bound", "timeouts_s": "timeouts", "rest_s": "the rest"}
                big = max(d, key=lambda k: abs(d[k]))
                text += (
                    f" Communication per step {b.comm_time_s:.3f} s -> {f.comm_time_s:.3f} s: bound "
                    f"{d['bound_s']:+.3f} s, timeouts {d['timeouts_s']:+.3f} s, rest {d['rest_s']:+.3f} "
                    f"s; the largest change is in {names[big]}."
                )
            out.append(text)
    ref = reference_collective(run)
    timed = [s for s in variants if s.summary.iter_time_s is not None]
    if ref is not None and timed and ref.summary.iter_time_s:
        best = min(timed, key=lambda s: s.summary.iter_time_s or 0.0)
        r = ref.summary
        out.append(
            f"{ref.name}: a step took {r.iter_time_s:.3f} s (bound {fmt(r.bound_s, 's')} s). The "
            f"fastest parameter-server variant, {best.name}, took {best.summary.iter_time_s:.3f} s, "
            f"{best.summary.iter_time_s / r.iter_time_s:.2f}x {ref.name}'s step."
        )
    degraded = [
        s.name
        for s in [*variants, *([ref] if ref else [])]
        if s.summary.fidelity.get("verdict") == "degraded"
    ]
    if degraded:
        out.append(
            "Fidelity degraded for " + ", ".join(degraded) + " (the box at the top): read their "
            "differences with that in mind."
        )
    return out
