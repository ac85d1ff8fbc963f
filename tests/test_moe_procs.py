"""moe's ranks as real gloo processes on 127.0.0.1: each rank's logged bytes against the pair bytes
worked by hand (tests/splits_theory.py), its losses, expert loads and dropped tokens against an
unsplit model written here in plain torch (one process, no gate, dispatch or expert code of
workloads.moe), and training that lowers the loss."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os

import pytest
import torch
import torch.nn.functional as F

from tests.procs import free_port, spawn_ranks
from tests.splits_theory import RunSize, moe_pairs, moe_size
from tests.test_moe_unit import moe_job
from workloads.model import ModelSpec, _generator, make_batch

pytestmark = pytest.mark.processes

SEED, STEPS, BATCH, GRAD_MB = 1, 8, 16, 0.05
INIT_STREAM = 5  # moe's weights come from the seed's stream 5 (model.py's are 1-3, pipeline's 4)
AUX = 0.01  # Switch's load-balancing loss coefficient


def _child(rank: int, job_doc: dict, out: mp.Queue) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch

    from runmodel.job import JobSpec
    from workloads.moe import run_rank

    torch.set_num_threads(1)
    lines: list[dict] = []
    run_rank(JobSpec.from_dict(job_doc), rank, lambda rec: lines.append(rec.to_dict()))
    out.put((rank, lines))


def _weights(h: int, experts: int, seed: int) -> tuple[dict[str, torch.Tensor], list[list[torch.Tensor]]]:
    """The model's initial weights as the seed names them: from stream (seed, 5, 0) in order w_in
    32 x h, w_gate h x E, w_out h x 10 (x 0.1), standard normal, biases zero; expert e's two h x h
    matrices from stream (seed, 5, 1, e), its biases zero."""
    g = _generator(seed, INIT_STREAM, 0)
    dense = {"w_in": torch.randn(32, h, generator=g), "b_in": torch.zeros(h),
             "w_gate": torch.randn(h, experts, generator=g), "w_out": torch.randn(h, 10, generator=g) * 0.1,
             "b_out": torch.zeros(10)}  # fmt: skip
    experts_w = []
    for e in range(experts):
        ge = _generator(seed, INIT_STREAM, 1, e)
        experts_w.append(
            [torch.randn(h, h, generator=ge), torch.zeros(h), torch.randn(h, h, generator=ge), torch.zeros(h)]
        )
    for t in [*dense.values(), *(t for w in experts_w for t in w)]:
        t.requires_grad_(True)
    return dense, experts_w


def unsplit_reference(job_size: RunSize, seed: int, lr: float) -> list[list[tuple[float, list[int], int]]]:
    """The whole model trained in one process: per step and rank (cross-entropy, tokens that chose
    each expert, tokens dropped). Each rank's batch is routed on its own: a token goes to the expert
    of its highest gate probability, and the first C tokens (in batch order) that chose an expert
    are kept, the rest pass by the residual only; a kept token adds gate x expert(token) to its
    hidden row. The loss is the mean over ranks of cross-entropy + 0.01 x Switch's aux loss
    (E x sum over experts of the share of tokens choosing it x its mean gate probability); SGD."""
    m, n = moe_size(job_size), job_size.workers
    h, e_count, cap = m.hidden, m.experts, m.capacity
    dense, experts_w = _weights(h, e_count, seed)
    params = [*dense.values(), *(t for w in experts_w for t in w)]
    out = []
    for step in range(job_size.steps):
        total, row = torch.zeros(()), []
        for r in range(n):
            x, y = make_batch(ModelSpec(h), seed, r, step, job_size.batch)
            a = torch.relu(x @ dense["w_in"] * (2 / 32) ** 0.5 + dense["b_in"])
            probs = torch.softmax(a @ dense["w_gate"] / h**0.5, dim=1)
            choice = [int(i) for i in probs.argmax(dim=1)]
            load = [choice.count(e) for e in range(e_count)]
            mixed = a
            kept = 0
            for e in range(e_count):
                rows = [t for t, c in enumerate(choice) if c == e][:cap]
                if not rows:
                    continue
                kept += len(rows)
                w1, b1, w2, b2 = experts_w[e]
                z = a[rows]
                f = torch.relu(z @ w1 * (2 / h) ** 0.5 + b1) @ w2 / h**0.5 + b2
                mixed = mixed.index_add(0, torch.tensor(rows), probs[rows, e : e + 1] * f)
            ce = F.cross_entropy(mixed @ dense["w_out"] / h**0.5 + dense["b_out"], y)
            aux = e_count * sum(load[e] / job_size.batch * probs[:, e].mean() for e in range(e_count))
            total = total + ce + AUX * aux
            row.append((float(ce.detach()), load, job_size.batch - kept))
        (total / n).backward()
        with torch.no_grad():
            for t in params:
                if t.grad is not None:  # None: an expert no rank's token reached this step
                    t.sub_(t.grad, alpha=lr)
                    t.grad = None
        out.append(row)
    return out


@pytest.mark.parametrize(("variant", "workers"), [("moe:experts=2", 3), ("moe", 4)])
def test_ranks_move_the_theory_and_train_as_the_unsplit_model(variant: str, workers: int) -> None:
    """Each rank logs, every step, bytes sent and received equal to its row and column of the pair
    bytes worked by hand, in 4 all-to-alls; its loss (within 1e-4), its expert loads and dropped
    tokens (exactly) are the plain-torch unsplit model's; some tokens overflow a capacity (so the
    capacity is tested), and the mean loss falls."""
    print(f"seed={SEED} (the job's training seed, fixed: the loss must fall for it)")
    job = moe_job(variant, workers=workers, batch=BATCH, grad_mb=GRAD_MB, steps=STEPS, seed=SEED)
    job = dataclasses.replace(
        job,
        master_addr="127.0.0.1",
        master_port=free_port(),
        ranks=tuple(dataclasses.replace(r, ifname="lo") for r in job.ranks),
    )
    lines = spawn_ranks(_child, job.world, job.to_dict())
    size = RunSize(workers, STEPS, BATCH, GRAD_MB, (variant,))
    theory = moe_pairs(size)
    n = job.world
    for r in range(n):
        assert [d["step"] for d in lines[r]] == list(range(STEPS))
        row = sum(theory[(r, b)] for b in range(n) if b != r)
        col = sum(theory[(a, r)] for a in range(n) if a != r)
        assert {d["bytes_sent"] for d in lines[r]} == {row}, (r, row)
        assert {d["bytes_recv"] for d in lines[r]} == {col}, (r, col)
        assert {d["a2a_calls"] for d in lines[r]} == {4}
    oracle = unsplit_reference(size, SEED, job.lr)
    got = [[lines[r][s]["loss"] for r in range(n)] for s in range(STEPS)]
    print(f"{variant}: per-step losses {[[round(x, 4) for x in s] for s in got]}")
    print(f"reference drops per step and rank {[[d for _, _, d in s] for s in oracle]}")
    for s in range(STEPS):
        assert got[s] == pytest.approx([c for c, _, _ in oracle[s]], abs=1e-4), s
        for r in range(n):
            _, load, dropped = oracle[s][r]
            assert (lines[r][s]["expert_load"], lines[r][s]["tokens_dropped"]) == (load, dropped), (s, r)
    assert any(d for s in oracle for _, _, d in s), "no token ever overflowed: the capacity untested"
    mean = [sum(s) / n for s in got]
    half = STEPS // 2
    assert sum(mean[half:]) < sum(mean[:half]), mean
