"""Stragglers and convergence: only with configured stragglers or the strategies made for them
(async, ssp, backup). Compute share per worker, the parameter server's updates and their staleness,
the loss against step and time, the time to the target loss, and what each strategy did about the
slow worker, in sentences.
"""

from __future__ import annotations

import statistics

from report import series as S
from report.doc import Bullets, Column, Row, Section, Table
from report.figures.stragglers import compute_share_figure, loss_figure, staleness_figure
from report.run import STRAGGLER_STRATEGIES, RunView
from report.sections.common import colors, figure, loss_series, time_range
from report.sections.tables import PS_COLUMNS, fmt, summary_table


def straggler_ranks(run: RunView) -> dict[int, str]:
    """rank -> host of every configured straggler."""
    hosts = run.config.worker_hosts
    return {hosts.index(st.host): st.host for st in run.config.stragglers if st.host in hosts}


def stragglers(run: RunView) -> Section | None:
    """Compute share, staleness, loss against step and time: only with stragglers or the strategies
    made for them (async, ssp, backup)."""
    if not run.has_stragglers or not run.present:
        return None
    sec = Section("Stragglers and convergence")
    slow = straggler_ranks(run)
    sec.add(Bullets(_straggler_sentences(run, slow)))
    shares = {
        s.name: {
            int(k): v
            for k, v in sorted(s.summary.worker_compute_share_by_rank.items(), key=lambda kv: int(kv[0]))
        }
        for s in run.present
        if s.summary.worker_compute_share_by_rank
    }
    if shares:
        sec.add(
            figure(
                "compute_share",
                compute_share_figure(shares, slow, colors(run)),
                "Worker compute share",
                "Each worker's compute time over its own active span (summary.json "
                "worker_compute_share_by_rank); hatched: the configured straggler. A fast worker that "
                "waits for a straggler computes a small share of its time.",
                {"shares": shares, "stragglers": slow},
            )
        )
    psf = [s.name for s in run.ps_family]
    if psf:
        cols = [c for c in PS_COLUMNS if c.key != "ssp_max_gap" or "ssp" in psf]
        sec.add(summary_table(run, "Parameter-server updates", cols, psf))
    hists = {
        s.name: {int(k): int(v) for k, v in s.summary.staleness_histogram.items()}
        for s in run.ps_family
        if s.summary.staleness_histogram
    }
    if hists and any(n in STRAGGLER_STRATEGIES for n in hists):
        sec.add(
            figure(
                "staleness",
                staleness_figure(hists, colors(run)),
                "Staleness of applied updates",
                "Applied parameter-server updates per staleness (summary.json staleness_histogram); "
                "synchronous strategies apply only fresh (staleness 0) gradients.",
                hists,
            )
        )
    loss = loss_series(run)
    target = run.config.target_loss
    if loss:
        sec.add(
            figure(
                "loss",
                loss_figure(loss, target, time_range(run), colors(run)),
                "Loss",
                "Mean loss over the workers per step, against the step and against time since the "
                "first training step."
                + (
                    f" Dashed: the target loss {target:g} (config target_loss)." if target is not None else ""
                ),
                {"strategies": loss, "target": target, "xlim": time_range(run)},
            )
        )
    if target is not None and loss:
        tt = {n: S.time_to_target(d, float(target)) for n, d in loss.items()}
        sec.add(
            Table(
                f"Time to loss <= {target:g}",
                "strategy",
                [Column("seconds from the first step")],
                [Row(n, ["not reached" if v is None else f"{v:.2f}"]) for n, v in tt.items()],
                values={n: {"seconds": v} for n, v in tt.items()},
            )
        )
    return sec


def _straggler_sentences(run: RunView, slow: dict[int, str]) -> list[str]:
    out = []
    cfg = run.config
    if slow:
        desc = []
        for st in cfg.stragglers:
            knobs = [f"{k}={getattr(st, k)}" for k in ("cpu", "link_mbit") if getattr(st, k) is not None]
            knobs += [
                f"{k}={getattr(st, k)}"
                for k, neutral in (("slow_every", 0), ("slow_factor", 1.0), ("compute_factor", 1.0))
                if getattr(st, k) != neutral
            ]
            desc.append(st.host + (f" ({', '.join(knobs)})" if knobs else ""))
        out.append(
            "Straggler: "
            + ", ".join(f"worker rank {r} ({h})" for r, h in slow.items())
            + f"; configured as {'; '.join(desc)}."
        )
        parts = []
        for s in run.present:
            by = s.summary.worker_compute_share_by_rank
            fast = [v for k, v in by.items() if int(k) not in slow]
            strag = [v for k, v in by.items() if int(k) in slow]
            if fast and strag:
                parts.append(
                    f"{s.name} {statistics.fmean(fast) * 100:.1f} % (straggler "
                    f"{statistics.fmean(strag) * 100:.1f} %)"
                )
        if parts:
            out.append("Fast workers' mean compute share: " + ", ".join(parts) + ".")
    for s in run.present:
        f = s.summary
        if s.name == "ssp":
            if f.ssp_max_gap is None:
                out.append("ssp: no step gap recorded.")
            else:
                plural = "s" if f.ssp_max_gap != 1 else ""
                t = (
                    f"ssp: the fastest worker was at most {f.ssp_max_gap} step{plural} ahead of the slowest "
                    f"(bound s={cfg.staleness})"
                )
                out.append(
                    t
                    + (
                        "."
                        if f.ssp_max_gap <= cfg.staleness
                        else f"; this EXCEEDS the bound by {f.ssp_max_gap - cfg.staleness}."
                    )
                )
        if s.name == "backup":
            per = f.discarded_per_step
            if per and min(per) == max(per):
                t = f"backup discarded {per[0]} update{'s' if per[0] != 1 else ''} per step (b={cfg.backup})"
            elif per:
                t = f"backup discarded {min(per)}-{max(per)} updates per step (b={cfg.backup})"
            else:
                t = f"backup: no per-step discard record (b={cfg.backup})"
            if f.updates_discarded is not None:
                t += f", {f.updates_discarded} in total"
            out.append(t + ".")
        if s.name == "async" and f.staleness_histogram:
            total = sum(f.staleness_histogram.values())
            stale = total - f.staleness_histogram.get("0", 0)
            mean = fmt(f.staleness_mean, "f2")
            out.append(
                f"async: {stale} of {total} applied updates were stale (mean staleness {mean}, max "
                f"{f.staleness_max})."
            )
    return out or ["No straggler was configured; the strategies below are the ones made for stragglers."]
