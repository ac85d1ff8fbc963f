"""How a workload process starts and ends: its job part and log opened (or one stderr line, exit 2),
the one exception type it turns into its single stderr line and non-zero exit, and the exit itself;
`rank_main`, the one entry point of the model-split and sharded strategies' rank processes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

from runmodel.job import JobSpec, RankJob
from runmodel.records import JsonlWriter, WorkerDone

# Connecting to the PS may take at least this long whatever --timeout says: N processes importing
# torch at once on a shared CPU can need many seconds before they even try to connect.
STARTUP_GRACE_S = 30.0


class WorkloadError(Exception):
    """An expected failure (peer lost, timeout, bad arguments): reported without a traceback."""


@dataclass
class Outcome:
    """The exit code of a workload process's work: 0, 1 (a WorkloadError) or 130 (interrupted)."""

    code: int = 0


@contextmanager
def failures_reported(who: str) -> Iterator[Outcome]:
    """Around a process's work: a WorkloadError or a Ctrl-C becomes one stderr line naming `who`
    and the Outcome's code (1, 130) instead of a traceback."""
    outcome = Outcome()
    try:
        yield outcome
    except WorkloadError as exc:
        print(f"{who}: {exc}", file=sys.stderr)
        outcome.code = 1
    except KeyboardInterrupt:
        print(f"{who}: interrupted", file=sys.stderr)
        outcome.code = 130


def exit_flushed(code: int) -> NoReturn:
    """Flush stdout and stderr, then leave without interpreter teardown: a gloo group that failed
    cannot be torn down cleanly (its destructor may block or warn), and every result is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _Part(Protocol):
    log: str


P = TypeVar("P", bound=_Part)


def open_part(
    who: str, job_path: Path | str, part: Callable[[JobSpec], P]
) -> tuple[JobSpec, P, JsonlWriter] | None:
    """A workload process's start: job.json, this process's `part` of it and the part's log opened.
    None after one stderr line naming `who` when the job cannot be read or the log opened: the
    caller exits 2 (bad arguments or files, nothing ran)."""
    try:
        job = JobSpec.load(job_path)
        me = part(job)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{who}: cannot read job {job_path}: {exc}", file=sys.stderr)
        return None
    try:
        return job, me, JsonlWriter(Path(me.log))
    except OSError as exc:
        print(f"{who}: cannot open log {me.log}: {exc.strerror}", file=sys.stderr)
        return None


def open_rank(
    who: str, job_path: Path | str, rank: int, threads: int
) -> tuple[JobSpec, RankJob, JsonlWriter] | None:
    """A rank process's start (a worker, a pipeline stage): open_part of its rank, gloo told to use
    the rank's fabric interface, torch limited to `threads` intra-op threads. None as open_part."""
    opened = open_part(who, job_path, lambda job: job.rank(rank))
    if opened is not None:
        import torch  # only a rank process needs it

        os.environ["GLOO_SOCKET_IFNAME"] = opened[1].ifname
        torch.set_num_threads(threads)
    return opened


def _reason(exc: BaseException) -> str:
    """First line of a gloo/c10d error, without the C++ source location prefix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return text.split(". ", 1)[0][:300]  # gloo appends advice sentences


RunRank = Callable[[JobSpec, RankJob, str, Callable[[Any], None]], None]


def rank_main(module: str, doc: str | None, what: str, run: RunRank, argv: list[str] | None = None) -> int:
    """`python -m MODULE --job job.json --rank R` for a strategy whose ranks join one gloo group
    (fsdp, moe, pp, tp, hybrid): rank R's part of the job, `run(job, rank's part, master host:port,
    write)` writing its step lines to its log, then WorkerDone; one stderr line naming `what` and the
    rank and a non-zero exit on a failure, as workloads.worker."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    p.add_argument("--job", required=True, type=Path, help="the strategy's job.json (runmodel.job)")
    p.add_argument("--rank", type=int, required=True, help=f"the {what}")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    args = p.parse_args(argv)
    opened = open_rank(f"{what} {args.rank}", args.job, args.rank, args.threads)
    if opened is None:
        return 2
    job, me, log = opened
    with log, failures_reported(f"{what} {me.rank}") as outcome:
        try:
            run(job, me, f"{job.master_addr}:{job.master_port}", log.write)
        except (RuntimeError, ValueError, OSError) as exc:
            raise WorkloadError(f"{what} {me.rank}/{job.world} failed: {_reason(exc)}") from None
        log.write(WorkerDone(me.rank, job.steps))
    return outcome.code
