"""The top of the run page: the facts line (the run's parameters), the boxes that warn about the run
itself (incomplete, captures, damaged files, a rebuilt summary.json) and the Findings, which strategy
lost what where, in sentences made of summary.json's figures.
"""

from __future__ import annotations

from report import series as S
from report.doc import Bullets, Callout, Paragraph, Section
from report.run import RunView
from report.sections.common import loss_series
from report.sections.cures import hottest_shard_port
from report.sections.events import fault_sentences
from report.sections.tables import busiest_utilised, is_num


def incomplete_run(run: RunView) -> Callout | None:
    """The run did not finish: which strategy ended how."""
    if run.summary.complete:
        return None
    items = []
    for name, s in run.strategies.items():
        st = s.summary.state
        if st != "complete":
            why = s.summary.error or ("no strategy folder" if st == "missing" else "")
            items.append(f"{name}: {st}" + (f" ({why})" if why else ""))
    items.append("The figures show what was recorded before it ended.")
    return Callout("Run incomplete", items, "warning")


def capture_problems(run: RunView) -> Callout | None:
    """Captures that lost packets or could not be read: the pcap counts undercount."""
    cap = run.summary.capture
    items = []
    if cap.enabled and not cap.complete:
        pts = ", ".join(cap.incomplete_points) or "see capture.json"
        items.append(
            f"Packet capture incomplete ({pts}; {cap.packets_dropped_kernel} packets dropped by the "
            "kernel): the pcap columns undercount."
        )
    for name, s in run.strategies.items():
        if s.summary.pcap_error:
            items.append(f"{name}: the captures could not be read ({s.summary.pcap_error}).")
    return Callout("Captures", items, "warning") if items else None


def damaged_files(run: RunView) -> Callout | None:
    """Files the readers had to skip parts of."""
    return Callout("Damaged or unreadable files", run.problems, "warning") if run.problems else None


def summary_rebuilt(run: RunView) -> Callout | None:
    """summary.json was recomputed from the folder by the code that writes it after a run."""
    if not run.rebuilt:
        return None
    return Callout(
        "summary.json rebuilt",
        [
            f"{run.rebuilt}; it was recomputed from the run folder by "
            "analysis.summary (the code that writes it after a run) and "
            "saved."
        ],
        "info",
    )


def findings(run: RunView) -> Section | None:
    """Which strategy lost what where, in sentences made of summary.json's figures."""
    names = [s.name for s in run.present]
    if not names:
        return Section(
            "Findings", [Paragraph("No strategy of this run left a folder: nothing was measured.")]
        )
    figs = {n: run.strategies[n].summary for n in names}
    ref = max(
        names,
        key=lambda n: (hottest_shard_port(run, run.strategies[n])[1] or 0, figs[n].queue_drops_total or 0),
    )
    items = [_strategy_sentence(run, n, ref) for n in [ref, *(x for x in names if x != ref)]]
    items += fault_sentences(run)
    if run.config.target_loss is not None:
        items.append(_target_sentence(run))
    return Section("Findings", [Bullets(items)])


def _strategy_sentence(run: RunView, name: str, ref: str) -> str:
    f, r = run.strategies[name].summary, run.strategies[ref].summary
    parts = []
    total = f.queue_drops_total
    port, drops = hottest_shard_port(run, run.strategies[name])
    if port is not None and drops is not None:
        one = len(run.shard_ports(name)) == 1 and port == run.ps_port
        d = f"{drops} packets dropped at {port} ({'the PS port' if one else 'its hottest PS port'})"
        if total is not None and total > drops:
            d += f" and {total - drops} elsewhere in the fabric"
        parts.append(d)
    elif total is not None:
        d = f"{total} packets dropped in the fabric"
        if total and f.max_drop_port:
            d += f", most at {f.max_drop_port} ({f.max_port_drops})"
        parts.append(d)
    timeouts = getattr(f, "tcp_timeouts_pcap", None)
    if f.tcp_retransmits_pcap is not None:
        rtx = f"{f.tcp_retransmits_pcap} TCP retransmissions"
        if timeouts is not None:
            rtx += f" and {timeouts} retransmission timeout{'s' if timeouts != 1 else ''}"
        parts.append(rtx + " in the captures")
    elif f.tcp_retransmits_kernel is not None:
        parts.append(f"{f.tcp_retransmits_kernel} TCP retransmissions (kernel count)")
    link = busiest_utilised(f)
    if f.busiest_link_utilisation is not None and link:
        parts.append(
            f"the busiest link direction {link} ran at {f.busiest_link_utilisation * 100:.0f} % of its rate"
        )
    elif f.max_link_share is not None and f.busiest_link:
        parts.append(
            f"the busiest link direction {f.busiest_link} carried {f.max_link_share * 100:.0f} % of "
            "the link bytes"
        )
    if f.iter_time_s is not None:
        it = f"median iteration {f.iter_time_s:.3f} s"
        if name != ref and r.iter_time_s and f.iter_time_s > 0:
            ratio = r.iter_time_s / f.iter_time_s
            it += (
                f", {ratio:.2f}x faster than {ref}" if ratio >= 1 else f", {1 / ratio:.2f}x slower than {ref}"
            )
        parts.append(it)
    tail = "" if f.state == "complete" else f" [{f.state}]"
    return f"{name}: " + ("; ".join(parts) if parts else "no figures") + tail + "."


def _target_sentence(run: RunView) -> str:
    target = float(run.config.target_loss or 0.0)
    tt = {n: S.time_to_target(d, target) for n, d in loss_series(run).items()}
    text = ", ".join(f"{n} {v:.2f} s" if v is not None else f"{n} not reached" for n, v in tt.items())
    return f"Time to loss <= {target:g} (config target_loss), from the first training step: {text}."


def facts(run: RunView) -> list[str]:
    """The run's parameters in one line."""
    cfg, fab = run.config, run.config.fabric
    out = [
        f"strategies {', '.join(cfg.strategies)}",
        f"{cfg.n_workers} workers",
        f"{cfg.steps} steps",
        f"gradient {cfg.grad_mb:g} MiB",
        f"batch {cfg.batch}",
        f"fabric {fab.spines} spines x {fab.leaves} leaves x {fab.hosts_per_leaf} hosts",
        f"host links {fab.host_mbit:g} Mbit/s, uplinks {fab.uplink_mbit:g} Mbit/s",
        f"switch buffers {fab.buffer_pkts} packets",
        f"PS {fab.ps_host} on {run.ps_port}",
        f"capture {cfg.capture}",
    ]
    if cfg.stragglers:
        out.append("stragglers " + ", ".join(st.host for st in cfg.stragglers))
    if cfg.faults:
        out.append("faults " + ", ".join(cfg.faults))
    env = run.environment
    if env:
        rto = env.get("rto_min_ms")
        out += [
            f"OVS {env.get('datapath', '?')} datapath",
            f"kernel {env.get('kernel', '?')}",
            f"{env.get('cores', '?')} cores",
            f"virtualisation {env.get('virtualisation', '?')}",
            f"TCP {env.get('cc', cfg.cc)}, minimum RTO "
            + (f"{rto:g} ms" if is_num(rto) else "?")
            + " (unless a variant sets its own)",
        ]
    else:
        out.append(f"TCP {cfg.cc}")
    return out
