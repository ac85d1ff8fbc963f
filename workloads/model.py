"""A small MLP on a flat float32 parameter vector, plus seeded synthetic data.

The parameters live in one flat tensor so the gradient *is* the message: the PS, the ring and the
all-reduce baseline all move exactly `nparams * 4` bytes per gradient, and the PS can hold the model
without building a torch module. Everything is derived from `--seed` so every process (workers and
PS) starts from bit-identical weights without downloading or exchanging anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

D_IN = 32
CLASSES = 10
BYTES_PER_PARAM = 4  # float32

_STREAM_TEACHER = 1
_STREAM_INIT = 2
_STREAM_DATA = 3


@dataclass(frozen=True)
class ModelSpec:
    """Shape of the two-layer MLP `D_IN -> hidden -> CLASSES` (ReLU)."""

    hidden: int
    d_in: int = D_IN
    classes: int = CLASSES

    @classmethod
    def from_grad_mb(cls, grad_mb: float) -> ModelSpec:
        """Choose the hidden width so the gradient is as close as possible to `grad_mb` MiB."""
        if grad_mb <= 0:
            raise ValueError(f"--grad-mb must be > 0, got {grad_mb}")
        target = grad_mb * 2**20 / BYTES_PER_PARAM
        hidden = round((target - CLASSES) / (D_IN + 1 + CLASSES))
        return cls(hidden=max(1, hidden))

    @property
    def nparams(self) -> int:
        return self.d_in * self.hidden + self.hidden + self.hidden * self.classes + self.classes

    @property
    def grad_bytes(self) -> int:
        return self.nparams * BYTES_PER_PARAM

    def unflatten(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views (w1, b1, w2, b2) into the flat vector, so autograd lands in one flat gradient."""
        h, d, c = self.hidden, self.d_in, self.classes
        o1 = d * h
        o2 = o1 + h
        o3 = o2 + h * c
        return w[:o1].view(d, h), w[o1:o2], w[o2:o3].view(h, c), w[o3:]


def shard_bounds(nparams: int, shards: int) -> list[tuple[int, int]]:
    """[start, stop) of each shard of a flat parameter vector, split as evenly as possible (ps-lite)."""
    if not 1 <= shards <= nparams:
        raise ValueError(f"cannot split {nparams} parameters into {shards} shards")
    cuts = [nparams * k // shards for k in range(shards + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _generator(*key: int) -> torch.Generator:
    """An independent torch RNG stream per (seed, purpose, ...) so streams never overlap."""
    state = np.random.SeedSequence([int(k) for k in key]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def init_weights(spec: ModelSpec, seed: int) -> torch.Tensor:
    """Standard-normal flat weights (the forward pass scales them); identical for the same seed."""
    g = _generator(seed, _STREAM_INIT)
    w1 = torch.randn(spec.d_in, spec.hidden, generator=g)
    w2 = torch.randn(spec.hidden, spec.classes, generator=g) * 0.1  # near-uniform first predictions
    b1 = torch.zeros(spec.hidden)
    b2 = torch.zeros(spec.classes)
    return torch.cat([w1.reshape(-1), b1, w2.reshape(-1), b2]).contiguous()


def _teacher(spec: ModelSpec, seed: int) -> torch.Tensor:
    return torch.randn(spec.d_in, spec.classes, generator=_generator(seed, _STREAM_TEACHER))


def make_batch(
    spec: ModelSpec, seed: int, rank: int, step: int, batch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch `step` of worker `rank`'s shard: inputs from its own stream, labels from the shared teacher.

    Indexed by (rank, step) rather than drawn from a running generator, so a test can rebuild any
    worker's batch without replaying the run.
    """
    x = torch.randn(batch, spec.d_in, generator=_generator(seed, _STREAM_DATA, rank, step))
    y = torch.argmax(x @ _teacher(spec, seed), dim=1)
    return x, y


def loss_and_grad(
    spec: ModelSpec, weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, torch.Tensor]:
    """Cross-entropy loss at `weights` and its flat gradient (a new tensor; `weights` is untouched)."""
    w = weights.detach().clone().requires_grad_(True)
    w1, b1, w2, b2 = spec.unflatten(w)
    # NTK scaling: the same learning rate behaves the same whatever width --grad-mb picked.
    hidden = torch.relu((x @ w1) * (2.0 / spec.d_in) ** 0.5 + b1)
    logits = (hidden @ w2) * (1.0 / spec.hidden) ** 0.5 + b2
    loss = F.cross_entropy(logits, y)
    loss.backward()
    assert w.grad is not None
    return float(loss.detach()), w.grad.detach()


def sgd_(weights: torch.Tensor, avg_grad: torch.Tensor, lr: float) -> None:
    """Plain SGD in place; the one update rule shared by the PS and the collective workers."""
    weights.sub_(avg_grad, alpha=lr)
