"""The arithmetic of `make bench`'s collective sweep, without a network: rows, the α–β fit, the table.

Times: ring and gloo run their timed iterations in turn, each after a barrier; an iteration's time is
the moment the last rank finished it minus the moment the last rank started it (all ranks share the
machine's clock). The PS rounds run back to back: an iteration is the last rank's end minus the one
before. `time_s` is their mean, `min_time_s` the smallest; ring against gloo is judged pair by pair.

Bandwidths as nccl-tests computes them: algbw = S / t, busbw = algbw * the collective's factor
(the one that makes an optimal algorithm's busbw equal to the link rate): 2 (N - 1) / N for an
all-reduce, (N - 1) / N for all-gather, reduce-scatter and all-to-all, 1 for broadcast. S is
nccl-tests' size: one worker's tensor (all-reduce, broadcast), the gathered output (all-gather), the
input before scattering (reduce-scatter), one rank's send buffer (all-to-all). The PS rows get the
all-reduce's factor, so each is "the all-reduce bandwidth it delivered". busbw_over_link divides by
the configured host link rate; a TCP payload over full 1514-byte frames reaches at most
1448/1514 = 0.956 of it.

The α–β model: t = α * steps + β * link_bytes, where steps are the algorithm's sequential
exchanges and link_bytes the wire bytes its busiest link carries in the textbook model:
ring (our ring and gloo's all_reduce): 2 (N - 1) steps of S / N, link_bytes 2 (N - 1) S / N;
PS (K shards on hosts of their own): 2 steps (push, pull), link_bytes 2 N S / K (push-then-pull);
PS with K shards colocated on the workers: link_bytes 2 (N - 1) S / K; all-gather (gloo's, a ring),
reduce-scatter (our ring's half) and all-to-all (gloo's, one message to each peer): N - 1 steps,
(N - 1) S / N; broadcast (gloo's binomial tree, gloo/broadcast.cc): ceil(log2 N) rounds, the
root's link carrying S in each, so busbw / link is at most 1 / ceil(log2 N). gloo posts a rank's
sends all at once, so they share its link and the next rank forwards later: with fair shares the
last of 7 has S after 5 S / B, not 3, and the broadcast's β * B reads above 1 for that reason.
β * B = 1 means the link ran at its configured rate; a PS whose pushes overlap other workers'
pulls (full duplex) shows β * B below 1, down to (N + 1) / (2 N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analysis.bounds import WIRE_PER_PAYLOAD
from report.console import Col, Table, goal_text

MIB = 2**20
ALL_REDUCES = ("ring", "gloo")  # our ring all-reduce, gloo's all_reduce
# The other collectives and what runs them (bench/sweep_worker.py): gloo's own where it has one;
# gloo's reduce_scatter is an all-reduce and a slice (twice the traffic), so ours is measured.
OTHERS = {
    "all-gather": "gloo all_gather_single (a ring)",
    "reduce-scatter": "our ring's reduce-scatter (workloads.ring)",
    "all-to-all": "gloo all_to_all_single",
    "broadcast": "gloo broadcast (a binomial tree) from rank 0",
}
COLLECTIVES = ALL_REDUCES + tuple(OTHERS)  # what the sweep workers run (the PS has its rounds)
IMPLEMENTATIONS = {"ring": "our pipelined ring (workloads.ring)", "gloo": "gloo all_reduce", **OTHERS}


@dataclass(frozen=True)
class Algo:
    """How one collective moves a tensor of S bytes among N workers (for the α–β model)."""

    kind: str  # ring | gloo | ps | all-gather | reduce-scatter | all-to-all | broadcast
    shards: int = 1
    colocated: bool = False

    def steps(self, n: int) -> int:
        """Sequential exchanges of one operation."""
        if self.kind in ALL_REDUCES:
            return 2 * (n - 1)
        if self.kind == "broadcast":
            return tree_rounds(n)
        return n - 1 if self.kind in OTHERS else 2

    def link_bytes(self, n: int, size: float) -> float:
        """Wire bytes the busiest link carries in one operation (textbook model)."""
        wire = size * WIRE_PER_PAYLOAD
        if self.kind in ALL_REDUCES:
            return 2 * (n - 1) * wire / n
        if self.kind == "broadcast":
            return tree_rounds(n) * wire
        if self.kind in OTHERS:
            return (n - 1) * wire / n
        if self.colocated:
            return 2 * (n - 1) * wire / self.shards
        return 2 * n * wire / self.shards

    def bus_factor(self, n: int) -> float:
        """nccl-tests' busbw / algbw: 2 (N-1)/N for an all-reduce (the PS rows too), (N-1)/N for
        all-gather, reduce-scatter and all-to-all, 1 for broadcast."""
        if self.kind == "broadcast":
            return 1.0
        if self.kind in OTHERS:
            return (n - 1) / n
        return 2 * (n - 1) / n


def tree_rounds(n: int) -> int:
    """Rounds of a binomial-tree broadcast among n ranks: ceil(log2 n) (gloo's log2ceil)."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def algo_of(name: str) -> Algo:
    """`ring`, `gloo`, `all-gather`..., `ps`, `ps:shards=4`, `ps:shards=7:placement=colocated`."""
    kind, *opts = name.split(":")
    kw = dict(o.split("=", 1) for o in opts)
    if kind in COLLECTIVES:
        return Algo(kind)
    return Algo("ps", int(kw.get("shards", 1)), kw.get("placement") == "colocated")


def iteration_times(records: list[dict[str, Any]]) -> list[float]:
    """Every timed iteration's time from every rank's record of one (collective, size): with each
    iteration's start (`t_starts`, after its barrier), the last rank's end minus the last rank's
    start; without (back to back, the PS rounds), the last rank's end minus the one before (the
    first: minus the latest rank's start)."""
    if not records:
        raise ValueError("no records")
    n_iters = min(len(r["t_end"]) for r in records)
    if n_iters < 1:
        raise ValueError("no timed iterations")
    ends = [max(r["t_end"][k] for r in records) for k in range(n_iters)]
    if all("t_starts" in r for r in records):
        return [ends[k] - max(r["t_starts"][k] for r in records) for k in range(n_iters)]
    start = max(r["t_start"] for r in records)
    return [ends[0] - start] + [ends[k] - ends[k - 1] for k in range(1, n_iters)]


def measure(records: list[dict[str, Any]]) -> dict[str, Any]:
    """time_s (mean), min_time_s, iters and every iteration's time (`times_s`) of one (collective, size)."""
    times = iteration_times(records)
    return {
        "time_s": sum(times) / len(times),
        "min_time_s": min(times),
        "iters": len(times),
        "times_s": times,
    }


def paired(ring_times: list[float], gloo_times: list[float]) -> dict[str, Any]:
    """Ring against gloo at one size, iteration by iteration (they ran in turn): the median of the
    paired time ratios, their range, and a verdict: faster (every pair), slower (every pair), or tied
    (pairs on both sides of 1: the difference is within what the machine's pace varies)."""
    ratios = sorted(r / g for r, g in zip(ring_times, gloo_times, strict=False) if g > 0)
    if not ratios:
        raise ValueError("no pairs")
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    verdict = "faster" if ratios[-1] < 1 else "slower" if ratios[0] > 1 else "tied"
    return {
        "ring_over_gloo": round(median, 4),
        "ring_over_gloo_lo": round(ratios[0], 4),
        "ring_over_gloo_hi": round(ratios[-1], 4),
        "ring_vs_gloo": verdict,
        "pairs": len(ratios),
    }


def bandwidths(
    size: float, n: int, t: float, link_mbit: float, bus_factor: float | None = None
) -> dict[str, float]:
    """algbw, busbw (Mbit/s of payload) and busbw / link for one operation of `size` bytes in `t` s;
    `bus_factor` is the collective's (Algo.bus_factor), by default an all-reduce's 2 (N - 1) / N."""
    algbw = size / t * 8 / 1e6
    busbw = algbw * (2 * (n - 1) / n if bus_factor is None else bus_factor)
    return {"algbw_mbit": algbw, "busbw_mbit": busbw, "busbw_over_link": busbw / link_mbit}


def ring_bound_s(n: int, size: float, link_mbit: float) -> float:
    """2 (N - 1) S / (N B), wire bytes: the bound of any all-reduce (and of our ring)."""
    return Algo("ring").link_bytes(n, size) * 8 / (link_mbit * 1e6)


def push_then_pull_s(algo: Algo, n: int, size: float, link_mbit: float) -> float:
    """A PS step with no overlap of pushes and pulls (the textbook PS): link_bytes / B."""
    return algo.link_bytes(n, size) * 8 / (link_mbit * 1e6)


def fit(points: list[tuple[float, float, float]]) -> dict[str, float]:
    """Least squares t = α x + β y over (x = steps, y = link bytes, t = seconds), relative errors
    (weights 1 / t²) so the small sizes pin α and the large ones β; α and β kept >= 0."""
    pts = [(x, y, t) for x, y, t in points if t > 0]
    if len(pts) < 2:
        raise ValueError("the α–β fit needs at least two sizes")
    w = [1 / t**2 for _, _, t in pts]
    sxx = sum(wi * x * x for wi, (x, _, _) in zip(w, pts, strict=True))
    syy = sum(wi * y * y for wi, (_, y, _) in zip(w, pts, strict=True))
    sxy = sum(wi * x * y for wi, (x, y, _) in zip(w, pts, strict=True))
    sxt = sum(wi * x * t for wi, (x, _, t) in zip(w, pts, strict=True))
    syt = sum(wi * y * t for wi, (_, y, t) in zip(w, pts, strict=True))
    det = sxx * syy - sxy * sxy
    alpha = (sxt * syy - syt * sxy) / det if det else -1.0
    beta = (syt * sxx - sxt * sxy) / det if det else -1.0
    if alpha < 0 or beta < 0:  # the better of the two one-parameter fits
        only_beta = (0.0, syt / syy)
        only_alpha = (sxt / sxx, 0.0)

        def err(ab: tuple[float, float]) -> float:
            return sum(wi * (t - ab[0] * x - ab[1] * y) ** 2 for wi, (x, y, t) in zip(w, pts, strict=True))

        alpha, beta = min((only_beta, only_alpha), key=err)
    resid = [abs(alpha * x + beta * y - t) / t for x, y, t in pts]
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "max_rel_residual": max(resid)}


def collective_fit(rows: list[dict[str, Any]], name: str, n: int, link_mbit: float) -> dict[str, Any]:
    """The α–β fit of one collective's rows, with α per exchange and β against 1 / B."""
    algo = algo_of(name)
    mine = [r for r in rows if r["collective"] == name]
    f = fit([(algo.steps(n), algo.link_bytes(n, r["size_bytes"]), r["time_s"]) for r in mine])
    rate = link_mbit * 1e6 / 8
    return {
        "collective": name,
        "implementation": IMPLEMENTATIONS.get(name, "our parameter server (workloads.ps)"),
        "steps": algo.steps(n),
        "sizes": len(mine),
        "alpha_s": round(f["alpha_s"], 6),
        "beta_s_per_byte": f["beta_s_per_byte"],
        "beta_over_link": round(f["beta_s_per_byte"] * rate, 4),
        "link_efficiency": round(1 / (f["beta_s_per_byte"] * rate), 4) if f["beta_s_per_byte"] else None,
        "max_rel_residual": round(f["max_rel_residual"], 4),
    }


def predict_s(fit_row: dict[str, Any], n: int, size: float) -> float:
    """The α–β model's time for one operation of `size` bytes."""
    algo = algo_of(fit_row["collective"])
    return fit_row["alpha_s"] * algo.steps(n) + fit_row["beta_s_per_byte"] * algo.link_bytes(n, size)


def build_rows(
    measured: dict[tuple[str, int], dict[str, float]], n: int, link_mbit: float, ps_bound: dict[str, Any]
) -> list[dict[str, Any]]:
    """One row per (collective, size): times, bandwidths; PS rows also their bound and ratios.

    `ps_bound`: collective name -> function(size) -> bound_s (analysis.bounds for that variant).
    Ratios are filled in by `add_ratios` once the fits exist.
    """
    rows = []
    # by nominal size first: the collectives that cut the tensor in N parts ran a few bytes less
    for (name, size), m in sorted(measured.items(), key=lambda kv: (nominal(kv[0][1]), order(kv[0][0]))):
        row: dict[str, Any] = {
            "collective": name,
            "size_bytes": size,
            "iters": m["iters"],
            "time_s": round(m["time_s"], 5),
            "min_time_s": round(m["min_time_s"], 5),
            "times_s": [round(t, 5) for t in m.get("times_s", [])],
        }
        factor = algo_of(name).bus_factor(n)
        row.update({k: round(v, 4) for k, v in bandwidths(size, n, m["time_s"], link_mbit, factor).items()})
        if algo_of(name).kind == "ps":
            row["bound_s"] = round(ps_bound[name](size), 5)
            row["ps_over_bound"] = round(m["time_s"] / ps_bound[name](size), 4)
        rows.append(row)
    return rows


def order(name: str) -> int:
    """Table order: ring, gloo, the other collectives, then the PS variants."""
    if name in COLLECTIVES:
        return COLLECTIVES.index(name)
    return len(COLLECTIVES) + (0 if name == "ps" else 1)


def add_ratios(rows: list[dict[str, Any]], fits: dict[str, dict[str, Any]], n: int, link_mbit: float) -> None:
    """PS rows: ps/ring measured, in theory (push-then-pull over the ring's bound), at their full-
    duplex bounds, and as the α–β model predicts; ratio_error = |measured - theory| / theory.
    Ring rows: ring against gloo at their size (`paired`, or the means' ratio without iteration times)."""
    ring = {r["size_bytes"]: r for r in rows if r["collective"] == "ring"}
    gloo = {r["size_bytes"]: r for r in rows if r["collective"] == "gloo"}
    for r in rows:
        size = r["size_bytes"]
        if r["collective"] == "ring" and size in gloo:
            if r.get("times_s") and gloo[size].get("times_s"):
                r.update(paired(r["times_s"], gloo[size]["times_s"]))
            else:
                r["ring_over_gloo"] = round(r["time_s"] / gloo[size]["time_s"], 4)
        algo = algo_of(r["collective"])
        if algo.kind != "ps" or size not in ring:
            continue
        measured = r["time_s"] / ring[size]["time_s"]
        theory = push_then_pull_s(algo, n, size, link_mbit) / ring_bound_s(n, size, link_mbit)
        r["ps_over_ring"] = round(measured, 4)
        r["ps_over_ring_theory"] = round(theory, 4)
        r["ps_over_ring_bound"] = round(r["bound_s"] / ring_bound_s(n, size, link_mbit), 4)
        if r["collective"] in fits and "ring" in fits:
            r["ps_over_ring_model"] = round(
                predict_s(fits[r["collective"]], n, size) / predict_s(fits["ring"], n, size), 4
            )
        r["ratio_error"] = round(abs(measured - theory) / theory, 4)


def iterations(est_s: float, target_s: float = 8.0, lo: int = 3, hi: int = 20) -> int:
    """Timed iterations for one measurement expected to take `est_s` each: about `target_s` in all."""
    if est_s <= 0:
        return hi
    return max(lo, min(hi, math.ceil(target_s / est_s)))


def nominal(size: float) -> int:
    """The power of two a size stands for: 65572 and 65548 -> 65536."""
    return 2 ** round(math.log2(size)) if size > 0 else 0


def size_label(size: float) -> str:
    """65572 -> '64 KiB', 33554472 -> '32 MiB': the nominal power of two (exact bytes are in the JSON)."""
    bytes_ = nominal(size)
    return f"{bytes_ // MIB} MiB" if bytes_ >= MIB else f"{bytes_ // 1024} KiB"


def table(
    rows: list[dict[str, Any]], n: int, fidelity_said: str = "", largest: dict[str, Any] | None = None
) -> str:
    """The nccl-tests style table: one line per collective and size; the number of workers, what the
    emulator could give the sweep (fidelity()'s text) and the ring's goal in the footer."""
    cols = [
        Col("size", "", lambda r: size_label(r["size_bytes"])),
        Col("count", "floats", lambda r: r["size_bytes"] // 4, "{:d}"),
        Col("collective", "", "collective", align="<"),
        Col("time", "s", "time_s", "{:.3f}"),
        Col("min", "s", "min_time_s", "{:.3f}"),
        Col("algbw", "Mb/s", "algbw_mbit", "{:.2f}"),
        Col("busbw", "Mb/s", "busbw_mbit", "{:.2f}"),
        Col("bus/link", "share", "busbw_over_link", "{:.0%}"),
        Col("ring/gloo", "ratio", "ring_over_gloo", "{:.2f}"),
        Col("vs gloo", "", "ring_vs_gloo", align="<"),
        Col("bound", "s", "bound_s", "{:.3f}"),
        Col("ps/ring", "ratio", "ps_over_ring", "{:.2f}"),
        Col("theory", "ratio", "ps_over_ring_theory", "{:.2f}"),
        Col("model", "ratio", "ps_over_ring_model", "{:.2f}"),
    ]
    footer = [f"N = {n} workers", f"fidelity: {fidelity_said or 'no CPU samples, no probes'}"]
    ring = (largest or {}).get("ring")
    if ring:
        goal = (
            f"ring busbw at {size_label(ring['size_bytes'])} >= "
            f"{ring['goal_busbw_over_link']:.0%} of the link"
        )
        footer.append(f"goal {goal_text(goal, ring['goal_met'], ring['busbw_over_link'])}")
    return Table(cols, rows, footer=footer).render()


def fit_table(fits: list[dict[str, Any]]) -> str:
    """One line per collective: α per exchange, β against 1/B, the worst residual."""
    cols = [
        Col("collective", "", "collective", align="<"),
        Col("steps", "", "steps", "{:d}"),
        Col("alpha", "ms", lambda f: f["alpha_s"] * 1e3, "{:.2f}"),
        Col("beta*B", "", "beta_over_link", "{:.3f}"),
        Col("link eff", "share", lambda f: f["link_efficiency"] or None, "{:.0%}"),
        Col("max resid", "share", "max_rel_residual", "{:.1%}"),
    ]
    return Table(cols, fits).render()


def alpha_breakdown(
    probes: dict[str, Any], ring_fit: dict[str, Any], n: int, counters: dict[str, int], cores: int = 2
) -> dict[str, Any]:
    """Where one ring exchange's fixed cost goes, from the probes (medians, one way).

    The parts add up to the per-exchange time of a tiny ring all-reduce on the fabric: a message
    through the host's TCP stack and Python, gloo's cost on top, the switch path, our ring's own
    bookkeeping, N processes sharing the cores, and what is left when all of that runs together.
    """
    ow, gl, tiny = probes["tcp_one_way"], probes["gloo_one_way"], probes["tiny_allreduce"]
    l0, l1, l3 = (ow[k]["median_s"] for k in ("0", "1", "3"))
    g0 = gl["0"]["median_s"]
    fab = tiny[f"fabric_{n}"]["ring_per_exchange_s"]
    loop_n = tiny[f"loopback_{n}"]["ring_per_exchange_s"]
    loop_2 = tiny["loopback_2"]["ring_per_exchange_s"]
    parts = {
        "tcp_stack_and_python": (l0, "a 64-byte message through one host's TCP stack and Python (loopback)"),
        "gloo": (g0 - l0, "gloo's own cost per message on top (a send/recv pair over loopback)"),
        "switch_path": (
            l3 - l0,
            f"leaf, spine, leaf: 3 userspace-switch hops, shapers and veths "
            f"({(l3 - l1) / 2 * 1e3:.2f} ms a hop)",
        ),
        "ring_python": (
            loop_2 - g0,
            "our ring's bookkeeping per exchange (2 ranks on loopback, less a gloo message)",
        ),
        "cpu_sharing": (loop_n - loop_2, f"{n} ranks instead of 2 on {cores} cores (loopback)"),
        "together": (
            fab - loop_n - (l3 - l0),
            "the rest on the fabric: each step waits for the slowest of "
            f"{n} neighbours, and the switch shares the CPU",
        ),
    }
    chunk = probes["chunk"]
    b2b, idle = chunk["back_to_back"]["median_s"], chunk["after_idle"]["median_s"]
    out_segs = counters.get("TcpOutSegs", 0)
    tcp = {
        "nagle": {"value": "off", "what": "gloo sets TCP_NODELAY on every pair (gloo/transport/tcp/pair.cc)"},
        "slow_start_after_idle_s": {
            "value": round(idle - b2b, 6),
            "what": f"a {chunk['bytes']} B chunk after 1 s idle minus back to back "
            "(a ring's steps are never idle that long)",
        },
        "chunk_over_wire": {
            "value": round(b2b / chunk["wire_s"], 3),
            "what": "that chunk back to back over its wire time at the link rate",
        },
        "delayed_acks": {
            "value": counters.get("TcpExtDelayedACKs", 0),
            "what": "delayed ACKs the hosts sent in the sweep (with Nagle off they cost only "
            "a sender waiting for one)",
        },
        "retransmitted_share": {
            "value": round(counters.get("TcpRetransSegs", 0) / out_segs, 5) if out_segs else 0,
            "what": "segments retransmitted / segments sent in the sweep",
        },
        "timeouts": {
            "value": counters.get("TcpExtTCPTimeouts", 0),
            "what": "retransmission timeouts in the sweep (each >= 200 ms idle)",
        },
        "loss_probes": {
            "value": counters.get("TcpExtTCPLossProbes", 0),
            "what": "tail-loss probes in the sweep",
        },
        "switch_queue_drops": {
            "value": counters.get("switch_queue_drops", 0),
            "what": "packets the switch ports' queues dropped in the sweep",
        },
    }
    return {
        "fit_alpha_s": ring_fit["alpha_s"],
        "tiny_exchange_s": fab,
        "parts": {k: {"s": round(v, 6), "what": w} for k, (v, w) in parts.items()},
        "tcp": tcp,
    }


SWITCH_SATURATED = 0.9  # of one core: the software switch's one forwarding thread has no more to give


def fidelity(
    switch_shares: list[float], ceiling_over_link: float | None, ring_big: dict[str, Any] | None
) -> dict[str, Any]:
    """What the emulator could give the sweep, said before any figure: how often the software switch
    (ovs-vswitchd, whose one thread forwards every packet) ran at SWITCH_SATURATED of a core or more,
    and what plain TCP streams in the ring's pattern got from the fabric (the probe), so a ring's
    busbw can be read against what this fabric delivers at all, not only against the configured rate."""
    out: dict[str, Any] = {
        "switch_saturated_share": None,
        "switch_cpu_mean": None,
        "tcp_ceiling_over_link": ceiling_over_link,
        "ring_busbw_over_ceiling": None,
    }
    if switch_shares:
        out["switch_saturated_share"] = round(
            sum(x >= SWITCH_SATURATED for x in switch_shares) / len(switch_shares), 3
        )
        out["switch_cpu_mean"] = round(sum(switch_shares) / len(switch_shares), 3)
    if ceiling_over_link and ring_big:
        out["ring_busbw_over_ceiling"] = round(ring_big["busbw_over_link"] / ceiling_over_link, 4)
    said = []
    if out["switch_saturated_share"] is not None:
        said.append(
            f"the software switch ran at >= {SWITCH_SATURATED:.0%} of a core in "
            f"{out['switch_saturated_share']:.0%} of the sweep's seconds "
            f"(mean {out['switch_cpu_mean']:.0%})"
        )
    if ceiling_over_link:
        said.append(
            f"plain TCP streams in the ring's pattern got {ceiling_over_link:.0%} of the link "
            "(1448/1514 = 96 % is the most a TCP payload can)"
        )
    if out["ring_busbw_over_ceiling"] is not None:
        said.append(f"the ring's busbw at its largest size is {out['ring_busbw_over_ceiling']:.0%} of that")
    out["said"] = "; ".join(said)
    return out


def verdict(ring_row: dict[str, Any]) -> str:
    """A ring row's verdict against gloo: paired when the iterations ran in turn, else by the means."""
    return ring_row.get("ring_vs_gloo") or ("slower" if ring_row["ring_over_gloo"] > 1 else "faster")


def largest_summary(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The figures the goals are judged by: the ring at its largest size, ring vs gloo at every size,
    each PS variant's ps/ring at its largest size against theory, each other collective's busbw / link
    at its largest size."""
    out: dict[str, Any] = {}
    for name in OTHERS:
        mine = [r for r in rows if r["collective"] == name]
        if mine:
            big = max(mine, key=lambda r: r["size_bytes"])
            out[name] = {"size_bytes": big["size_bytes"], "busbw_over_link": big["busbw_over_link"]}
    ring = [r for r in rows if r["collective"] == "ring"]
    if ring:
        big = max(ring, key=lambda r: r["size_bytes"])
        over = [r for r in ring if "ring_over_gloo" in r]
        out["ring"] = {
            "size_bytes": big["size_bytes"],
            "busbw_over_link": big["busbw_over_link"],
            "goal_busbw_over_link": 0.9,
            "goal_met": big["busbw_over_link"] >= 0.9,
        }
        if over:
            out["ring_vs_gloo"] = {
                "max_ring_over_gloo": max(r["ring_over_gloo"] for r in over),
                "sizes_ring_slower": [r["size_bytes"] for r in over if verdict(r) == "slower"],
                "sizes_tied": [r["size_bytes"] for r in over if r.get("ring_vs_gloo") == "tied"],
            }
    for name in sorted({r["collective"] for r in rows if "ps_over_ring" in r}):
        big = max(
            (r for r in rows if r["collective"] == name and "ps_over_ring" in r),
            key=lambda r: r["size_bytes"],
        )
        out[name] = {
            k: big[k]
            for k in (
                "size_bytes",
                "ps_over_ring",
                "ps_over_ring_theory",
                "ps_over_ring_bound",
                "ps_over_ring_model",
                "ratio_error",
            )
            if k in big
        }
        out[name]["within_15pct_of_theory"] = big["ratio_error"] <= 0.15
    return out
