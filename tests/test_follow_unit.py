"""Who failed first (incastlab.follow): among processes first seen dead in the same look (the
runner looks twice a second), the one that wrote its last stderr line first is the cause; its
peers' "connection closed by peer" came after it. A worker killed by a fault is named before all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from incastlab.follow import ExperimentError, Follower, Tracked

PEER = "RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.3]:11999.\n"


class Polled:
    """A process whose poll() answers `code`: its exit code, None while it runs."""

    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


def worker(tmp_path: Path, rank: int, code: int, last_line: str | None, written: float) -> Tracked:
    """Worker `rank` on h(rank + 2), exited with `code`, its stderr last written at `written`."""
    err = tmp_path / f"worker-{rank}.stderr"
    if last_line is not None:
        err.write_text(last_line)
        os.utime(err, (written, written))
    return Tracked("worker", rank, f"h{rank + 2}", Polled(code), err)


def test_of_deaths_seen_in_one_look_the_first_to_write_its_error_is_named(tmp_path: Path) -> None:
    """ci11's run: rank 1 failed on purpose at 49.607 s, rank 0 lost its peer at 49.991 s and rank 2
    at 50.627 s; one look saw all three. Rank 0 comes first in the list, rank 1 is the cause."""
    procs = [
        worker(tmp_path, 0, 1, PEER, 1049.991),
        worker(tmp_path, 1, 3, "rank 1: failing on purpose at step 2\n", 1049.607),
        worker(tmp_path, 2, 1, PEER, 1050.627),
    ]
    with pytest.raises(ExperimentError) as err:
        Follower("job", procs, lambda: {}).check()
    assert str(err.value) == "job: worker 1 (h3) exited with code 3: rank 1: failing on purpose at step 2"


def test_a_death_that_wrote_nothing_comes_after_one_that_did(tmp_path: Path) -> None:
    """No stderr file at all: when it died is unknown, so it is not preferred over a known time."""
    procs = [worker(tmp_path, 0, 1, None, 0.0), worker(tmp_path, 1, 2, "ValueError: bad batch\n", 1000.0)]
    with pytest.raises(
        ExperimentError, match=r"worker 1 \(h3\) exited with code 2: ValueError: bad batch at step 3$"
    ):
        Follower("ring", procs, lambda: {0: 3, 1: 3}).check()


def test_a_worker_killed_by_a_fault_is_named_before_an_earlier_writer(tmp_path: Path) -> None:
    procs = [worker(tmp_path, 0, 1, PEER, 1000.0), worker(tmp_path, 1, -9, "step 2\n", 1001.0)]
    follower = Follower("ps", procs, lambda: {0: 2, 1: 2})
    follower.mark_killed(1, "kill:h3@step2")
    named = r"^ps: worker 1 \(h3\) killed by fault kill:h3@step2 at step 2$"
    with pytest.raises(ExperimentError, match=named):
        follower.check()
