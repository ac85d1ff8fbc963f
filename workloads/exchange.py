"""The interface between a worker's training loop and its strategy's communication."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class ExchangeStats:
    """Per-step communication numbers that go straight into the worker's JSONL line.

    `wait_s` is the part of `comm_s` spent waiting on others rather than moving our own bytes.
    """

    comm_s: float = 0.0
    wait_s: float = 0.0
    bytes_sent: int = 0
    bytes_recv: int = 0


class Exchange(Protocol):
    """One strategy's way of turning a local gradient into the next weights."""

    def start(self) -> None:
        """Connect / rendezvous; returns once training may begin."""

    def step(self, step: int, weights: torch.Tensor, grad: torch.Tensor) -> ExchangeStats:
        """Exchange `grad` and update `weights` in place for the next step."""
        ...

    def close(self) -> None:
        """Orderly goodbye after the last step."""
