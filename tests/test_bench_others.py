"""`make bench`'s all-gather, reduce-scatter, all-to-all and broadcast rows: nccl-tests' bus-bandwidth
factors, the α–β model of each worked by hand, the sweep's plan, and (over loopback) that the worker
runs the operation each row is named after."""

from __future__ import annotations

import argparse
import multiprocessing
import socket

import pytest

from bench import sweep
from bench.collectives import DEFAULT_COLLECTIVES, DEFAULT_SIZES_KIB, grad_bytes, plan_sweep

WIRE = 1514 / 1448  # wire bytes per payload byte of full frames
RATE = 20e6 / 8  # 20 Mbit/s in bytes per second


def row_of(name: str, size: int, t: float, n: int = 7) -> dict:
    rows = sweep.build_rows({(name, size): {"time_s": t, "min_time_s": t, "iters": 3}}, n, 20.0, {})
    return rows[0]


@pytest.mark.parametrize(
    ("name", "busbw"),
    [
        ("ring", 8.0 * 12 / 7),  # all-reduce: 2 (N-1)/N
        ("gloo", 8.0 * 12 / 7),
        ("all-gather", 8.0 * 6 / 7),  # (N-1)/N
        ("reduce-scatter", 8.0 * 6 / 7),
        ("all-to-all", 8.0 * 6 / 7),
        ("broadcast", 8.0),  # 1
    ],
)
def test_busbw_factors_are_nccl_tests(name: str, busbw: float) -> None:
    """1 MB in 1 s among 7 workers: algbw 8 Mbit/s, busbw by nccl-tests' factor, over a 20 Mbit/s link."""
    r = row_of(name, 1_000_000, 1.0)
    assert r["algbw_mbit"] == pytest.approx(8.0, abs=1e-4)
    assert r["busbw_mbit"] == pytest.approx(busbw, abs=1e-4)
    assert r["busbw_over_link"] == pytest.approx(busbw / 20, abs=1e-4)


@pytest.mark.parametrize(
    ("name", "n", "steps", "payload_on_link"),
    [
        ("all-gather", 7, 6, 6 / 7),  # a ring: N-1 steps of S/N
        ("reduce-scatter", 7, 6, 6 / 7),
        ("all-to-all", 7, 6, 6 / 7),  # S/N to each of N-1 peers out of every host
        # gloo's binomial tree: ceil(log2 N) rounds, the root sends S in each (to 1, 2, 4 among 7)
        ("broadcast", 7, 3, 3.0),
        ("broadcast", 8, 3, 3.0),
        ("broadcast", 9, 4, 4.0),
        ("broadcast", 2, 1, 1.0),
        ("ring", 7, 12, 12 / 7),
    ],
)
def test_alpha_beta_model_by_hand(name: str, n: int, steps: int, payload_on_link: float) -> None:
    algo = sweep.algo_of(name)
    assert algo.steps(n) == steps
    assert algo.link_bytes(n, 1_000_000) == pytest.approx(payload_on_link * 1_000_000 * WIRE)


def test_a_collective_at_its_bound_has_busbw_at_the_link_rate_less_the_headers() -> None:
    """An all-gather moving (N-1)/N S over the link at its rate: busbw / link = 1448/1514. gloo's
    tree broadcast at its model's time gets a third of that among 7 (the root sends S 3 times)."""
    size, n = 2 * 2**20, 7
    t_ag = 6 / 7 * size * WIRE / RATE
    assert row_of("all-gather", size, t_ag)["busbw_over_link"] == pytest.approx(1448 / 1514, abs=1e-4)
    t_bc = 3 * size * WIRE / RATE
    assert row_of("broadcast", size, t_bc, n)["busbw_over_link"] == pytest.approx(1448 / 1514 / 3, abs=1e-4)


@pytest.mark.parametrize(
    ("name", "steps", "share"), [("all-gather", 6, 6 / 7), ("all-to-all", 6, 6 / 7), ("broadcast", 3, 3.0)]
)
def test_the_fit_recovers_alpha_and_the_link_rate(name: str, steps: int, share: float) -> None:
    """Times made by hand, t = 3 ms x steps + (share x S x 1514/1448) / 2.5 MB/s: the fit gives α = 3 ms
    a step and β x B = 1 (the link at its configured rate), within what the rows' rounding of t to
    10 µs leaves."""
    rows = [
        row_of(name, s, 0.003 * steps + share * s * WIRE / RATE)
        for s in (grad_bytes(64), grad_bytes(512), grad_bytes(2048))
    ]
    f = sweep.collective_fit(rows, name, 7, 20.0)
    assert f["steps"] == steps and f["sizes"] == 3
    assert f["alpha_s"] == pytest.approx(0.003, abs=3e-5)
    assert f["beta_over_link"] == pytest.approx(1.0, abs=1e-3)
    assert f["max_rel_residual"] < 1e-3
    assert f["implementation"].startswith("gloo")


def test_table_order_and_nominal_sizes() -> None:
    """The others ran a few bytes less (a multiple of N floats) yet sit beside the all-reduces of
    their size, in the order ring, gloo, all-gather, reduce-scatter, all-to-all, broadcast, then PS."""
    n, size = 7, grad_bytes(64)  # 65572 bytes, 16393 floats; 16387 = 7 x 2341
    measured = {
        (name, size if name in ("ring", "gloo", "broadcast") else 16387 * 4): {
            "time_s": 1.0,
            "min_time_s": 1.0,
            "iters": 3,
        }
        for name in ("broadcast", "all-to-all", "ring", "reduce-scatter", "gloo", "all-gather")
    }
    rows = sweep.build_rows(measured, n, 20.0, {})
    assert [r["collective"] for r in rows] == list(sweep.COLLECTIVES)
    assert sweep.order("ps") < sweep.order("ps:shards=7:placement=colocated")
    assert sweep.order("broadcast") < sweep.order("ps")
    assert {sweep.size_label(r["size_bytes"]) for r in rows} == {"64 KiB"}
    largest = sweep.largest_summary(rows, n)
    assert largest["broadcast"]["busbw_over_link"] == rows[-1]["busbw_over_link"]


def test_op_floats_cut_in_equal_parts() -> None:
    from bench.sweep_worker import op_floats

    assert op_floats("all-gather", 65572, 7) == 16387
    assert op_floats("all-to-all", 65572, 7) == 16387
    assert op_floats("reduce-scatter", 65572, 7) == 16387
    assert op_floats("broadcast", 65572, 7) == 16393
    assert op_floats("ring", 65572, 7) == 16393


def args_of(**kw) -> argparse.Namespace:
    base = {
        "sizes_kib": DEFAULT_SIZES_KIB,
        "collectives": DEFAULT_COLLECTIVES,
        "others_kib": "64,512,2048",
        "others_iters": 3,
        "ps_max_kib": 2048,
        "sharded_max_kib": 8192,
        "target_s": 8.0,
        "host_mbit": 20.0,
    }
    return argparse.Namespace(**(base | kw))


def test_the_others_leave_the_all_reduce_rows_as_they_were() -> None:
    """Same sizes, warm-ups and iteration counts with and without the other collectives; those run at
    three sizes, three timed iterations at most, and the PS rounds are unchanged."""
    sizes, warm, iters, coll, rounds = plan_sweep(args_of(), 7)
    before = plan_sweep(args_of(collectives="ring,gloo,ps,ps:shards=7:placement=colocated"), 7)
    assert (sizes, warm, iters) == tuple(before[:3])
    assert rounds == before[4]
    others = {p.name: p for p in coll if p.name in sweep.OTHERS}
    assert set(others) == {"all-gather", "reduce-scatter", "all-to-all", "broadcast"}
    want = (grad_bytes(64), grad_bytes(512), grad_bytes(2048))
    assert all(p.sizes == want and p.max_iters == 3 for p in others.values())
    assert all(p.sizes is None for p in coll if p.name in ("ring", "gloo"))


# -- the operations themselves, over loopback ------------------------------------------------------
def _rank(rank: int, world: int, port: int, out: dict) -> None:
    import os

    import torch
    import torch.distributed as dist

    from bench.sweep_worker import Buffers, CollectivePlan, _run_collective

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    got = {}
    for kind in sweep.OTHERS:
        b = Buffers(6, world)
        b.t.copy_(torch.arange(6.0) + 10 * rank)
        b.part.copy_(b.t[rank * 2 : rank * 2 + 2])
        _run_collective(CollectivePlan(kind, kind), b, rank, world)
        got[kind] = (b.t.tolist(), b.out.tolist())
    out[rank] = got
    dist.destroy_process_group()


def test_the_worker_runs_the_named_operations() -> None:
    """Three ranks, rank r holding [0..5] + 10 r: the results worked by hand."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as m:
        out = m.dict()
        procs = [ctx.Process(target=_rank, args=(r, 3, port, out)) for r in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0, 0, 0]
        got = dict(out)
    for r in range(3):
        t = [float(k + 10 * r) for k in range(6)]
        # all-gather: rank k's part is its own elements 2k, 2k+1
        assert got[r]["all-gather"][1] == [0.0, 1.0, 12.0, 13.0, 24.0, 25.0]
        # reduce-scatter (in place): chunk r holds the sum of everyone's chunk r: 3 x element + 30
        assert got[r]["reduce-scatter"][0][2 * r : 2 * r + 2] == [3 * (2 * r) + 30.0, 3 * (2 * r + 1) + 30.0]
        # all-to-all: from rank k its chunk r
        assert got[r]["all-to-all"][1] == [v for k in range(3) for v in (2 * r + 10 * k, 2 * r + 1 + 10 * k)]
        # broadcast from rank 0
        assert got[r]["broadcast"][0] == [float(k) for k in range(6)]
        assert len(t) == 6


def test_the_all_reduces_run_every_size_before_the_others(tmp_path) -> None:
    """Over loopback, 3 ranks: ring and gloo at both sizes first, then the others at theirs (their
    losses would shrink the windows of the TCP connections the ring shares with them), each with
    its iteration cap and its tensor cut in 3 equal parts."""
    import json
    import subprocess
    import sys

    from bench.sweep_worker import CollectivePlan, SweepJob
    from tests.conftest import ROOT

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    small, big = 4 * 3000 + 4, 4 * 30000 + 8  # 3001 and 30002 floats: cut to 3000 and 30000
    plans = [CollectivePlan(c, c) for c in sweep.ALL_REDUCES]
    plans += [CollectivePlan(c, c, sizes=(big,), max_iters=2) for c in sweep.OTHERS]
    job = SweepJob(
        3, "127.0.0.1", port, ("lo",) * 3, (small, big), (1, 1), (4, 4), tuple(plans), out_dir=str(tmp_path)
    )
    (tmp_path / "job.json").write_text(job.to_json())
    argv = [sys.executable, "-m", "bench.sweep_worker", "--job", str(tmp_path / "job.json"), "--rank"]
    procs = [subprocess.Popen([*argv, str(r)], cwd=ROOT) for r in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    lines = [json.loads(ln) for ln in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert [(d["collective"], d["size_bytes"], len(d["t_end"])) for d in lines] == [
        ("ring", small, 4),
        ("gloo", small, 4),
        ("ring", big, 4),
        ("gloo", big, 4),
        ("all-gather", 120000, 2),
        ("reduce-scatter", 120000, 2),
        ("all-to-all", 120000, 2),
        ("broadcast", big, 2),
    ]
    last_all_reduce = max(t for d in lines[:4] for t in d["t_end"])
    assert all(t > last_all_reduce for d in lines[4:] for t in d["t_starts"])
