"""The arithmetic of `make bench` (bench/sweep.py): nccl-tests' bandwidths, the α–β fit, the PS ratios."""

from __future__ import annotations

import pytest

from bench import sweep


def test_busbw_is_algbw_times_2_n_minus_1_over_n() -> None:
    bw = sweep.bandwidths(size=1e6, n=7, t=1.0, link_mbit=20.0)
    assert bw["algbw_mbit"] == pytest.approx(8.0)
    assert bw["busbw_mbit"] == pytest.approx(8.0 * 12 / 7)
    assert bw["busbw_over_link"] == pytest.approx(8.0 * 12 / 7 / 20)


def test_a_ring_at_its_bound_has_busbw_at_the_link_rate_less_the_headers() -> None:
    t = sweep.ring_bound_s(7, 32 * 2**20, 20.0)
    assert sweep.bandwidths(32 * 2**20, 7, t, 20.0)["busbw_over_link"] == pytest.approx(1448 / 1514, rel=0.01)


def test_fit_recovers_alpha_and_beta_of_exact_times() -> None:
    n, alpha, beta = 7, 0.004, 5e-7
    algo = sweep.algo_of("ring")
    points = [
        (algo.steps(n), algo.link_bytes(n, s), alpha * algo.steps(n) + beta * algo.link_bytes(n, s))
        for s in (65536 * 2**k for k in range(8))
    ]
    f = sweep.fit(points)
    assert f["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert f["beta_s_per_byte"] == pytest.approx(beta, rel=1e-6)
    assert f["max_rel_residual"] < 1e-9


def test_fit_never_returns_a_negative_alpha() -> None:
    # times that shrink faster than the bytes would need a negative α; the fit keeps β alone
    f = sweep.fit([(12, 1e5, 0.01), (12, 1e6, 0.2), (12, 1e7, 2.5)])
    assert f["alpha_s"] >= 0 and f["beta_s_per_byte"] > 0


def test_measure_takes_the_last_rank_per_iteration() -> None:
    recs = [{"t_start": 0.0, "t_end": [1.0, 2.0, 3.5]}, {"t_start": 0.2, "t_end": [1.2, 2.1, 3.0]}]
    m = sweep.measure(recs)
    assert m["iters"] == 3
    assert m["time_s"] == pytest.approx((3.5 - 0.2) / 3)
    assert m["min_time_s"] == pytest.approx(min(1.2 - 0.2, 2.1 - 1.2, 3.5 - 2.1))


def test_interleaved_iterations_are_timed_from_their_own_starts() -> None:
    recs = [
        {"t_start": 0.0, "t_starts": [0.0, 5.0], "t_end": [1.0, 6.5]},
        {"t_start": 0.1, "t_starts": [0.1, 5.2], "t_end": [1.3, 6.0]},
    ]
    m = sweep.measure(recs)
    assert m["times_s"] == pytest.approx([1.3 - 0.1, 6.5 - 5.2])


@pytest.mark.parametrize(
    ("ring", "gloo", "verdict"),
    [
        ([1.0, 1.0, 1.0], [1.1, 1.2, 1.05], "faster"),
        ([1.0, 1.3, 1.0], [1.1, 1.2, 1.05], "tied"),  # pairs on both sides of 1: within the noise
        ([1.2, 1.3, 1.1], [1.1, 1.2, 1.05], "slower"),
    ],
)
def test_ring_against_gloo_is_judged_pair_by_pair(ring, gloo, verdict) -> None:
    got = sweep.paired(ring, gloo)
    assert got["ring_vs_gloo"] == verdict and got["pairs"] == 3
    assert got["ring_over_gloo_lo"] <= got["ring_over_gloo"] <= got["ring_over_gloo_hi"]
    rows = [
        {"collective": "ring", "size_bytes": 8, "time_s": sum(ring) / 3, "times_s": ring},
        {"collective": "gloo", "size_bytes": 8, "time_s": sum(gloo) / 3, "times_s": gloo},
    ]
    sweep.add_ratios(rows, {}, 7, 20.0)
    slower = sweep.largest_summary([{**rows[0], "busbw_over_link": 0.8}, rows[1]], 7)["ring_vs_gloo"]
    assert slower["sizes_ring_slower"] == ([8] if verdict == "slower" else [])


def test_ps_over_ring_theory_is_n_squared_over_n_minus_1() -> None:
    n, size, link = 7, 2**20, 20.0
    rows = [
        {"collective": "ring", "size_bytes": size, "time_s": 1.0},
        {"collective": "ps", "size_bytes": size, "time_s": 6.0, "bound_s": 3.0},
    ]
    sweep.add_ratios(rows, {}, n, link)
    ps = rows[1]
    assert ps["ps_over_ring"] == pytest.approx(6.0)
    assert ps["ps_over_ring_theory"] == pytest.approx(n * n / (n - 1), rel=1e-3)
    assert ps["ratio_error"] == pytest.approx(abs(6.0 - 49 / 6) / (49 / 6), rel=1e-3)


@pytest.mark.parametrize(
    ("name", "kind", "shards", "colocated"),
    [
        ("ring", "ring", 1, False),
        ("gloo", "gloo", 1, False),
        ("ps", "ps", 1, False),
        ("ps:shards=7:placement=colocated", "ps", 7, True),
    ],
)
def test_algo_of_reads_strategy_names(name: str, kind: str, shards: int, colocated: bool) -> None:
    a = sweep.algo_of(name)
    assert (a.kind, a.shards, a.colocated) == (kind, shards, colocated)


def test_each_bench_gets_its_own_run_folder(tmp_path) -> None:
    # two benches in the same second: two folders, the first one's bench.json left as it was
    from bench.collectives import BENCH_FILE, bench_folder, parse_args

    args = parse_args([])
    assert args.out is None and args.results == "results"
    first = bench_folder(tmp_path)
    (first / BENCH_FILE).write_text('{"run": 1}')
    second = bench_folder(tmp_path)
    assert first != second and first.parent == second.parent == tmp_path.resolve()
    assert first.name.endswith("-bench") and second.name.startswith(first.name)
    assert (first / BENCH_FILE).read_text() == '{"run": 1}' and not (second / BENCH_FILE).exists()
    assert not (tmp_path / "latest").exists()  # results/latest stays an experiment's run folder
