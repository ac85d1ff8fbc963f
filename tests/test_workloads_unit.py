"""Unit tests of workloads/ that need no processes: model sizing, wire format, PS decisions."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from runmodel.records import JsonlWriter, PsRelease, PsStep, read_jsonl
from workloads.model import ModelSpec, init_weights, loss_and_grad, make_batch
from workloads.pscore import PSCore
from workloads.psproto import (
    HEADER,
    Header,
    Kind,
    PeerClosed,
    ProtocolError,
    as_bytes,
    recv_f32,
    recv_header,
    send_msg,
)


class FakeClock:
    """Time only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, dt: float = 1.0) -> None:
        self.now += dt


# --- model -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mb", [0.05, 1.0, 4.0])
def test_gradient_size_matches_grad_mb(mb: float) -> None:
    spec = ModelSpec.from_grad_mb(mb)
    assert abs(spec.grad_bytes - mb * 2**20) / (mb * 2**20) < 0.01
    x, y = make_batch(spec, 1, 0, 0, 4)
    _, g = loss_and_grad(spec, init_weights(spec, 1), x, y)
    assert g.numel() == spec.nparams and g.dtype == torch.float32


def test_same_seed_same_weights_and_shards_differ_by_rank() -> None:
    spec = ModelSpec.from_grad_mb(0.05)
    assert torch.equal(init_weights(spec, 7), init_weights(spec, 7))
    assert not torch.equal(init_weights(spec, 7), init_weights(spec, 8))
    x0, y0 = make_batch(spec, 7, 0, 3, 16)
    x0b, y0b = make_batch(spec, 7, 0, 3, 16)
    x1, _ = make_batch(spec, 7, 1, 3, 16)
    assert torch.equal(x0, x0b) and torch.equal(y0, y0b)
    assert not torch.equal(x0, x1)


def test_loss_and_grad_leaves_weights_untouched() -> None:
    spec = ModelSpec.from_grad_mb(0.05)
    w = init_weights(spec, 1)
    before = w.clone()
    x, y = make_batch(spec, 1, 0, 0, 8)
    loss, g = loss_and_grad(spec, w, x, y)
    assert torch.equal(w, before)
    assert loss > 0 and g.abs().sum() > 0


# --- wire format -------------------------------------------------------------------------------
def test_header_round_trip_and_bad_magic() -> None:
    h = Header(Kind.PUSH, rank=3, step=-1, version=2**40, arg=7, nbytes=12)
    assert Header.unpack(h.pack()) == h
    assert len(h.pack()) == HEADER.size
    with pytest.raises(ProtocolError):
        Header.unpack(b"XXXX" + h.pack()[4:])


def test_float32_payload_round_trip_over_a_socket() -> None:
    a, b = socket.socketpair()
    with a, b:
        data = np.arange(1001, dtype=np.float32) / 7
        n = send_msg(a, Header(Kind.WEIGHTS, version=5), as_bytes(data))
        assert n == HEADER.size + data.nbytes
        h = recv_header(b)
        assert h.kind == Kind.WEIGHTS and h.version == 5 and h.nbytes == data.nbytes
        out = np.zeros(1001, dtype=np.float32)
        recv_f32(b, h, out)
        assert np.array_equal(out, data)
        send_msg(a, Header(Kind.PUSH), as_bytes(data[:10]))
        with pytest.raises(ProtocolError):  # size mismatch is caught, not silently truncated
            recv_f32(b, recv_header(b), out)


def test_eof_mid_message_is_peer_closed() -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(Header(Kind.PUSH, nbytes=400).pack()[:10])
        a.close()
        with pytest.raises(PeerClosed):
            recv_header(b)


def test_jsonl_skips_torn_last_line(tmp_path) -> None:
    p = tmp_path / "x" / "log.jsonl"
    with JsonlWriter(p) as log:
        log.write({"a": 1})
    with p.open("a") as f:
        f.write('{"b": ')
    problems: list[str] = []
    assert read_jsonl(p, problems) == [{"a": 1}]
    assert problems == ["x/log.jsonl: truncated last line skipped"]


# --- PSCore: synchronous -----------------------------------------------------------------------
def test_sync_ps_waits_for_all_then_applies_in_one_version() -> None:
    core = PSCore("ps", world=3, steps=2, clock=FakeClock())
    d0 = core.push(2, 0, 0)
    d1 = core.push(0, 0, 0)
    assert d0.keep and d1.keep and not d0.apply and not d1.release
    d2 = core.push(1, 0, 0)
    assert d2.apply == [2, 0, 1] and sorted(d2.release) == [0, 1, 2]
    assert core.version == 1
    step = [e for e in d2.events if isinstance(e, PsStep)]
    assert step == [PsStep(t=1000.0, step=0, applied=[2, 0, 1], discarded=[])]


def test_backup_applies_first_n_minus_b_arrivals_and_discards_exactly_b() -> None:
    clock = FakeClock()
    world, b, steps = 4, 1, 3
    core = PSCore("backup", world=world, steps=steps, backup=b, clock=clock)
    arrival_orders = [[3, 1, 0, 2], [0, 2, 3, 1], [1, 3, 2, 0]]
    steps_seen = []
    for v, order in enumerate(arrival_orders):
        versions = {r: v for r in range(world)}
        for r in order:
            clock.tick()
            d = core.push(r, v, versions[r])
            assert d.keep == (r in order[: world - b])
            steps_seen += [e for e in d.events if isinstance(e, PsStep)]
            if r == order[-1]:  # the late one is dropped but gets the new weights at once
                upd = d.events[0]
                assert upd.applied is False and upd.worker == r and upd.staleness == 1
                assert d.release == [r] and not d.apply
            if r == order[world - b - 1]:
                assert d.apply == order[: world - b]
    assert [s.applied for s in steps_seen] == [o[: world - b] for o in arrival_orders]
    assert [s.discarded for s in steps_seen] == [sorted(o[world - b :]) for o in arrival_orders]
    assert all(len(s.discarded) == b for s in steps_seen)
    assert core.version == steps


def test_backup_late_gradient_from_an_older_version_is_dropped() -> None:
    core = PSCore("backup", world=3, steps=5, backup=1, clock=FakeClock())
    core.push(0, 0, 0)
    core.push(1, 0, 0)  # step 0 done -> v1
    core.push(0, 1, 1)
    core.push(1, 1, 1)  # step 1 done -> v2, worker 2 still computing on v0
    d = core.push(2, 0, 0)
    assert d.events[0].applied is False and d.events[0].staleness == 2 and d.release == [2]
    d = core.push(2, 1, 2)  # now fresh for v2: counts toward step 2
    assert d.keep and d.events[0].applied is True


def test_sync_rejects_a_second_push_before_the_reply() -> None:
    core = PSCore("ps", world=2, steps=3, clock=FakeClock())
    core.push(0, 0, 0)
    with pytest.raises(ValueError):
        core.push(0, 1, 0)


# --- PSCore: async / ssp -----------------------------------------------------------------------
def test_async_staleness_is_version_now_minus_version_computed_on() -> None:
    clock = FakeClock()
    core = PSCore("async", world=3, steps=4, clock=clock)
    # all three start on v0; arrivals 0,1,2 see versions 0,1,2
    for i, r in enumerate([0, 1, 2]):
        clock.tick()
        d = core.push(r, 0, 0)
        assert d.apply == [r] and d.release == [r]
        assert d.events[0].staleness == i and d.events[0].version == i
        assert d.events[0].t == clock.now
    assert core.version == 3
    d = core.push(0, 1, 1)  # worker 0 got v1 back; PS is at v3 now
    assert d.events[0].staleness == 2


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_ssp_never_lets_a_worker_start_more_than_s_ahead(bound: int) -> None:
    world, steps = 3, 8
    core = PSCore("ssp", world=world, steps=steps, staleness=bound, clock=FakeClock())
    version_of = [0] * world
    running = set(range(world))  # workers that hold weights and are computing
    completed = [0] * world
    # Worker 2 is 5x slower: it gets a turn only every fifth round.
    rnd = 0
    while sum(completed) < world * steps:
        rnd += 1
        turn = [r for r in sorted(running) if r != 2 or rnd % 5 == 0]
        for r in turn:
            running.discard(r)
            d = core.push(r, completed[r], version_of[r])
            completed[r] += 1
            for w in d.release:
                version_of[w] = core.version
                if completed[w] < steps:
                    # the invariant: the step w now starts is within `bound` of the slowest worker
                    assert completed[w] - min(completed) <= bound
                    running.add(w)
            for e in d.events:
                if isinstance(e, PsRelease):
                    assert e.gap <= bound
        assert running or sum(completed) == world * steps, "ssp deadlocked"
    assert core.version == world * steps


def test_ssp_holds_the_fast_worker_until_the_slow_one_catches_up() -> None:
    core = PSCore("ssp", world=2, steps=5, staleness=1, clock=FakeClock())
    assert core.push(0, 0, 0).release == [0]  # next step 1, slowest 0: gap 1 ok
    d = core.push(0, 1, 1)
    assert d.release == [] and core.waiting_for_reply(0)  # would start step 2 with slowest at 0
    d = core.push(1, 0, 0)
    assert sorted(d.release) == [0, 1]
    rel = {e.worker: e for e in d.events if isinstance(e, PsRelease)}
    assert rel[0].next_step == 2 and rel[0].slowest == 1 and rel[0].gap == 1


def test_bye_only_after_all_steps_and_all_done() -> None:
    core = PSCore("async", world=1, steps=1, clock=FakeClock())
    with pytest.raises(ValueError):
        core.bye(0)
    core.push(0, 0, 0)
    core.bye(0)
    assert core.all_done


# --- PSCore: a worker is gone ------------------------------------------------------------------
def test_async_drops_a_lost_worker_and_finishes_with_the_others() -> None:
    clock = FakeClock()
    core = PSCore("async", world=3, steps=3, clock=clock)
    for r in range(3):
        core.push(r, 0, core.version)
    core.push(2, 1, core.version)  # worker 2 pushed steps 0 and 1, then dies
    clock.tick(5)
    loss = core.lose(2, "connection closed")
    assert loss.carry_on and loss.remaining == 2
    assert [e.to_dict() for e in loss.events] == [
        {"event": "worker_lost", "t": 1005.0, "worker": 2, "worker_step": 1, "reason": "connection closed"}
    ]
    assert core.lost == {2} and not core.all_done
    with pytest.raises(ValueError):
        core.push(2, 2, core.version)
    with pytest.raises(ValueError):
        core.bye(2)
    for step in (1, 2):
        for r in (0, 1):
            d = core.push(r, step, core.version)
            assert d.apply == [r] and d.release == [r]  # the others are served as before
    core.bye(0)
    assert not core.all_done
    core.bye(1)
    assert core.all_done and core.lost == {2}
    assert core.version == 3 + 1 + 4  # every gradient that arrived was applied


def test_async_second_report_or_fin_after_goodbye_is_not_a_loss() -> None:
    core = PSCore("async", world=2, steps=1, clock=FakeClock())
    core.push(0, 0, 0)
    core.bye(0)
    after_bye = core.lose(0, "connection closed")
    assert after_bye.carry_on and after_bye.events == [] and core.lost == set()
    first = core.lose(1, "connection reset")
    assert first.carry_on and first.remaining == 0 and first.events[0].worker_step == -1  # never pushed
    again = core.lose(1, "broken pipe")
    assert again.carry_on and again.events == []
    assert core.all_done and core.lost == {1}


def test_async_fails_once_every_worker_is_lost() -> None:
    core = PSCore("async", world=2, steps=4, clock=FakeClock())
    assert core.lose(0, "connection closed").carry_on
    last = core.lose(1, "sent nothing for 5 s")
    assert not last.carry_on and "all 2 workers" in last.why
    assert [e.worker for e in last.events] == [1]  # the last loss is still logged
    assert core.lost == {0, 1}


@pytest.mark.parametrize("strategy,extra", [("ps", {}), ("ssp", {"staleness": 1}), ("backup", {"backup": 1})])
def test_synchronous_and_bounded_strategies_cannot_go_on_without_a_worker(strategy: str, extra: dict) -> None:
    core = PSCore(strategy, world=3, steps=4, clock=FakeClock(), **extra)
    core.push(0, 0, 0)
    loss = core.lose(1, "connection closed")
    assert not loss.carry_on and loss.why and loss.events == []
    assert core.lost == set() and not core.all_done


def test_silent_names_only_workers_the_ps_owes_nothing() -> None:
    core = PSCore("ps", world=3, steps=4, clock=FakeClock())
    assert core.silent(1e9, 5.0) == []  # nobody heard of yet: not started, not hung
    for r in range(3):
        core.heard(r, 100.0)
    assert core.silent(105.0, 5.0) == []  # exactly the timeout is still fine
    core.push(0, 0, 0)  # the PS owes worker 0 weights until the step completes
    core.heard(1, 103.0)
    assert core.silent(105.5, 5.0) == [2]
    assert core.silent(108.5, 5.0) == [1, 2]


def test_async_hung_worker_is_silent_then_dropped_like_a_dead_one() -> None:
    clock = FakeClock()
    core = PSCore("async", world=3, steps=2, clock=clock)
    for r in range(3):
        core.heard(r, 0.0)
        core.push(r, 0, core.version)
        core.heard(r, 1.0)  # the reply was queued at once: its silence counts from here
    core.push(0, 1, core.version)
    core.heard(0, 2.0)
    core.bye(0)
    core.heard(1, 7.0)
    assert core.silent(8.5, 8.0) == []  # worker 2 silent for 7.5 s only
    hung = core.silent(10.0, 5.0)
    assert hung == [2]  # worker 0 finished, worker 1 was heard at 7
    loss = core.lose(2, "sent nothing for 5 s")
    assert loss.carry_on and loss.remaining == 1 and loss.events[0].worker_step == 0
    assert core.silent(100.0, 5.0) == [1]  # a dropped worker is never reported again
    core.push(1, 1, core.version)
    core.bye(1)
    assert core.all_done


def test_ssp_held_worker_is_not_silent() -> None:
    core = PSCore("ssp", world=2, steps=5, staleness=0, clock=FakeClock())
    core.heard(0, 0.0)
    core.heard(1, 0.0)
    core.push(0, 0, 0)  # next step 1, slowest 0: held
    assert core.waiting_for_reply(0)
    assert core.silent(60.0, 5.0) == [1]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(strategy="backup", backup=0),
        dict(strategy="backup", backup=3),
        dict(strategy="ps", backup=1),
        dict(strategy="ssp", staleness=None),
        dict(strategy="nope"),
    ],
)
def test_bad_configurations_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PSCore(world=3, steps=2, **kwargs)
