"""The pieces behind the host faults, without a fabric: the watch's checks, a fault raised in the main
thread from a watcher, status.json written in place when no new file fits."""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from incastlab import hostwatch
from incastlab.session import Interrupts
from runmodel.folder import STATUS_BYTES, StrategyFolder
from runmodel.records import Status


def test_a_vanished_or_replaced_vswitchd_is_a_fault_naming_its_pid(tmp_path, monkeypatch):
    monkeypatch.setattr(hostwatch, "OVS_RUNDIR", tmp_path)
    pidfile = tmp_path / "ovs-vswitchd.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # this process is not ovs-vswitchd: /proc says so
    assert hostwatch.vswitchd_pid() is None
    watch = hostwatch.RunWatch(tmp_path, lambda why: None)
    watch.pid = 4242  # as if it had been running when the fabric came up
    said = watch.check()
    assert said is not None and said.startswith("ovs-vswitchd (pid 4242) died mid-run (none is running)")


def test_disk_short_says_when_the_floor_is_not_there(tmp_path):
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    assert hostwatch.disk_short(tmp_path / "not" / "yet", floor=1) is None  # its nearest parent counts
    said = hostwatch.disk_short(tmp_path, floor=free + 2**30)
    assert said is not None and said.startswith("results disk full: ") and str(tmp_path) in said


def test_fail_raises_in_the_main_thread_where_it_waits_and_is_dropped_in_teardown():
    class Boom(RuntimeError):
        pass

    interrupts = Interrupts()
    saved = {s: signal.getsignal(s) for s in (*Interrupts.SIGNALS, Interrupts.FAULT_SIGNAL)}
    try:
        assert interrupts.fail(Boom("early")) is False, "nothing to deliver to before install()"
        interrupts.install()
        t0 = time.monotonic()
        threading.Timer(0.2, interrupts.fail, args=(Boom("from the watcher"),)).start()
        with pytest.raises(Boom, match="from the watcher"):
            time.sleep(30)  # interrupted: the signal wakes the sleep
        assert time.monotonic() - t0 < 5
        with interrupts.shielded():
            assert interrupts.fail(Boom("in teardown")) is True
            time.sleep(0.2)  # delivered here, and dropped
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_status_is_written_in_place_when_no_new_file_fits(tmp_path, monkeypatch):
    folder = StrategyFolder(tmp_path, "ring")
    folder.write_status(Status("running"))
    assert folder.status_file.stat().st_size == STATUS_BYTES

    real = Path.write_text

    def full(self: Path, *a: object, **kw: object) -> int:
        if self.name.endswith(".tmp"):  # a new file: the disk has no block for it
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full)
    folder.write_status(Status("failed", "results disk full: 0.0 MiB free"))
    doc = json.loads(folder.status_file.read_text())
    assert doc["state"] == "failed" and doc["error"].startswith("results disk full")
    assert folder.status_file.stat().st_size == STATUS_BYTES
    assert not list(tmp_path.glob(".*.tmp"))
