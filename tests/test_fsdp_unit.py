"""fsdp without processes: the shards, the per-layer forward and backward against model.py's, the
traffic theory of fsdp and of the ring against numbers worked by hand, and its options refused."""

from __future__ import annotations

import random

import pytest
import torch

from runmodel.job import JobSpec, RankJob
from runmodel.params import ParamError
from runmodel.strategy import StrategySpec
from workloads.collectives import traffic_theory as ring_theory
from workloads.fsdp import layer1, layer2, shards_of, traffic_theory, unit_bounds
from workloads.model import ModelSpec, init_weights, loss_and_grad, make_batch


def job(strategy: str, world: int, grad_mb: float = 0.5) -> JobSpec:
    """A job as job_for writes it, on loopback (only the fields the theory reads matter)."""
    ranks = tuple(RankJob(r, f"h{r + 1}", "lo") for r in range(world))
    return JobSpec(
        strategy=strategy, world=world, steps=4, grad_mb=grad_mb, batch=32, lr=1.0, seed=0, timeout=30,
        compute_ms=0, staleness=2, backup=1, master_addr="127.0.0.1", master_port=29500, ranks=ranks,
        variant=strategy,
    )  # fmt: skip


def test_units_and_shards_cover_the_model_once() -> None:
    """The default 0.5 MiB model: hidden 3048 (131072 - 10 over 43 per unit of width), units of
    32 x 3048 + 3048 = 100584 and 3048 x 10 + 10 = 30490 parameters; over 3 ranks 33528 x 3 and
    10164 + 10163 + 10163 (the first chunk takes the remainder). The ranks' shards, put back in
    unit order, are the initial weights."""
    spec = ModelSpec.from_grad_mb(0.5)
    assert (spec.hidden, spec.nparams) == (3048, 131074)
    assert unit_bounds(spec) == [(0, 100584), (100584, 131074)]
    w = init_weights(spec, 7)
    shards = [shards_of(spec, w, r, 3) for r in range(3)]
    assert [[s.numel() for s in sh] for sh in shards] == [[33528, 10164], [33528, 10163], [33528, 10163]]
    assert torch.equal(torch.cat([shards[r][u] for u in range(2) for r in range(3)]), w)


def test_per_layer_backward_is_the_flat_models(rng: random.Random) -> None:
    """Unit by unit, with the second unit's input gradient handed back to the first (as fsdp's
    backward does), the loss and the gradient are model.loss_and_grad's, bit for bit."""
    seed = rng.randrange(2**31)
    print(f"model seed {seed}")
    spec = ModelSpec.from_grad_mb(0.05)
    w = init_weights(spec, seed)
    x, y = make_batch(spec, seed, 1, 0, 32)
    want_loss, want_grad = loss_and_grad(spec, w, x, y)
    (a, b), (c, d) = unit_bounds(spec)
    p1, p2 = w[a:b].clone().requires_grad_(True), w[c:d].clone().requires_grad_(True)
    with torch.no_grad():
        h = layer1(spec, x, p1)
    h.requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(layer2(spec, h, p2), y)
    loss.backward()
    layer1(spec, x, p1).backward(h.grad)
    assert float(loss.detach()) == want_loss
    assert torch.equal(torch.cat([p1.grad, p2.grad]), want_grad)


def test_fsdp_theory_by_hand() -> None:
    """3 ranks, 0.5 MiB: unit 1 moves 3 x (100584 - 33528) = 201168 floats a rank; unit 2 two
    all-gathers of all but the right neighbour's chunk and a reduce-scatter of all but the own:
    rank 0 2 x (30490 - 10163) + (30490 - 10164) = 60980, rank 1 2 x 20327 + 20327 = 60981,
    rank 2 2 x (30490 - 10164) + 20327 = 60979. Only to the right neighbour."""
    theory = traffic_theory(job("fsdp", 3))
    assert theory == {(0, 1): 262148 * 4, (1, 2): 262149 * 4, (2, 0): 262147 * 4}
    assert sum(theory.values()) == 3 * 3 * 2 * 131074 * 4 // 3  # 3 x (N-1)/N of the model per rank
    assert traffic_theory(job("fsdp", 1)) == {}


def test_ring_theory_by_hand() -> None:
    """3 ranks, 131074 floats in chunks 43692, 43691, 43691: rank r sends twice the gradient but
    chunks r+1 and r+2: 262148 - 87382 = 174766 floats from rank 0, 174765 from ranks 1 and 2.
    2 ranks (chunks 65537 each): 2 x 131074 - 2 x 65537 = 131074 floats each way."""
    assert ring_theory(job("ring", 3)) == {(0, 1): 174766 * 4, (1, 2): 174765 * 4, (2, 0): 174765 * 4}
    assert ring_theory(job("ring", 2)) == {(0, 1): 131074 * 4, (1, 0): 131074 * 4}
    with pytest.raises(ValueError, match="gloo"):
        ring_theory(job("allreduce", 3))


@pytest.mark.parametrize(
    "text", ["fsdp:size=2", "fsdp:stages=3", "fsdp:experts=2", "fsdp:dp=2:pp=3", "fsdp:zero=3"]
)
def test_fsdp_options_refused_in_one_line(text: str) -> None:
    """fsdp has no options of its own: every other kind's option is refused by name, in one line."""
    with pytest.raises(ParamError) as err:
        StrategySpec.parse(text)
    msg = str(err.value)
    print(msg)
    assert "\n" not in msg and text.split(":")[1].split("=")[0] in msg


def test_fsdp_parses_to_its_module() -> None:
    spec = StrategySpec.parse("fsdp")
    assert (spec.name, spec.module, spec.hosts) == ("fsdp", "workloads.fsdp", None)


def test_hand_worked_pairs_at_the_splits_runs_size() -> None:
    """tests/splits_theory.py (the integration test's expected bytes) by hand. 6 ranks, 0.5 MiB,
    width 3048: fsdp's first unit 100584 floats in 6 chunks of 16764, 3 x (100584 - 16764) =
    251460 from every rank; the second 30490 in chunks 5082 x 4, 5081 x 2, two all-gathers of all
    but c[r+1] and a reduce-scatter of all but c[r]: 76224 from ranks 0-2, 76226 from 3, 76227 from
    4, 76225 from 5. The ring: 131074 floats in chunks 21846 x 4, 21845 x 2, 262148 - c[r+1] -
    c[r+2]: 218456 from 0, 1, 5, 218457 from 2 and 4, 218458 from 3. At 3 ranks: the numbers of
    the two tests above."""
    from tests.splits_theory import RunSize, fsdp_pairs, ring_pairs

    six = RunSize(6, 4, 512, 0.5, ("ring", "fsdp"))
    unit2 = [76224, 76224, 76224, 76226, 76227, 76225]
    assert fsdp_pairs(six) == {(r, (r + 1) % 6): (251460 + unit2[r]) * 4 for r in range(6)}
    ring = [218456, 218456, 218457, 218458, 218457, 218456]
    assert ring_pairs(six) == {(r, (r + 1) % 6): ring[r] * 4 for r in range(6)}
    three = RunSize(3, 4, 32, 0.5, ("ring", "fsdp"))
    assert fsdp_pairs(three) == {(0, 1): 262148 * 4, (1, 2): 262149 * 4, (2, 0): 262147 * 4}
    assert ring_pairs(three) == {(0, 1): 174766 * 4, (1, 2): 174765 * 4, (2, 0): 174765 * 4}
    two = RunSize(2, 4, 32, 0.5, ("ring",))
    assert ring_pairs(two) == {(0, 1): 131074 * 4, (1, 0): 131074 * 4}
