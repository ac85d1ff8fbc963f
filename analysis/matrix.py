"""A strategy's theoretical traffic matrix host to host, and how the captures' matrix compares with it.

The theory is the strategy's own: `traffic_theory(job)` in the module its ranks run (StrategySpec.module;
the ring's in workloads.collectives), payload bytes per training step rank a -> rank b, a pure function
of job.json. Here its ranks become hosts (job.ranks), and a step's bytes become the run's (x the steps
logged), in the cells of the measured matrix (summary traffic_matrix_pcap: the unique payload bytes
each receiving host's capture saw arrive from each sender, every connection included).

The comparison: per host pair the theory says carries bytes, (measured - theory) / theory; the bytes
on every other pair (the rendezvous store at rank 0's host, barriers, connection set-up) apart, as
what no theory of the training step counts. The module is imported only for kinds with a theory (so
torch only when the run has one of them); a module without `traffic_theory` means no theory (None).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runmodel.job import JobSpec
from runmodel.strategy import MODEL_SPLITS, StrategySpec

THEORY_MODULES = {"ring": "workloads.collectives"}  # kinds whose theory is not in the module they run
THEORY_KINDS = ("ring",) + MODEL_SPLITS  # the kinds that may define one (the PS family, gloo's, jobs: no)
Theory = Callable[[JobSpec], dict[tuple[int, int], int]]


def theory_of(spec: StrategySpec) -> Theory | None:
    """The strategy's traffic_theory function, None when its kind has none (or its module is not
    there, or defines none)."""
    if spec.kind not in THEORY_KINDS:
        return None
    try:
        module = importlib.import_module(THEORY_MODULES.get(spec.kind, spec.module))
    except ModuleNotFoundError:
        return None
    fn = getattr(module, "traffic_theory", None)
    return fn if callable(fn) else None


def cell(a: str, b: str) -> str:
    """A matrix cell's key, as in traffic_matrix_pcap: 'h2->h3'."""
    return f"{a}->{b}"


def pair(key: str) -> tuple[str, str]:
    """'h2->h3' -> ('h2', 'h3')."""
    a, _, b = key.partition("->")
    return a, b


def host_matrix(by_rank: dict[tuple[int, int], int], job: JobSpec, steps: int) -> dict[str, int]:
    """Rank-to-rank bytes per step as host-to-host bytes over `steps` steps (ranks on one host move
    nothing over the fabric: left out)."""
    out: dict[str, int] = {}
    for (a, b), nbytes in sorted(by_rank.items()):
        ha, hb = job.rank(a).host, job.rank(b).host
        if ha == hb or nbytes <= 0:
            continue
        out[cell(ha, hb)] = out.get(cell(ha, hb), 0) + int(nbytes) * steps
    return out


@dataclass
class MatrixCheck:
    """The measured matrix against the theory, both over the same steps."""

    error: dict[str, float] = field(default_factory=dict)  # theory's cells: (measured - theory) / theory
    error_max: float | None = None  # the largest |error|
    off_theory: dict[str, int] = field(
        default_factory=dict
    )  # measured bytes on cells the theory leaves empty
    per_worker_step: float | None = None  # measured: mean over the job's hosts of bytes sent per step
    per_worker_step_theory: float | None = None


def compare(measured: dict[str, int], theory: dict[str, int], hosts: list[str], steps: int) -> MatrixCheck:
    """Cell by cell relative errors where the theory has bytes; what arrived elsewhere, apart; bytes
    each of `hosts` sent per step (its row's sum / steps), their mean, measured and in theory."""
    out = MatrixCheck()
    for key, want in sorted(theory.items()):
        out.error[key] = round((measured.get(key, 0) - want) / want, 4)
    out.error_max = max((abs(v) for v in out.error.values()), default=None)
    out.off_theory = {k: v for k, v in sorted(measured.items()) if k not in theory and v > 0}
    if hosts and steps:

        def mean_row(m: dict[str, int]) -> float:
            return round(sum(v for k, v in m.items() if pair(k)[0] in hosts) / (len(hosts) * steps), 1)

        out.per_worker_step = mean_row(measured)
        out.per_worker_step_theory = mean_row(theory)
    return out


def matrix_figures(sf: Any, spec: StrategySpec, out: Any, captured: bool) -> None:
    """Fill the traffic_matrix_* fields of a StrategySummary: the theory over the steps logged, and,
    when the hosts were captured (`captured`), the measured matrix against it."""
    fn = theory_of(spec)
    if fn is None or not out.steps or not sf.job_file.exists():
        return
    job = JobSpec.load(sf.job_file)
    theory = host_matrix(fn(job), job, out.steps)
    out.traffic_matrix_theory = theory
    out.bytes_per_worker_step_theory = compare({}, theory, hosts(job), out.steps).per_worker_step_theory
    if not captured:
        return
    check = compare(out.traffic_matrix_pcap, theory, hosts(job), out.steps)
    out.traffic_matrix_error = check.error
    out.traffic_matrix_error_max = check.error_max
    out.traffic_matrix_off_theory = check.off_theory
    out.bytes_per_worker_step_pcap = check.per_worker_step


def hosts(job: JobSpec) -> list[str]:
    """The job's hosts in rank order, each once."""
    return list(dict.fromkeys(r.host for r in job.ranks))
