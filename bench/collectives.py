"""Benchmark (not a test): the collectives on the fabric, nccl-tests style, with an α–β model of it.

    python -m bench.collectives [--sizes-kib 64,128,...,32768] [--workers 7] [--host-mbit 20]
                                [--collectives ring,gloo,all-gather,reduce-scatter,all-to-all,broadcast,
                                               ps,ps:shards=7:placement=colocated]
                                [--others-kib 64,512,2048] [--others-iters 3]
                                [--ps-max-kib 2048] [--sharded-max-kib 8192] [--results results] [--out FILE]

One fabric session (the default `make compare` fabric unless told otherwise), in this order:
1. α probes: one small TCP message across 0, 1 and 3 switches; a gloo send/recv pair; a tiny ring
   all-reduce (7 floats) on the fabric, and among 7 and among 2 processes in one host over
   loopback (the Python and scheduling cost with 7 processes on 2 cores); a ring-neighbour-sized
   chunk back to back and after an idle second (slow start after idle); plain TCP streams in the
   ring's pattern (iperf3), the most a TCP flow got out of this emulated fabric at that moment.
2. The sweep (bench/sweep_worker.py in every worker host): for every size, our ring and gloo's
   all_reduce back to back (warm-up, then timed iterations, about 8 s a size), and at the few sizes
   of --others-kib the all-gather, reduce-scatter, all-to-all and broadcast (bench.sweep.OTHERS
   says whose; at most --others-iters timed iterations each, so they add well under a minute); then the
   PS rounds (workloads.ps started by the bench per size): the single PS and the sharded PS.
3. The table, the α–β fit per collective, α's breakdown, ps/ring against theory, all into
   bench.json of the bench's own run folder, results/<YYYYmmdd-HHMMSS>-bench/ (bench/sweep.py
   documents every figure): a new folder each run, so no run overwrites another's (--out FILE
   writes bench.json's document there as well).

The PS rounds stop at smaller sizes than the collectives (--ps-max-kib): a synchronous PS step
moves 2 N S through one link, so at 20 Mbit/s a 2 MiB PS step takes ~13 s and a 32 MiB one ~190 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from analysis.bounds import WIRE_PER_PAYLOAD, comm_bound_s
from bench import sweep
from bench.sweep_worker import CollectivePlan, PsRound, SweepJob
from capture.counters import read_host_counters
from capture.queue_depth import read_root_qdiscs
from runmodel.folder import RunFolder
from runmodel.records import write_json
from runmodel.strategy import StrategySpec
from topologies.processes import stop_processes

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SIZES_KIB = ",".join(str(64 * 2**k) for k in range(10))  # 64 KiB .. 32 MiB
DEFAULT_COLLECTIVES = ",".join((*sweep.COLLECTIVES, "ps", "ps:shards=7:placement=colocated"))
GLOO_PORT = 29500
PROBE_PORT = 29300
PROBE_GLOO_PORT = 29400
PS_PORT = 29600
IPERF_PORT = 5201
JOB_TIMEOUT_S = 300.0
BENCH_FILE = "bench.json"  # in the bench's run folder (bench_folder)
ANALYSIS_FILE = "bench_analysis.json"  # beside it, written by `make bench` (bench/__main__.py)
STARTUP_S = 120.0  # a process's torch import on a loaded 2-core machine, with margin
ALPHA_GUESS_S = 0.005  # per exchange, for planning the iterations only
EFFICIENCY_GUESS = 0.8


class BenchError(RuntimeError):
    """A benchmark process failed; the message names it."""


def say(msg: str) -> None:
    """One progress line on stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- planning ---------------------------------------------------------------------------------
def grad_bytes(kib: int) -> int:
    """The exact bytes of a nominal size: the model's gradient closest to it (the PS needs a model)."""
    from workloads.model import ModelSpec

    return ModelSpec.from_grad_mb(kib / 1024).grad_bytes


def estimate_s(name: str, n: int, size: int, link_mbit: float) -> float:
    """Planning guess of one operation's time (the bound, a guessed efficiency, a guessed α)."""
    algo = sweep.algo_of(name)
    wire = algo.link_bytes(n, size) * 8 / (link_mbit * 1e6)
    return wire / EFFICIENCY_GUESS + algo.steps(n) * ALPHA_GUESS_S


def ps_variant_bound(name: str, n: int, link_mbit: float) -> Any:
    """size -> the communication lower bound of one step of this PS variant (analysis.bounds)."""
    spec = StrategySpec.parse(name)
    return lambda size: comm_bound_s(spec, n, size, link_mbit)


# --- processes --------------------------------------------------------------------------------
class Procs:
    """Processes the bench started in Mininet hosts, each with its stderr file."""

    def __init__(self, sess: Any, folder: Path) -> None:
        self.sess = sess
        self.folder = folder
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.stopped: set[int] = set()  # pids the bench terminated itself (servers)

    def start(self, label: str, host: str, argv: list[str]) -> subprocess.Popen[bytes]:
        err = self.folder / f"{label}.stderr"
        with err.open("wb") as ferr:
            p = self.sess.fabric.host(host).popen(argv, stdout=subprocess.DEVNULL, stderr=ferr, cwd=str(REPO))
        self.running.append((label, p, err))
        return p

    def python(self, label: str, host: str, module: str, *args: str) -> subprocess.Popen[bytes]:
        return self.start(label, host, [sys.executable, "-u", "-m", module, *args])

    def terminate(self, procs: list[subprocess.Popen[bytes]]) -> None:
        """Stop servers the bench no longer needs (their exit is no failure)."""
        self.stopped |= {p.pid for p in procs}
        stop_processes(procs)

    def check(self, procs: list[subprocess.Popen[bytes]] | None = None) -> None:
        """Raise BenchError naming the first of `procs` (default: all) that exited non-zero."""
        for label, p, err in self.running:
            if (procs is None or p in procs) and p.pid not in self.stopped and p.poll() not in (None, 0):
                text = err.read_text(errors="replace").strip().splitlines()
                raise BenchError(f"{label} exited {p.returncode}: {text[-1] if text else 'no message'}")

    def wait(self, procs: list[subprocess.Popen[bytes]], timeout: float, what: str, tick: Any = None) -> None:
        """Wait for `procs` to exit (BenchError on a failure or after `timeout`)."""
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            self.check()
            if tick is not None:
                tick()
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: not finished after {timeout:.0f} s")
            time.sleep(0.5)
        self.check(procs)

    def stop_all(self) -> None:
        """Terminate whatever still runs (servers, or everything after a failure)."""
        stop_processes([p for _, p, _ in self.running])


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every JSON line the sweep ranks wrote."""
    out = []
    for f in sorted(folder.glob("rank-*.jsonl")):
        out += [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
    return out


def run_sweep(
    procs: Procs,
    hosts: list[str],
    job: SweepJob,
    folder: Path,
    timeout: float,
    ps_launch: Any = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Start one sweep rank per host, run the PS rounds when the collectives are done, collect."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(job.to_json())
    ranks = [
        procs.python(
            f"{folder.name}-rank-{r}",
            h,
            "bench.sweep_worker",
            "--job",
            str(folder / "job.json"),
            "--rank",
            str(r),
        )
        for r, h in enumerate(hosts)
    ]
    shown = 0
    rank0 = folder / "rank-0.jsonl"

    def tick() -> None:
        nonlocal shown
        if not progress or not rank0.exists():
            return
        lines = [json.loads(ln) for ln in rank0.read_text().splitlines() if ln.strip().endswith("}")]
        for d in lines[shown:]:
            n = len(d["t_end"])
            t = sweep.measure([d])["time_s"] if n else float("nan")
            say(
                f"{d['collective']:<26} {sweep.size_label(d['size_bytes']):>7}: {t:8.3f} s a step "
                f"({n} timed, rank 0)"
            )
        shown = len(lines)

    deadline = time.monotonic() + timeout
    n_coll = sum(p.runs_at(size) for p in job.collectives for size in job.sizes)
    if job.ps_rounds and ps_launch is not None:
        while shown < n_coll:  # the PS rounds start once every collective is measured
            procs.check()
            if all(p.poll() is not None for p in ranks):
                break
            tick()
            if time.monotonic() > deadline:
                raise BenchError(f"collective sweep: not finished after {timeout:.0f} s")
            time.sleep(0.5)
        for k, r in enumerate(job.ps_rounds):
            servers = ps_launch(k, r)
            procs.wait(servers, max(60.0, deadline - time.monotonic()), f"{r.name} {r.size_bytes} B", tick)
    procs.wait(ranks, max(60.0, deadline - time.monotonic()), "sweep", tick)
    tick()
    return read_records(folder)


# --- probes -----------------------------------------------------------------------------------
def _times(path: Path) -> list[float]:
    return json.loads(path.read_text())["times_s"]


def _summary(times: list[float], half: bool = False) -> dict[str, float]:
    """median and 90th percentile (halved: one-way from a round trip)."""
    k = 0.5 if half else 1.0
    ts = sorted(times)
    return {
        "median_s": round(statistics.median(ts) * k, 6),
        "p90_s": round(ts[int(0.9 * (len(ts) - 1))] * k, 6),
        "count": len(ts),
    }


def tcp_probe(
    procs: Procs,
    client: str,
    addr: str,
    out: Path,
    size: int = 64,
    reply: int = 64,
    count: int = 200,
    idle: float = 0.0,
) -> list[float]:
    p = procs.python(
        out.stem,
        client,
        "bench.probe_worker",
        "tcp-client",
        "--addr",
        addr,
        "--port",
        str(PROBE_PORT),
        "--size",
        str(size),
        "--reply",
        str(reply),
        "--count",
        str(count),
        "--idle",
        str(idle),
        "--out",
        str(out),
    )
    procs.wait([p], STARTUP_S + count * (idle + 1.0), out.stem)
    return _times(out)


def gloo_probe(
    procs: Procs, a: str, b: str, master: str, ifname: tuple[str, str], out: Path, port: int, count: int = 200
) -> list[float]:
    ps = [
        procs.python(
            f"{out.stem}-{r}",
            h,
            "bench.probe_worker",
            "gloo-pingpong",
            "--rank",
            str(r),
            "--master",
            master,
            "--port",
            str(port),
            "--ifname",
            ifname[r],
            "--count",
            str(count),
            *(["--out", str(out)] if r == 0 else []),
        )
        for r, h in enumerate((a, b))
    ]
    procs.wait(ps, STARTUP_S + count, out.stem)
    return _times(out)


def tiny_ring(
    procs: Procs, hosts: list[str], ifnames: list[str], master: str, folder: Path, port: int, iters: int = 60
) -> dict[str, float]:
    """Per-exchange time of our ring and gloo's all_reduce on a 1-float-per-rank tensor."""
    n = len(hosts)
    job = SweepJob(
        world=n,
        master_addr=master,
        master_port=port,
        ifnames=tuple(ifnames),
        sizes=(4 * n,),
        warmup=(5,),
        iters=(iters,),
        collectives=(CollectivePlan("ring", "ring"), CollectivePlan("gloo", "gloo")),
        out_dir=str(folder),
        timeout=120,
    )
    recs = run_sweep(procs, hosts, job, folder, STARTUP_S + 120, progress=False)
    out = {}
    for name in ("ring", "gloo"):
        m = sweep.measure([r for r in recs if r["collective"] == name])
        out[name + "_s"] = round(m["time_s"], 6)
        out[name + "_per_exchange_s"] = round(m["time_s"] / (2 * (n - 1)), 6)
    return out


def tcp_ceiling(
    procs: Procs, sess: Any, hosts: list[str], link_mbit: float, seconds: float = 8.0
) -> dict[str, Any]:
    """Plain TCP (iperf3) in the ring's pattern, every neighbour link at once: what the fabric gave."""
    plan = sess.plan
    servers = [procs.start(f"iperf3-server-{h}", h, ["iperf3", "-s", "-p", str(IPERF_PORT)]) for h in hosts]
    time.sleep(1.0)
    pairs = [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts)]
    clients = [
        (
            s,
            d,
            sess.fabric.host(s).popen(
                ["iperf3", "-c", plan.host(d).ip, "-p", str(IPERF_PORT), "-t", str(seconds), "-O", "1", "-J"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            ),
        )
        for s, d in pairs
    ]
    flows = []
    for s, d, c in clients:
        out, _ = c.communicate(timeout=seconds + 60)
        try:
            e = json.loads(out)["end"]
            mbit = e["sum_received"]["bits_per_second"] / 1e6
            retx = e["sum_sent"].get("retransmits")
        except (ValueError, KeyError, TypeError):
            mbit, retx = 0.0, None
        flows.append(
            {
                "src": s,
                "dst": d,
                "goodput_mbit": round(mbit, 3),
                "goodput_over_link": round(mbit / link_mbit, 4),
                "retransmits": retx,
            }
        )
    procs.terminate(servers)
    shares = [f["goodput_over_link"] for f in flows]
    return {
        "seconds": seconds,
        "flows": flows,
        "min_goodput_over_link": min(shares),
        "mean_goodput_over_link": round(statistics.mean(shares), 4),
        "note": "iperf3 goodput (payload) / configured rate; 1448/1514 = 0.956 is the most a full-frame "
        "TCP payload can be",
    }


def run_probes(procs: Procs, sess: Any, hosts: list[str], folder: Path, link_mbit: float) -> dict[str, Any]:
    """α's parts, measured directly (see the module docstring)."""
    plan = sess.plan
    folder.mkdir(parents=True, exist_ok=True)
    a, same, cross = hosts[0], sess.plan.spec.ps_host, hosts[1]  # h2; h1 on h2's leaf; h3 across a spine
    servers = [
        procs.python(f"probe-server-{h}", h, "bench.probe_worker", "tcp-server", "--port", str(PROBE_PORT))
        for h in (a, same, cross)
    ]
    time.sleep(1.0)
    out: dict[str, Any] = {
        "paths": {
            "0": f"{a} loopback",
            "1": f"{a} -> {same} (leaf)",
            "3": f"{a} -> {cross} (leaf, spine, leaf)",
        }
    }
    say("probe: a 64-byte message across 0, 1 and 3 switches (TCP, Nagle off)")
    one_way = {}
    for hops, dst in (("0", "127.0.0.1"), ("1", plan.host(same).ip), ("3", plan.host(cross).ip)):
        one_way[hops] = _summary(tcp_probe(procs, a, dst, folder / f"tcp-{hops}hops.json"), half=True)
    out["tcp_one_way"] = one_way
    say("probe: a gloo send/recv pair, in one host and across 3 switches")
    out["gloo_one_way"] = {
        "0": _summary(
            gloo_probe(procs, a, a, "127.0.0.1", ("lo", "lo"), folder / "gloo-0hops.json", PROBE_GLOO_PORT),
            half=True,
        ),
        "3": _summary(
            gloo_probe(
                procs,
                a,
                cross,
                plan.host(a).ip,
                (plan.host(a).nic, plan.host(cross).nic),
                folder / "gloo-3hops.json",
                PROBE_GLOO_PORT + 1,
            ),
            half=True,
        ),
    }
    n = len(hosts)
    chunk = grad_bytes(1024) // n  # one ring exchange of a 1 MiB all-reduce
    say(f"probe: a {chunk // 1024} KiB chunk across 3 switches, back to back and after 1 s idle")
    wire = chunk * WIRE_PER_PAYLOAD * 8 / (link_mbit * 1e6)
    b2b = _summary(
        tcp_probe(procs, a, plan.host(cross).ip, folder / "chunk-b2b.json", size=chunk, reply=1, count=10)
    )
    idle = _summary(
        tcp_probe(
            procs, a, plan.host(cross).ip, folder / "chunk-idle.json", size=chunk, reply=1, count=8, idle=1.0
        )
    )
    out["chunk"] = {"bytes": chunk, "wire_s": round(wire, 6), "back_to_back": b2b, "after_idle": idle}
    procs.terminate(servers)
    say(f"probe: a tiny all-reduce (1 float a rank): {n} ranks on the fabric, {n} and 2 in {a} over loopback")
    out["tiny_allreduce"] = {
        f"fabric_{n}": tiny_ring(
            procs,
            hosts,
            [plan.host(h).nic for h in hosts],
            plan.host(hosts[0]).ip,
            folder / "tiny-fabric",
            PROBE_GLOO_PORT + 2,
        ),
        f"loopback_{n}": tiny_ring(
            procs, [a] * n, ["lo"] * n, "127.0.0.1", folder / "tiny-loop", PROBE_GLOO_PORT + 3
        ),
        "loopback_2": tiny_ring(
            procs, [a] * 2, ["lo"] * 2, "127.0.0.1", folder / "tiny-loop2", PROBE_GLOO_PORT + 4
        ),
    }
    say("probe: plain TCP streams (iperf3) in the ring's pattern, 8 s")
    out["tcp_ceiling"] = tcp_ceiling(procs, sess, hosts, link_mbit)
    return out


# --- kernel and switch counters ---------------------------------------------------------------
def tcp_counters(sess: Any) -> dict[str, int]:
    """Sum over the hosts of the TCP counters that explain a slow exchange."""
    keys = (
        "TcpOutSegs",
        "TcpRetransSegs",
        "TcpExtTCPTimeouts",
        "TcpExtTCPLossProbes",
        "TcpExtDelayedACKs",
        "TcpExtTCPFastRetrans",
        "TcpExtTCPSackRecovery",
    )
    total = dict.fromkeys(keys, 0)
    for h in sess.plan.host_names:
        k = read_host_counters(h, sess.fabric.host(h).shell.pid).kernel
        for key in keys:
            total[key] += k.get(key, 0)
    return total


def queue_drops(sess: Any) -> int:
    """Drops summed over every switch port's root qdisc (the fabric's shallow buffers)."""
    return sum(s.drops for s in read_root_qdiscs(sess.plan.port_names()).values())


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


# --- main -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench.collectives", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes-kib", default=DEFAULT_SIZES_KIB, help="per-worker sizes, KiB (default 64..32768)"
    )
    ap.add_argument("--collectives", default=DEFAULT_COLLECTIVES, help=f"default {DEFAULT_COLLECTIVES}")
    ap.add_argument(
        "--others-kib",
        default="64,512,2048",
        help="sizes of the all-gather, reduce-scatter, all-to-all and broadcast rows, KiB (those "
        "among --sizes-kib; default 64,512,2048)",
    )
    ap.add_argument(
        "--others-iters", type=int, default=3, help="timed iterations of those at most (default 3)"
    )
    ap.add_argument("--ps-max-kib", type=int, default=2048, help="largest size of the single PS")
    ap.add_argument("--sharded-max-kib", type=int, default=8192, help="largest size of a sharded PS")
    ap.add_argument("--target-s", type=float, default=8.0, help="timed seconds per measurement, about")
    ap.add_argument("--workers", type=int, default=7)
    ap.add_argument("--host-mbit", type=float, default=20.0, help="host links and uplinks, Mbit/s")
    ap.add_argument("--buffer", type=int, default=20, help="switch port buffers, packets")
    ap.add_argument("--cc", default="cubic", help="TCP congestion control in every host (default cubic)")
    ap.add_argument("--rto-min-ms", type=float, default=None, help="minimum RTO in every host, ms")
    ap.add_argument("--no-probes", action="store_true", help="skip the α probes")
    ap.add_argument("--results", default="results", help="where the run folder goes (default: results/)")
    ap.add_argument("--out", default=None, help="also write bench.json's document to this file")
    return ap.parse_args(argv)


def bench_folder(results: Path) -> Path:
    """A new run folder for one bench, results/<YYYYmmdd-HHMMSS>-bench/ (-2, -3... when one of that
    second exists): every file of the bench goes in it, bench.json too, so no run overwrites another.
    results/latest is left to the experiments' run folders (the readers of `latest` expect one)."""
    return RunFolder.create(results, label="bench", link_latest=False).path


def plan_sweep(
    args: argparse.Namespace, n: int
) -> tuple[list[int], list[int], list[int], list[CollectivePlan], list[tuple[str, int, int, int]]]:
    """Sizes, warm-up and timed iterations of the collectives (counted from the all-reduces', so the
    other collectives leave those rows as they were); the collectives' plans, the others at the sizes
    of --others-kib only; the PS rounds (name, size, warm, iters)."""
    kibs = [int(x) for x in args.sizes_kib.split(",") if x.strip()]
    names = [c.strip() for c in args.collectives.split(",") if c.strip()]
    sizes = [grad_bytes(k) for k in kibs]
    others = {int(x) for x in args.others_kib.split(",") if x.strip()}
    other_sizes = tuple(s for k, s in zip(kibs, sizes, strict=True) if k in others)
    coll = [
        CollectivePlan(c, c)
        if c in sweep.ALL_REDUCES
        else CollectivePlan(c, c, sizes=other_sizes, max_iters=args.others_iters)
        for c in names
        if c in sweep.COLLECTIVES
    ]
    timing = [p.name for p in coll if p.name in sweep.ALL_REDUCES] or [p.name for p in coll]
    warm, iters = [], []
    for size in sizes:
        est = max(estimate_s(c, n, size, args.host_mbit) for c in timing) if timing else 1.0
        warm.append(1 if est < 4.0 else 0)  # a big size is warm from the one before it
        iters.append(sweep.iterations(est, args.target_s, 3, 20))
    rounds = []
    for name in names:
        if name in sweep.COLLECTIVES:
            continue
        cap = args.ps_max_kib if sweep.algo_of(name).shards == 1 else args.sharded_max_kib
        for k, size in zip(kibs, sizes, strict=True):
            if k <= cap:
                est = estimate_s(name, n, size, args.host_mbit)
                rounds.append((name, size, 1, sweep.iterations(est, args.target_s * 1.25, 3, 10)))
    return sizes, warm, iters, coll, rounds


def ps_hosts(name: str, cfg: Any) -> list[str]:
    """The hosts of a PS variant's shards (the run model's placement)."""
    return cfg.shard_hosts(StrategySpec.parse(name))


def main(argv: list[str] | None = None) -> int:
    """Probes, sweep, table, fit; bench.json in a new run folder (run_bench)."""
    return run_bench(argv)[0]


def run_bench(argv: list[str] | None = None) -> tuple[int, Path | None]:
    """Probes, sweep, table, fit; bench.json in a new run folder. The exit code and that folder
    (None when the parameters were refused before it was made)."""
    from incastlab.session import fabric_session, terminate_as_interrupt
    from runmodel.config import ControllerOptions, ExperimentConfig
    from runmodel.fabric import FabricSpec, build_plan
    from runmodel.job import JobSpec, RankJob, ShardJob
    from runmodel.params import ParamError
    from topologies.hosttcp import check_cc, check_rto_min

    args = parse_args(argv)
    terminate_as_interrupt()
    t_wall = time.monotonic()
    try:
        spec = FabricSpec(host_mbit=args.host_mbit, uplink_mbit=args.host_mbit, buffer_pkts=args.buffer)
        cfg = ExperimentConfig(fabric=spec, workers=args.workers, strategies=("ring",))
        cfg.validate()
        check_cc(args.cc)
        check_rto_min(args.rto_min_ms)
        if args.others_iters < 1:
            raise ParamError(f"--others-iters must be >= 1, got {args.others_iters}")
    except ParamError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2, None
    hosts = cfg.worker_hosts
    n = len(hosts)
    sizes, warm, iters, coll, rounds = plan_sweep(args, n)
    other_sizes = next((p.sizes for p in coll if p.sizes is not None), ())
    folder = bench_folder(Path(args.results))
    plan = build_plan(spec)
    say(
        f"{n} workers ({', '.join(hosts)}), {args.host_mbit:g} Mbit/s links, {args.buffer}-packet buffers; "
        f"{len(sizes)} sizes x {', '.join(p.name for p in coll if p.sizes is None)}, "
        f"{len(other_sizes)} sizes x {', '.join(p.name for p in coll if p.sizes is not None) or 'none'}, "
        f"{len(rounds)} PS rounds; run folder {folder}"
    )
    probes: dict[str, Any] = {}
    tcp = (args.cc, args.rto_min_ms)
    with fabric_session(plan, ControllerOptions(), folder, progress=say, tcp=tcp) as sess:
        procs = Procs(sess, folder)
        try:
            if not args.no_probes:
                probes = run_probes(procs, sess, hosts, folder / "probes", args.host_mbit)
            plans = tuple(coll)

            def ps_launch(k: int, r: PsRound) -> list[subprocess.Popen[bytes]]:
                shard_hosts = ps_hosts(r.name, cfg)
                rdir = folder / "sweep" / f"ps-round-{k}"
                rdir.mkdir(parents=True, exist_ok=True)
                port = PS_PORT + k
                job = JobSpec(
                    strategy="ps",
                    world=n,
                    steps=r.warmup + r.iters,
                    grad_mb=r.size_bytes / 2**20,
                    batch=1,
                    lr=0.01,
                    seed=0,
                    timeout=JOB_TIMEOUT_S,
                    compute_ms=0.0,
                    staleness=0,
                    backup=0,
                    master_addr=plan.host(shard_hosts[0]).ip,
                    master_port=port,
                    ranks=tuple(RankJob(i, h, plan.host(h).nic) for i, h in enumerate(hosts)),
                    shards=tuple(
                        ShardJob(i, h, plan.host(h).ip, port, str(rdir / f"ps-{i}.jsonl"))
                        for i, h in enumerate(shard_hosts)
                    ),
                )
                job.write(rdir / "job.json")
                return [
                    procs.python(
                        f"ps-round-{k}-shard-{i}",
                        h,
                        "workloads.ps",
                        "--job",
                        str(rdir / "job.json"),
                        "--shard",
                        str(i),
                    )
                    for i, h in enumerate(shard_hosts)
                ]

            ps_rounds = []
            for k, (name, size, w, it) in enumerate(rounds):
                from workloads.model import ModelSpec

                nparams = ModelSpec.from_grad_mb(size / 2**20).nparams
                servers = tuple((plan.host(h).ip, PS_PORT + k) for h in ps_hosts(name, cfg))
                ps_rounds.append(PsRound(name, size, nparams, servers, w, it))
            job = SweepJob(
                world=n,
                master_addr=plan.host(hosts[0]).ip,
                master_port=GLOO_PORT,
                ifnames=tuple(plan.host(h).nic for h in hosts),
                sizes=tuple(sizes),
                warmup=tuple(warm),
                iters=tuple(iters),
                collectives=plans,
                ps_rounds=tuple(ps_rounds),
                out_dir=str(folder / "sweep"),
                timeout=JOB_TIMEOUT_S,
            )
            say("sweep: starting the workers")
            from capture.cpu import CpuSampler

            cpu = CpuSampler(folder / "cpu.jsonl")
            c0, q0 = tcp_counters(sess), queue_drops(sess)
            t0 = time.time()
            cpu.start()
            try:
                records = run_sweep(procs, hosts, job, folder / "sweep", 3600.0, ps_launch)
            finally:
                cpu.stop()
            t1 = time.time()
            counters = {**delta(tcp_counters(sess), c0), "switch_queue_drops": queue_drops(sess) - q0}
        finally:
            procs.stop_all()
    doc = report(records, probes, counters, folder, args, spec, hosts, (t0, t1), cfg)
    doc["wall_time_s"] = round(time.monotonic() - t_wall, 1)
    out = folder / BENCH_FILE
    write_json(out, doc)
    if args.out:
        write_json(Path(args.out), doc)
    print(sweep.table(doc["collectives"], n, doc["fidelity"]["said"], doc.get("largest")))
    print()
    print("α–β fit: t = α · steps + β · link bytes (β·B = 1: the link at its configured rate)")
    print(sweep.fit_table(doc["fits"]))
    for f in doc["fits"]:
        print(f"  {f['collective']}: {f['implementation']}")
    print()
    print(breakdown_text(doc.get("alpha_breakdown")))
    print(f"written {out} (wall time {doc['wall_time_s']:.0f} s)")
    return 0, folder


def report(
    records: list[dict[str, Any]],
    probes: dict[str, Any],
    counters: dict[str, int],
    folder: Path,
    args: argparse.Namespace,
    spec: Any,
    hosts: list[str],
    window: tuple[float, float],
    cfg: Any,
) -> dict[str, Any]:
    """bench.json's document from the sweep's records and the probes."""
    from analysis.fidelity import cpu_figures, samples_within
    from runmodel.records import read_cpu_samples

    n = len(hosts)
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        grouped.setdefault((r["collective"], r["size_bytes"]), []).append(r)
    measured = {key: sweep.measure(recs) for key, recs in grouped.items()}
    names = sorted({k[0] for k in measured}, key=sweep.order)
    bounds = {
        name: ps_variant_bound(name, n, args.host_mbit) for name in names if sweep.algo_of(name).kind == "ps"
    }
    rows = sweep.build_rows(measured, n, args.host_mbit, bounds)
    fits = {
        name: sweep.collective_fit(rows, name, n, args.host_mbit)
        for name in names
        if len([r for r in rows if r["collective"] == name]) >= 2
    }
    sweep.add_ratios(rows, fits, n, args.host_mbit)
    samples = read_cpu_samples(folder / "cpu.jsonl")
    cpu = cpu_figures(samples, *window)
    if samples:
        cpu["cpu_busy_mean"] = round(statistics.mean(sum(c.cores) / len(c.cores) for c in samples), 3)
    doc: dict[str, Any] = {
        "schema": "bench-collectives/2",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "run": str(folder),
        "machine": {"cores": _cores(), "kernel": platform.release(), "load_avg_at_end": _loadavg()},
        "fabric": {
            "spines": spec.spines,
            "leaves": spec.leaves,
            "hosts_per_leaf": spec.hosts_per_leaf,
            "link_mbit": args.host_mbit,
            "buffer_pkts": spec.buffer_pkts,
            "cc": args.cc,
            "rto_min_ms": args.rto_min_ms if args.rto_min_ms is not None else 200.0,
            "workers": n,
            "worker_hosts": hosts,
            "ps_host": spec.ps_host,
        },
        "collectives": rows,
        "fits": list(fits.values()),
        "sweep": {"tcp_counters": counters, "cpu": cpu, "seconds": round(window[1] - window[0], 1)},
        "probes": probes,
    }
    if probes and "ring" in fits:
        doc["alpha_breakdown"] = sweep.alpha_breakdown(probes, fits["ring"], n, counters, _cores())
    doc["largest"] = sweep.largest_summary(rows, n)
    inside = [c.switch for c in samples_within(samples, *window) if c.switch is not None]
    ceiling = (probes.get("tcp_ceiling") or {}).get("mean_goodput_over_link")
    ring_rows = [r for r in rows if r["collective"] == "ring"]
    doc["fidelity"] = sweep.fidelity(
        inside, ceiling, max(ring_rows, key=lambda r: r["size_bytes"]) if ring_rows else None
    )
    return doc


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def breakdown_text(b: dict[str, Any] | None) -> str:
    """α's breakdown, one part a line."""
    if not b:
        return "α breakdown: no probes"
    lines = [
        f"α of one ring exchange: fit {b['fit_alpha_s'] * 1e3:.2f} ms, measured on a tiny all-reduce "
        f"{b['tiny_exchange_s'] * 1e3:.2f} ms; its parts:"
    ]
    for key, part in b["parts"].items():
        lines.append(f"  {key:<28}{part['s'] * 1e3:>8.2f} ms  {part['what']}")
    for key, part in b["tcp"].items():
        lines.append(f"  tcp {key:<24}{part['value']!s:>11}  {part['what']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
