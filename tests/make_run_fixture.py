"""Write a small synthetic run folder (docs/DESIGN.md "Run folder") for the report tests.

`python tests/make_run_fixture.py` regenerates tests/data/run-small/ (ps and ring, 3 workers,
5 steps on a 2-spine 2-leaf fabric). The numbers are made up but consistent with each other:
bytes_by_link is what the synthetic flows put on each port, the PS port's drops in summary.json
equal the controller's and the qdisc's counters, retransmission counts equal the timeline's sum.
Everything comes from a seeded RNG, so the output is byte-for-byte reproducible.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "run-small"
SPINES = 2
LEAVES = 2
HOSTS_PER_LEAF = 2
RATE_MBIT = 50.0
BUFFER_PACKETS = 100
PS_HOST = 1
POLL_S = 0.5
QDEPTH_S = 0.01
MSS = 1448


@dataclass
class Flow:
    """Bytes moved from src to dst host, spread evenly over [ws, we]."""

    src: int
    dst: int
    nbytes: int
    ws: float
    we: float


def host_leaf_port(h: int) -> tuple[int, int]:
    """Leaf number and leaf port of host hN (hosts numbered leaf by leaf, ports after the uplinks)."""
    return (h - 1) // HOSTS_PER_LEAF + 1, SPINES + 1 + (h - 1) % HOSTS_PER_LEAF


def path_ports(src: int, dst: int) -> tuple[list[str], list[str]]:
    """Switch ports a flow leaves (tx) and enters (rx) by, with a fixed ECMP choice of spine."""
    ls, ps = host_leaf_port(src)
    ld, pd = host_leaf_port(dst)
    if ls == ld:
        return [f"lf{ld}-eth{pd}"], [f"lf{ls}-eth{ps}"]
    s = 1 + (src + dst) % SPINES
    return ([f"lf{ls}-eth{s}", f"sp{s}-eth{ld}", f"lf{ld}-eth{pd}"],
            [f"lf{ls}-eth{ps}", f"sp{s}-eth{ls}", f"lf{ld}-eth{s}"])


def all_ports() -> list[str]:
    """Every switch port of the fabric, leaves then spines."""
    ports = [f"lf{leaf}-eth{p}" for leaf in range(1, LEAVES + 1)
             for p in range(1, SPINES + HOSTS_PER_LEAF + 1)]
    return ports + [f"sp{s}-eth{leaf}" for s in range(1, SPINES + 1) for leaf in range(1, LEAVES + 1)]


def frac(t: float, ws: float, we: float) -> float:
    """Share of a window [ws, we] elapsed at t."""
    if we <= ws:
        return 1.0 if t >= we else 0.0
    return min(1.0, max(0.0, (t - ws) / (we - ws)))


def topology() -> dict[str, Any]:
    """The /api/topology document of the fixture fabric."""
    switches = [{"name": f"sp{s}", "dpid": 0x100 + s, "role": "spine", "connected": True}
                for s in range(1, SPINES + 1)]
    switches += [{"name": f"lf{leaf}", "dpid": 0x200 + leaf, "role": "leaf", "connected": True}
                 for leaf in range(1, LEAVES + 1)]
    hosts, links = [], []
    for h in range(1, LEAVES * HOSTS_PER_LEAF + 1):
        leaf, port = host_leaf_port(h)
        hosts.append({"name": f"h{h}", "ip": f"10.0.0.{h}", "mac": f"00:00:00:00:00:{h:02x}",
                      "leaf": f"lf{leaf}", "port": port, "ps": h == PS_HOST})
        links.append({"a": f"lf{leaf}", "a_port": port, "b": f"h{h}", "b_port": 0, "kind": "host",
                      "rate_mbit": RATE_MBIT})
    for leaf in range(1, LEAVES + 1):
        for s in range(1, SPINES + 1):
            links.append({"a": f"lf{leaf}", "a_port": s, "b": f"sp{s}", "b_port": leaf, "kind": "uplink",
                          "rate_mbit": RATE_MBIT})
    leaf, port = host_leaf_port(PS_HOST)
    return {"switches": switches, "hosts": hosts, "links": links, "ps_host": f"h{PS_HOST}",
            "ps_port": {"switch": f"lf{leaf}", "port": port}}


def r6(x: float) -> float:
    """Round for compact, stable JSON."""
    return round(x, 6)


FAULT_DOWN_S, FAULT_UP_S = 0.8, 1.6  # link-down fault, seconds after the strategy's first step
GAP_S = (1.2, 3.0)  # controller samples missing over this span (seconds after the first step)


def gen_strategy(rng: random.Random, name: str, t_begin: float, cfg: dict[str, Any],
                 fault: bool = False) -> dict[str, Any]:
    """Synthesize one strategy's logs and counters; returns files to write and its summary entry.

    fault: a link-down of lf1-eth1 (faults.jsonl + the controller's port_down/reroute events)
    and a hole in the controller's samples (GAP_S), as a controller restart leaves."""
    n, steps, grad_bytes = cfg["workers"], cfg["steps"], int(cfg["grad_mb"] * 1e6)
    ps_family = name in ("ps", "async", "ssp", "backup")
    sync = name in ("ps", "ring", "allreduce")
    hosts = [PS_HOST + 1 + r for r in range(n)] if ps_family else [1 + r for r in range(n)]
    slow_rank = n - 1 if cfg.get("slow_every") else None
    comm_base = {"ps": 0.70, "ring": 0.35, "allreduce": 0.35, "async": 0.45, "ssp": 0.50,
                 "backup": 0.45}[name]
    decay = 0.35 if sync else 0.30
    workers: dict[int, list[dict[str, Any]]] = {r: [] for r in range(n)}
    flows: list[Flow] = []
    drop_windows: list[tuple[float, float, int]] = []  # PS-port drop bursts (start, end, drops)
    ps_events: list[dict[str, Any]] = []
    clock = {r: t_begin + 0.002 * r for r in range(n)}
    version = 0
    for k in range(steps):
        if sync:
            start = max(clock.values())
            clock = {r: start + 0.002 * r for r in range(n)}
        for r in range(n):
            slow = slow_rank == r and k % int(cfg["slow_every"]) == 0
            compute = (0.20 + rng.uniform(0.0, 0.02)) * (float(cfg.get("slow_factor", 1)) if slow else 1)
            comm = comm_base + rng.uniform(0.0, 0.15 if name == "ps" else 0.05)
            wait = rng.uniform(0.05, 0.15) if name == "ssp" and r != slow_rank else 0.0
            t_start = clock[r]
            t_end = t_start + compute + comm + wait
            ws = t_start + compute
            if ps_family:
                flows.append(Flow(hosts[r], PS_HOST, grad_bytes, ws, ws + comm * 0.6))
                flows.append(Flow(PS_HOST, hosts[r], grad_bytes, ws + comm * 0.6, t_end))
                sent = recv = grad_bytes
            else:
                nxt = hosts[(r + 1) % n]
                chunk = int(2 * (n - 1) / n * grad_bytes)
                flows.append(Flow(hosts[r], nxt, chunk, ws, t_end))
                sent = recv = chunk
            loss = 2.3 * math.exp(-decay * k) + 0.05 + rng.uniform(0.0, 0.02)
            workers[r].append({"rank": r, "strategy": name, "step": k, "t_start": r6(t_start),
                               "t_end": r6(t_end), "compute_s": r6(compute), "comm_s": r6(comm),
                               "wait_s": r6(wait), "bytes_sent": sent, "bytes_recv": recv,
                               "loss": r6(loss), "samples": cfg["batch"]})
            if ps_family:
                staleness = 0 if sync or name == "backup" else min(rng.randint(0, 3), cfg.get("staleness", 9))
                version += 1
                ps_events.append({"event": "update", "t": r6(ws + comm * 0.6), "rank": r, "step": k,
                                  "staleness": staleness, "version": version})
            clock[r] = t_end + 0.005
        if name == "ps":
            ws = min(w[k]["t_start"] + w[k]["compute_s"] for w in workers.values())
            drop_windows.append((ws, ws + 0.2, rng.randint(700, 900)))
    t_finish = max(w[-1]["t_end"] for w in workers.values())

    # Per-port counters: cumulative bytes from the flows, drops from the bursts.
    tx_of: dict[str, list[Flow]] = {p: [] for p in all_ports()}
    rx_of: dict[str, list[Flow]] = {p: [] for p in all_ports()}
    for f in flows:
        txp, rxp = path_ports(f.src, f.dst)
        for p in txp:
            tx_of[p].append(f)
        for p in rxp:
            rx_of[p].append(f)
    ps_port = "lf{}-eth{}".format(*host_leaf_port(PS_HOST))
    spine_hot = f"sp1-eth{host_leaf_port(PS_HOST)[0]}"
    extra = [(a, b, d // 50) for a, b, d in drop_windows]  # a few drops on a spine port too

    def cum_bytes(flist: list[Flow], t: float) -> int:
        return int(sum(f.nbytes * frac(t, f.ws, f.we) for f in flist))

    def cum_drops(port: str, t: float) -> int:
        wins = drop_windows if port == ps_port else extra if port == spine_hot else []
        return int(sum(d * frac(t, a, b) for a, b, d in wins))

    timeseries: list[str] = []
    polls = [t_begin - POLL_S + i * POLL_S for i in range(int((t_finish - t_begin) / POLL_S) + 4)]
    prev: dict[str, tuple[int, int]] = {}
    if fault:
        polls = [t for t in polls if not t_begin + GAP_S[0] < t < t_begin + GAP_S[1]]
    for t in polls:
        for p in all_ports():
            sw, port = p.split("-eth")
            txb, rxb, drops = cum_bytes(tx_of[p], t), cum_bytes(rx_of[p], t), cum_drops(p, t)
            ptx, pdrops = prev.get(p, (txb, drops))
            prev[p] = (txb, drops)
            bps = (txb - ptx) * 8 / POLL_S
            peer = _peer(p)
            timeseries.append(json.dumps({
                "t": r6(t), "kind": "port", "switch": sw, "port": int(port), "name": p, "peer": peer,
                "tx_bytes": txb, "rx_bytes": rxb, "tx_packets": txb // 1514, "rx_packets": rxb // 1514,
                "tx_dropped": 0, "rx_dropped": 0, "tx_bps": r6(bps), "rx_bps": 0.0,
                "util": r6(bps / (RATE_MBIT * 1e6))}))
            timeseries.append(json.dumps({
                "t": r6(t), "kind": "queue", "switch": sw, "port": int(port), "name": p, "peer": peer,
                "queue_id": 0, "tx_bytes": txb, "tx_packets": txb // 1514, "drops": drops,
                "tx_bps": r6(bps), "drops_per_s": r6((drops - pdrops) / POLL_S)}))
    if fault:
        down, up = t_begin + FAULT_DOWN_S, t_begin + FAULT_UP_S
        for t, ev, state in ((down, "port_down", "down"), (up, "port_up", "up")):
            for sw, port in (("lf1", 1), ("sp1", 1)):  # both ends of the link report it
                timeseries.append(json.dumps({"t": r6(t + 0.003), "kind": "event", "event": ev,
                                              "switch": sw, "port": port}))
            timeseries.append(json.dumps({"t": r6(t + 0.01), "kind": "event", "event": "reroute",
                                          "link": "lf1-sp1", "state": state,
                                          "dead_links": ["lf1-sp1"] if state == "down" else []}))
    bytes_by_link = {p: cum_bytes(tx_of[p], t_finish + 1) for p in all_ports()}
    drops_by_port = {p: cum_drops(p, t_finish + 1) for p in all_ports()}

    # The PS port's qdisc every 10 ms.
    qdepth: list[str] = []
    n_q = int((t_finish - t_begin + 0.2) / QDEPTH_S)
    comm_windows = [(w["t_start"] + w["compute_s"], w["t_end"]) for ws in workers.values() for w in ws]
    for i in range(n_q):
        t = t_begin - 0.1 + i * QDEPTH_S
        if any(a <= t <= b for a, b, _ in drop_windows):
            pk = BUFFER_PACKETS - rng.randint(0, 4)
        elif name == "ps" and any(a <= t <= b for a, b in comm_windows):
            pk = rng.randint(20, 80)
        elif any(a <= t <= b for a, b in comm_windows) and PS_HOST in hosts:
            pk = rng.randint(0, 6)
        else:
            pk = 0
        qdepth.append(json.dumps({"t": r6(t), "backlog_bytes": pk * 1514, "backlog_packets": pk,
                                  "drops": cum_drops(ps_port, t)}))

    files: dict[str, Any] = {}
    retx_total = timeouts = 0
    if name == "ps":
        bin_s = 0.1
        nb = int((t_finish - t_begin) / bin_s) + 1
        counts = [0] * nb
        for a, b, d in drop_windows:
            for j in range(int((a - t_begin) / bin_s), min(nb, int((b - t_begin) / bin_s) + 2)):
                counts[j] += d // 12 + rng.randint(0, 5)
        retx_total = sum(counts)
        timeouts = retx_total // 12
        files["retransmits_timeline.json"] = {"bin_s": bin_s, "t0": r6(t_begin), "counts": counts}
        gbytes = [int(0.97 * (cum_bytes(tx_of[ps_port], t_begin + (j + 1) * bin_s)
                              - cum_bytes(tx_of[ps_port], t_begin + j * bin_s))) for j in range(nb)]
        files["goodput_timeline.json"] = {"bin_s": bin_s, "t0": r6(t_begin), "bytes": gbytes}

    iters = [max(w[k]["t_end"] - w[k]["t_start"] for w in workers.values()) for k in range(steps)]
    comms = [max(w[k]["comm_s"] for w in workers.values()) for k in range(steps)]
    total = sum(bytes_by_link.values())
    wall = t_finish - t_begin
    summary = {
        "workers": n, "steps": steps, "grad_bytes": grad_bytes,
        "iter_time_s": r6(statistics.median(iters)), "comm_time_s": r6(statistics.median(comms)),
        "final_loss": r6(statistics.fmean(w[-1]["loss"] for w in workers.values())),
        "queue_drops_total": sum(drops_by_port.values()), "ps_port_drops": drops_by_port[ps_port],
        "max_port_drops": max(drops_by_port.values()),
        "tcp_retransmits_kernel": retx_total + (3 if retx_total else 0),
        "bytes_by_link": bytes_by_link, "max_link_share": r6(max(bytes_by_link.values()) / total),
        "tcp_retransmits_pcap": retx_total, "tcp_fast_retransmits": retx_total - timeouts,
        "tcp_timeout_retransmits": timeouts, "dup_acks": 3 * (retx_total - timeouts),
        "fabric_drops_pcap": drops_by_port[ps_port],
        "throughput": r6(n * steps * cfg["batch"] / wall),
    }
    for r, recs in workers.items():
        lines = [json.dumps(x) for x in recs] + [json.dumps({"event": "done", "rank": r, "steps": steps})]
        files[f"worker-{r}.jsonl"] = "\n".join(lines) + "\n"
    if fault:
        files["faults.jsonl"] = "".join(json.dumps(x) + "\n" for x in (
            {"t": r6(t_begin + FAULT_DOWN_S), "event": "fired", "kind": "link-down", "target": "lf1-eth1",
             "state": "down"},
            {"t": r6(t_begin + FAULT_UP_S), "event": "restored", "kind": "link-down", "target": "lf1-eth1",
             "state": "up"}))
    if name == "ssp":  # the PS releases a worker into its next step: gap = its lead over the slowest
        for e in [e for e in ps_events if e["event"] == "update"]:
            gap = min(int(cfg.get("staleness", 2)), (e["step"] + e["rank"]) % 3)
            ps_events.append({"event": "release", "t": e["t"], "worker": e["rank"],
                              "next_step": e["step"] + 1, "slowest": 0, "gap": gap})
    if name == "backup" and slow_rank is not None:  # b = 1: the straggler's update is dropped each step
        for e in ps_events:
            if e["event"] == "update":
                e["applied"] = e["rank"] != slow_rank
        for k in range(steps):
            t_step = r6(max(w[k]["t_end"] for w in workers.values()))
            ps_events.append({"event": "step", "step": k, "t": t_step, "discarded": [slow_rank],
                              "applied": [r for r in range(n) if r != slow_rank]})
    if cfg.get("stragglers"):
        summary["utilisation_by_worker"] = {
            str(r): round(sum(x["compute_s"] for x in recs) / (recs[-1]["t_end"] - recs[0]["t_start"]), 4)
            for r, recs in workers.items()}
        if name == "backup" and slow_rank is not None:
            summary["updates_discarded"] = steps
            summary["discarded_per_step"] = [1] * steps
    if ps_family:
        ps_events.sort(key=lambda e: e["t"])
        files["ps.jsonl"] = "\n".join([json.dumps(e) for e in ps_events]
                                      + [json.dumps({"event": "done", "t": r6(t_finish)})]) + "\n"
    files["timeseries.jsonl"] = "\n".join(timeseries) + "\n"
    files["queue_depth.jsonl"] = "\n".join(qdepth) + "\n"
    files["capture.json"] = {"points": [{
        "name": "ps-port", "iface": ps_port, "file": "pcap/ps-port.pcap",
        "packets_captured": bytes_by_link[ps_port] // 1514, "packets_dropped_kernel": 0, "complete": True}]}
    per_host = max(1, len(hosts))
    files["hosts.json"] = {f"h{h}": {"tcp_retransmits": summary["tcp_retransmits_kernel"] // per_host,
                                     "tx_bytes": sum(f.nbytes for f in flows if f.src == h)}
                           for h in sorted(set(hosts) | ({PS_HOST} if ps_family else set()))}
    files["status.json"] = {"state": "complete", "error": None}
    return {"files": files, "summary": summary, "t_finish": t_finish}


def _peer(port: str) -> str:
    """What is at the other end of a switch port."""
    sw, p = port.split("-eth")
    idx, num = sw[:2], int(sw[2:])
    if idx == "sp":
        return f"lf{p}"
    if int(p) <= SPINES:
        return f"sp{p}"
    return f"h{(num - 1) * HOSTS_PER_LEAF + int(p) - SPINES}"


def make_run(dest: Path, strategies: tuple[str, ...] = ("ps", "ring"), workers: int = 3, steps: int = 5,
             seed: int = 7, fault_in: str | None = None, **extra_config: Any) -> Path:
    """Write a synthetic run folder at dest (replacing it) and return dest.

    fault_in: the strategy that gets a link-down fault and a gap in the controller samples
    (config gains `interval`). With `stragglers` in extra_config, config gains `worker_hosts`
    and the summary `utilisation_by_worker` (and backup's discards); the straggler is the last rank."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    print(f"make_run({dest.name}): seed={seed}")  # every random number below comes from this seed
    rng = random.Random(seed)
    config: dict[str, Any] = {
        "fabric": {"spines": SPINES, "leaves": LEAVES, "hosts_per_leaf": HOSTS_PER_LEAF,
                   "rate_mbit": RATE_MBIT},
        "buffer_packets": BUFFER_PACKETS, "workers": workers, "strategies": list(strategies),
        "steps": steps, "grad_mb": 2.0, "batch": 32, "lr": 0.05, "seed": seed, "ps_host": f"h{PS_HOST}",
    }
    config.update(extra_config)
    if fault_in:
        config["interval"] = POLL_S
    if config.get("stragglers"):
        config["worker_hosts"] = [f"h{PS_HOST + 1 + r}" for r in range(workers)]
    summaries: dict[str, Any] = {}
    t = 1_700_000_000.0
    for name in strategies:
        out = gen_strategy(rng, name, t, config, fault=name == fault_in)
        sdir = dest / name
        sdir.mkdir()
        for fname, content in out["files"].items():
            text = content if isinstance(content, str) else json.dumps(content, indent=1) + "\n"
            (sdir / fname).write_text(text, encoding="utf-8")
        summaries[name] = out["summary"]
        t = out["t_finish"] + 2.0
    (dest / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    (dest / "topology.json").write_text(json.dumps(topology(), indent=1) + "\n", encoding="utf-8")
    summary = {"config": config, "strategies": summaries, "capture": {"complete": True}, "complete": True}
    (dest / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return dest


if __name__ == "__main__":
    out = make_run(Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE_DIR)
    print(out)
