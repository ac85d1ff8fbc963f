"""The incast sweep's figures, computed from the files of its run folder only: incast.json (one
row per curve and sender count, runmodel.incast.IncastRow defines each field) and timeline.json
(one collapsed round, packet by packet).

Per point: goodput from the client's log over the first request to the last byte; the kernel's
counters over the senders' namespaces (hosts.json) next to the timeouts their own captures show
(analysis.rto); the fidelity checks (analysis.fidelity) on the client's port. Why the timer figures
are built as they are:

- a tail loss probe that waited at least 0.75 x the minimum RTO is a timer stall too: Linux probes a
  lone segment in flight only after srtt/2 + the minimum RTO, so it costs what a timeout costs.
  Stalls whose waits overlap form one *wave*.
- timer_waits: per round, the stalls of the sender that stalled most, the k-th backoff counted 2^k
  (it waits 2^k RTOs), summed over rounds: a round cannot end before its last block.
- lost_s (duration minus the bytes at the payload rate, B x 1448/1514) against explained_s
  (timer_waits x the minimum RTO) and timeout_idle_s (the client's link idle, gaps over 2 ms, while
  a sender waited): the share of lost goodput timeouts explain, modelled and measured.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from analysis.errors import AnalysisError
from analysis.fidelity import cpu_figures, run_verdict, unexplained_loss_share, verdict
from analysis.spans import overlap_s
from runmodel.fabric import Plan
from runmodel.incast import (
    IncastConfig,
    IncastFolder,
    IncastLine,
    IncastResult,
    IncastRow,
    LineSettings,
    PointFolder,
    RoundRecord,
)
from runmodel.records import read_json, write_json

PAYLOAD_SHARE = 1448 / 1514  # payload of a full frame (MTU 1500, TCP timestamps) over what HTB charges
STALL_TOLERANCE = 0.75  # a loss probe is a timer stall when it waited at least this x the minimum RTO
IDLE_GAP_S = 0.002
GOALS = {"one_sender": 0.90, "collapse": 0.30, "cure": 0.80, "explained": 0.75}


# -- small helpers ------------------------------------------------------------------------------------
def idle_spans(times_s: np.ndarray, gap_s: float = IDLE_GAP_S) -> list[tuple[float, float]]:
    """Spans between consecutive arrivals longer than gap_s."""
    t = np.sort(times_s)
    if t.size < 2:
        return []
    gaps = np.flatnonzero(np.diff(t) > gap_s)
    return [(float(t[i]), float(t[i + 1])) for i in gaps]


def waves(stalls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Timer stalls whose waits overlap, grouped: {"start", "end", "stalls", "backoff"} each."""
    out: list[dict[str, Any]] = []
    for st in sorted(stalls, key=lambda s: s["t"] - s["idle_s"]):
        a, b = st["t"] - st["idle_s"], st["t"]
        if out and a <= out[-1]["end"]:
            w = out[-1]
            w["end"] = max(w["end"], b)
            w["stalls"] += 1
            w["backoff"] = max(w["backoff"], st["backoff"])
        else:
            out.append({"start": a, "end": b, "stalls": 1, "backoff": st["backoff"]})
    return out


def timer_waits(rounds: list[RoundRecord], stalls: list[dict[str, Any]]) -> list[int]:
    """Per round: the timer waits (2^backoff each) of the sender that waited most in it."""
    out = []
    for r in rounds:
        per: dict[str, int] = {}
        for st in stalls:
            if r.t_start <= st["t"] <= r.t_end:
                per[st["host"]] = per.get(st["host"], 0) + 2 ** st["backoff"]
        out.append(max(per.values(), default=0))
    return out


def line_config(cfg: IncastConfig, s: LineSettings, plan: Plan) -> dict[str, Any]:
    """The config block of a row."""
    return {
        "rto_min_ms": s.rto_min_ms,
        "cc": s.cc,
        "buffer_pkts": s.buffer_pkts,
        "sru_bytes": cfg.sru_bytes,
        "link_mbit": plan.host(cfg.client).rate_mbit,
        "quickack": s.quickack,
        "max_concurrent": s.max_concurrent,
    }


def _read(path: Path) -> Any:
    from analysis.pcapfile import read_pcap

    return read_pcap(str(path), allow_truncated=True, require_tcp=False)


# -- losses, and which a switch queue was dropping at the time -----------------------------------------
ATTRIBUTION_S = 0.01  # a loss is a queue's when a drop counter rose within this after the segment left


def lost_segments(sent: Any, arrived: Any) -> list[float]:
    """Send times (s) of the data segments in `sent` (one sender's capture, toward one receiver) that
    never reached `arrived` (a capture after the bottleneck). Copies of a segment are told apart by
    their TCP timestamp (TSval, ms of the sender's clock): a retransmission carries a later one, so a
    lost original is not hidden by the retransmission that got through."""
    from analysis.tcpopts import read_options

    ts_sent, ts_arr = read_options(sent).tsval, read_options(arrived).tsval
    have: dict[tuple[int, int, int, int], int] = {}
    for i in np.flatnonzero(arrived.plen > 0).tolist():
        key = (int(arrived.sport[i]), int(arrived.seq[i]), int(arrived.plen[i]), int(ts_arr[i]))
        have[key] = have.get(key, 0) + 1
    lost = []
    idx = np.flatnonzero(sent.plen > 0)
    for i in idx[np.argsort(sent.ts_ns[idx], kind="stable")].tolist():
        key = (int(sent.sport[i]), int(sent.seq[i]), int(sent.plen[i]), int(ts_sent[i]))
        if have.get(key, 0) > 0:
            have[key] -= 1
        else:
            lost.append(int(sent.ts_ns[i]) / 1e9)
    return lost


def drop_spans(samples: list[Any], interval_s: float) -> np.ndarray:
    """[(t0, t1)] sample intervals in which some port's qdisc drop counter rose, sorted by t1. The
    sampler reads every port each tick and writes a port's line only when it changed, so a rise seen
    at a line happened in the tick before it: t0 is at most two ticks before t1."""
    by_port: dict[str, list[Any]] = {}
    for q in samples:
        by_port.setdefault(q.port, []).append(q)
    spans = []
    for rows in by_port.values():
        rows.sort(key=lambda q: q.t)
        for a, b in zip(rows, rows[1:], strict=False):
            if b.drops > a.drops:
                spans.append((max(a.t, b.t - 2 * interval_s), b.t))
    arr = np.array(sorted(spans, key=lambda s: s[1]), dtype=np.float64).reshape(-1, 2)
    return arr


def unattributed(lost: list[float], spans: np.ndarray, within: float = ATTRIBUTION_S) -> int:
    """How many losses no queue was dropping for: no drop counter rose in [t, t + within] (the
    segment's way to the queue takes its transit; a sample interval is one span)."""
    if not lost:
        return 0
    if spans.size == 0:
        return len(lost)
    t1 = spans[:, 1]
    run_min_t0 = np.minimum.accumulate(spans[::-1, 0])[::-1]  # earliest start among spans ending >= here
    out = 0
    for t in lost:
        j = int(np.searchsorted(t1, t))  # first span ending at or after t
        if j >= len(t1) or run_min_t0[j] > t + within:
            out += 1
    return out


# -- one point ----------------------------------------------------------------------------------------
class PointCaptures:
    """What the captures of one point say: timeouts per sender, timer stalls, delivered bytes, drops."""

    def __init__(
        self, pf: PointFolder, plan: Plan, client: str, senders: list[str], rto_min_s: float
    ) -> None:
        from analysis.goodput import delivered_bytes
        from analysis.packets import str_to_ip
        from analysis.rto import rto_events
        from analysis.tcpopts import read_options

        cap = pf.capture()
        if cap is None:
            raise AnalysisError(f"{pf.name}: no capture.json")
        self.complete = cap.complete
        files = {p.name: pf.path / p.file for p in cap.points}
        self.client_ip = str_to_ip(plan.host(client).ip)
        self.client = _read(files[client])
        self.port = _read(files["client-port"]) if "client-port" in files else None
        self.timeouts: dict[str, int] = {}
        self.probes: dict[str, int] = {}
        self.retransmits: dict[str, int] = {}
        self.stalls: list[dict[str, Any]] = []
        self.fabric_drops = 0
        self.lost_times: list[float] = []
        self.senders: dict[str, Any] = {}
        for h in senders:
            pk = _read(files[h])
            self.senders[h] = pk
            ip = plan.host(h).ip
            rto = rto_events(pk, tsval=read_options(pk).tsval, rto_min_s=rto_min_s)
            mine = [f for f in rto.flows if f.src == ip]
            self.timeouts[h] = sum(f.timeouts for f in mine)
            self.probes[h] = sum(f.loss_probes for f in mine)
            self.retransmits[h] = sum(f.retransmits for f in mine)
            for f in mine:
                for ev in f.events:
                    if ev.kind != "tlp" or ev.idle_s >= STALL_TOLERANCE * rto_min_s:
                        self.stalls.append(
                            {
                                "host": h,
                                "t": ev.t,
                                "idle_s": ev.idle_s,
                                "kind": ev.kind,
                                "backoff": ev.backoff,
                            }
                        )
            hip = str_to_ip(ip)
            sel_s = (pk.src == hip) & (pk.dst == self.client_ip)
            sel_r = (self.client.src == hip) & (self.client.dst == self.client_ip)
            if sel_s.any():
                lost = lost_segments(pk.select(sel_s), self.client.select(sel_r))
                self.lost_times += lost
                self.fabric_drops += len(lost)
        got = delivered_bytes(self.client, receiver=plan.host(client).ip)
        self.delivered = int(sum(f.bytes for f in got.flows))

    def arrivals_s(self) -> np.ndarray:
        """Times (s) the client's capture saw data arrive."""
        p = self.client
        sel = (p.dst == self.client_ip) & (p.plen > 0)
        return p.ts_ns[sel] / 1e9


def dequeue_ratio(
    pf: PointFolder, port_pk: Any, port: str, rate_mbit: float, client_ip: str
) -> dict[str, Any]:
    """Median gap / serialization time at the client's port while backlogged (its egress capture)."""
    from analysis.dequeue import QueueSamples, dequeue_gaps

    samples = [q for q in pf.queue_samples() if q.port == port]
    if port_pk is None or not samples:
        return {"dequeue_port": port, "dequeue_gap_median_over_ideal": None, "dequeue_gaps": 0}
    qs = QueueSamples(
        t=np.array([q.t for q in samples]), backlog_packets=np.array([q.backlog_packets for q in samples])
    )
    gaps = dequeue_gaps(port_pk, qs, rate_mbit * 1e6, receiver=client_ip)
    return {
        "dequeue_port": port,
        "dequeue_gap_median_over_ideal": gaps.median_ratio,
        "dequeue_gaps": gaps.gaps,
    }


def queue_drops(pf: PointFolder, port: str) -> tuple[int | None, int | None]:
    """Drops of every switch qdisc over the point, and of the client's port (the sampler's account)."""
    doc = read_json(pf.queue_depth_summary_file)
    if not isinstance(doc, dict) or not isinstance(doc.get("ports"), dict):
        return None, None
    ports = doc["ports"]
    total = sum(int(p.get("drops_delta", 0)) for p in ports.values())
    return total, int(ports.get(port, {}).get("drops_delta", 0))


def analyze_point(pf: PointFolder, cfg: IncastConfig, plan: Plan, line: IncastLine, n: int) -> IncastRow:
    """Every figure of one point (a row of incast.json)."""
    s = cfg.settings(line)
    row = IncastRow(line=line.name, senders=n, config=line_config(cfg, s, plan))
    if not pf.exists:
        return row
    status = pf.status()
    row.state = status.state if status else "incomplete"
    row.error = status.error if status else "status.json missing"
    log = pf.rounds()
    rounds = log.rounds
    row.rounds = len(rounds)
    if not rounds:
        row.error = row.error or log.error or "no round logged"
        return row
    rate = plan.host(cfg.client).rate_mbit
    rto_min_s = s.rto_min_ms / 1000.0
    row.app_bytes = sum(r.bytes for r in rounds)
    t0, t1 = rounds[0].t_start, rounds[-1].t_end
    row.duration_s = round(t1 - t0, 6)
    if t1 > t0:
        row.goodput_mbit = round(row.app_bytes * 8 / (t1 - t0) / 1e6, 4)
        row.goodput_frac = round(row.goodput_mbit / rate, 4)
    durations = [r.duration_s for r in rounds]
    row.round_s_median = round(statistics.median(durations), 6)
    row.round_s_max = round(max(durations), 6)
    senders = cfg.servers(n)
    counters = pf.hosts()
    if counters is not None:
        row.timeouts_by_host = {h: counters[h].counter("TcpExtTCPTimeouts") for h in senders if h in counters}
        row.timeouts_kernel = sum(row.timeouts_by_host.values())
        row.loss_probes_kernel = sum(
            counters[h].counter("TcpExtTCPLossProbes") for h in senders if h in counters
        )
        row.retransmits_kernel = sum(counters[h].tcp_retransmits for h in senders if h in counters)
        row.spurious_rtos_kernel = sum(
            counters[h].counter("TcpExtTCPSpuriousRTOs") for h in senders if h in counters
        )
        if cfg.client in counters:
            row.timeouts_client_kernel = counters[cfg.client].counter("TcpExtTCPTimeouts")
    port = cfg.client_port(plan)
    row.queue_drops, row.client_port_drops = queue_drops(pf, port)
    row.ideal_s = round(row.app_bytes * 8 / (rate * 1e6 * PAYLOAD_SHARE), 6)
    row.lost_s = round(max(0.0, (t1 - t0) - row.ideal_s), 6)
    checks: dict[str, Any] = {
        "unexplained_loss_share": None,
        "dequeue_port": port,
        "dequeue_gap_median_over_ideal": None,
        "capture_complete": None,
    }
    cap = pf.capture()
    if cap is not None and cap.points:
        try:
            pc = PointCaptures(pf, plan, cfg.client, senders, rto_min_s)
        except (AnalysisError, KeyError) as exc:
            checks["capture_error"] = f"{type(exc).__name__}: {exc}"
        else:
            checks["capture_complete"] = pc.complete
            row.timeouts_pcap_by_host = pc.timeouts
            row.timeouts_pcap = sum(pc.timeouts.values())
            row.delivered_bytes_pcap = pc.delivered
            inside = [st for st in pc.stalls if t0 <= st["t"] <= t1 + 0.5]
            ws = waves(inside)
            row.timeout_waves = len(ws)
            row.rounds_with_timeout = sum(
                1 for r in rounds if any(r.t_start <= st["t"] <= r.t_end for st in inside)
            )
            spans = [(st["t"] - st["idle_s"], st["t"]) for st in inside]
            arrivals = pc.arrivals_s()
            arrivals = arrivals[(arrivals >= t0) & (arrivals <= t1)]
            idle = idle_spans(np.concatenate([[t0], arrivals, [t1]]))
            row.timeout_idle_s = round(overlap_s(idle, spans), 6)
            row.timer_waits = sum(timer_waits(rounds, inside))
            row.explained_s = round(row.timer_waits * rto_min_s, 6)
            if row.lost_s and row.lost_s > 0:  # a share: what the model over-explains is in explained_s
                row.explained_frac = round(min(row.explained_s, row.lost_s) / row.lost_s, 4)
                row.idle_frac = round(min(row.timeout_idle_s, row.lost_s) / row.lost_s, 4)
            dspans = drop_spans(pf.queue_samples(), cfg.queue_sample_ms / 1000.0)
            loose = unattributed(pc.lost_times, dspans)
            checks["unexplained_loss_share"] = round(loose / pc.fabric_drops, 4) if pc.fabric_drops else 0.0
            checks["fabric_drops_pcap"] = pc.fabric_drops
            checks["losses_no_queue_was_dropping"] = loose
            checks["count_mismatch_share"] = unexplained_loss_share(pc.fabric_drops, row.queue_drops)
            checks.update(dequeue_ratio(pf, pc.port, port, rate, plan.host(cfg.client).ip))
    if status and status.t_start and status.t_end:
        checks.update(cpu_figures(pf.cpu_samples(), status.t_start, status.t_end))
    checks["queue_drops"] = row.queue_drops
    row.fidelity = verdict(checks)
    if row.state != "complete":
        row.fidelity["verdict"] = "degraded"
        row.fidelity["reasons"] = [*row.fidelity["reasons"], f"the point did not complete ({row.error})"]
    return row


# -- the collapsed round, packet by packet --------------------------------------------------------------
def pick_timeline(rows: list[IncastRow]) -> IncastRow | None:
    """The point the timeline shows: the most collapsed point with timer stalls, of the first curve
    with the Linux minimum RTO (200 ms), else of any curve."""
    done = [
        r for r in rows if r.state == "complete" and r.goodput_frac is not None and (r.timer_waits or 0) > 0
    ]
    if not done:
        return None
    slow = [r for r in done if r.config.get("rto_min_ms", 0) >= 100]
    pool = slow or done
    first = pool[0].line
    pool = [r for r in pool if r.line == first] or pool
    return min(pool, key=lambda r: (r.goodput_frac or 1.0, -r.senders))


def timeline(pf: PointFolder, cfg: IncastConfig, plan: Plan, row: IncastRow) -> dict[str, Any]:
    """timeline.json: one round of a collapsed point: each sender's data packets (time since the
    round's first request, ms; sequence offset in the round, bytes; retransmission; lost: never
    reached the client), its timer stalls, the client's arrivals, idle gaps and port backlog."""
    from analysis.packets import str_to_ip

    s = cfg.settings(IncastLine.parse(row.line))
    senders = cfg.servers(row.senders)
    pc = PointCaptures(pf, plan, cfg.client, senders, s.rto_min_ms / 1000.0)
    rounds = pf.rounds().rounds
    with_stall = [r for r in rounds if any(r.t_start <= st["t"] <= r.t_end for st in pc.stalls)]
    pool = with_stall or rounds
    pick: RoundRecord = sorted(pool, key=lambda r: r.duration_s)[len(pool) // 2]
    t0, t1 = pick.t_start, pick.t_end
    lo, hi = t0 - 0.002, t1 + 0.005
    client_ip = pc.client_ip
    cl = pc.client
    out_senders = []
    for k, h in enumerate(senders):
        hip = str_to_ip(plan.host(h).ip)
        pk = pc.senders[h]
        sel = np.flatnonzero((pk.src == hip) & (pk.dst == client_ip) & (pk.plen > 0))
        rsel = np.flatnonzero((cl.src == hip) & (cl.dst == client_ip) & (cl.plen > 0))
        arrived: dict[tuple[int, int, int], int] = {}
        for i in rsel.tolist():
            key = (int(cl.sport[i]), int(cl.seq[i]), int(cl.plen[i]))
            arrived[key] = arrived.get(key, 0) + 1
        seen: dict[tuple[int, int, int], int] = {}
        high: dict[int, int] = {}
        base: dict[int, int] = {}
        packets = []
        for i in sel.tolist():
            sport, seq, plen = int(pk.sport[i]), int(pk.seq[i]), int(pk.plen[i])
            key = (sport, seq, plen)
            copy = seen.get(key, 0)
            seen[key] = copy + 1
            lost = copy >= arrived.get(key, 0)
            top = high.get(sport)
            rel = (seq - top) % 2**32 if top is not None else 0
            rtx = top is not None and rel >= 2**31  # below the highest sequence sent so far
            end = (seq + plen) % 2**32
            if top is None or ((end - top) % 2**32) < 2**31:
                high[sport] = end
            t = pk.ts_ns[i] / 1e9
            if lo <= t <= hi:
                b = base.setdefault(sport, seq)
                packets.append([round((t - t0) * 1000, 3), (seq - b) % 2**32, plen, int(rtx), int(lost)])
        stalls = [
            {
                "t_ms": round((st["t"] - t0) * 1000, 3),
                "idle_ms": round(st["idle_s"] * 1000, 3),
                "kind": st["kind"],
                "backoff": st["backoff"],
            }
            for st in pc.stalls
            if st["host"] == h and lo <= st["t"] <= hi
        ]
        out_senders.append(
            {
                "host": h,
                "index": k + 1,
                "asked_ms": round(pick.asked_s[k] * 1000, 3),
                "done_ms": round(pick.done_s[k] * 1000, 3),
                "packets": packets,
                "stalls": stalls,
            }
        )
    arr = pc.arrivals_s()
    arr = arr[(arr >= lo) & (arr <= hi)]
    gaps = [
        [round((a - t0) * 1000, 3), round((b - t0) * 1000, 3)]
        for a, b in idle_spans(np.concatenate([[t0], arr, [t1]]))
    ]
    port = cfg.client_port(plan)
    queue = [
        [round((q.t - t0) * 1000, 3), q.backlog_packets]
        for q in pf.queue_samples()
        if q.port == port and lo <= q.t <= hi
    ]
    return {
        "line": row.line,
        "senders": row.senders,
        "round": pick.round,
        "duration_ms": round(pick.duration_s * 1000, 3),
        "rto_min_ms": s.rto_min_ms,
        "buffer_pkts": s.buffer_pkts,
        "sru_bytes": cfg.sru_bytes,
        "link_mbit": plan.host(cfg.client).rate_mbit,
        "rounds_with_stall": len(with_stall),
        "rounds": len(rounds),
        "sender_packets": out_senders,
        "arrivals_ms": [round((a - t0) * 1000, 3) for a in arr.tolist()],
        "idle_gaps_ms": gaps,
        "queue": queue,
    }


# -- the goals of the issue -----------------------------------------------------------------------------
def goals(rows: list[IncastRow], cfg: IncastConfig) -> list[dict[str, Any]]:
    """The sweep's goals, each with the value measured and whether it was met (None: not measured)."""

    def frac(line: str, n: int) -> float | None:
        r = next((r for r in rows if r.line == line and r.senders == n), None)
        return r.goodput_frac if r else None

    base = cfg.curves[0].name if cfg.curves else "base"
    top = cfg.max_senders
    one = frac(base, 1)
    low = frac(base, top)
    rto = cfg.settings(cfg.curves[0]).rto_min_ms if cfg.curves else 200.0
    out = [
        {
            "goal": f"{base}: goodput with 1 sender >= {GOALS['one_sender']:.0%} of the link",
            "value": one,
            "met": None if one is None else one >= GOALS["one_sender"],
        },
        {
            "goal": f"{base} (min RTO {rto:g} ms): goodput with {top} senders "
            f"<= {GOALS['collapse']:.0%} of the link",
            "value": low,
            "met": None if low is None else low <= GOALS["collapse"],
        },
    ]
    cure = next((c.name for c in cfg.curves if dict(c.options) == {"rto_min_ms": 1.0}), None)
    if cure:
        v = frac(cure, top)
        out.append(
            {
                "goal": f"{cure}: goodput with {top} senders >= {GOALS['cure']:.0%} of the link",
                "value": v,
                "met": None if v is None else v >= GOALS["cure"],
            }
        )
    collapsed = [r for r in rows if r.goodput_frac is not None and r.goodput_frac < 0.5]
    short = [
        f"{r.line} N={r.senders}: {r.explained_frac}"
        for r in collapsed
        if r.explained_frac is None or r.explained_frac < GOALS["explained"]
    ]
    worst = min((r.explained_frac for r in collapsed if r.explained_frac is not None), default=None)
    out.append(
        {
            "goal": f"timeouts x minimum RTO explain >= {GOALS['explained']:.0%} of the lost goodput "
            f"wherever goodput < 50 % of the link ({len(collapsed)} points)",
            "value": worst,
            "met": not short if collapsed else None,
            "short": short,
        }
    )
    bad = [f"{r.line} N={r.senders}" for r in rows if r.verdict != "trustworthy"]
    out.append(
        {
            "goal": "fidelity verdict trustworthy at every point",
            "value": f"{len(rows) - len(bad)}/{len(rows)}",
            "met": not bad,
            "short": bad,
        }
    )
    return out


# -- the sweep ------------------------------------------------------------------------------------------
def analyze_sweep(run_dir: Path | str) -> IncastResult:
    """incast.json and timeline.json of a sweep's run folder (written there); returns the result."""
    folder = IncastFolder(Path(run_dir))
    cfg = folder.incast_config()
    plan = folder.plan()
    doc = folder.config_doc() or {}
    rows = []
    for line in cfg.curves:
        lf = folder.line(line)
        for n in cfg.senders:
            rows.append(analyze_point(lf.point(n), cfg, plan, line, n))
    result = IncastResult(
        rows=rows,
        config=cfg.to_dict(),
        environment=doc.get("environment") or {},
        not_run=list(doc.get("not_run") or []),
        fidelity=run_verdict({f"{r.line} N={r.senders}": r.fidelity for r in rows}),
        goals=goals(rows, cfg),
        complete=all(r.state == "complete" for r in rows),
    )
    pick = pick_timeline(rows)
    if pick is not None:
        try:
            tl = timeline(folder.line(pick.line).point(pick.senders), cfg, plan, pick)
            write_json(folder.timeline_file, tl)
            result.timeline = {
                "line": tl["line"],
                "senders": tl["senders"],
                "round": tl["round"],
                "file": folder.timeline_file.name,
            }
        except (AnalysisError, KeyError, IndexError) as exc:
            result.timeline = {"error": f"{type(exc).__name__}: {exc}"}
    write_json(folder.incast_file, result.to_dict())
    return result
