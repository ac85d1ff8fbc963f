"""How a workload process starts and ends: its job part and log opened (or one stderr line, exit 2),
the one exception type it turns into its single stderr line and non-zero exit, and the exit itself."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

from runmodel.job import JobSpec, RankJob
from runmodel.records import JsonlWriter

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
