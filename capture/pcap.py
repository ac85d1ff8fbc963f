"""Packet capture: one tcpdump per capture point, started for real and stopped with honest counts.

Why tcpdump and not a Python sniffer: it keeps up with the fabric on two cores and writes pcap that
analysis/ and Wireshark read. Why the care on start and stop: a capture that was not yet listening
or lost its last packets makes every pcap count in the report wrong, so `start()` waits until each
tcpdump says "listening on", and `stop()` lets the buffers drain, SIGINTs, and reads tcpdump's own
"captured / received by filter / dropped by kernel" counters into capture.json.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from runmodel.records import CapturePointReport, CaptureReport, write_json

LISTENING = "listening on"
_COUNTERS = {
    "packets_captured": re.compile(r"^(\d+) packets? captured"),
    "packets_received": re.compile(r"^(\d+) packets? received by filter"),
    "packets_dropped_kernel": re.compile(r"^(\d+) packets? dropped by kernel"),
    "packets_dropped_interface": re.compile(r"^(\d+) packets? dropped by interface"),
}


class CaptureError(RuntimeError):
    """A capture point could not start; the message is one line naming the point."""


@dataclass(frozen=True)
class CapturePoint:
    """Where to capture: `popen` runs an argv list in the interface's network namespace.

    Use Mininet's `host.popen` for a host's interface (it detaches the process) and the default
    for a switch port (switch ports live in the root namespace): its own session, so a terminal's
    Ctrl-C does not stop it before the runner has drained and counted it.

    `interrupt`, for a tcpdump on another machine (`popen` starts ssh there): SIGINTs that tcpdump
    where it runs. A signal to the local ssh would end the pipe before tcpdump's closing counters.
    """

    name: str
    iface: str
    file: Path
    popen: Callable[..., subprocess.Popen[Any]] = partial(subprocess.Popen, start_new_session=True)
    interrupt: Callable[[], object] | None = None


@dataclass
class _Running:
    """One launched tcpdump and what its stderr said so far."""

    point: CapturePoint
    proc: subprocess.Popen[Any] | None = None
    lines: list[str] = field(default_factory=list)
    listening: threading.Event = field(default_factory=threading.Event)
    eof: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None
    error: str | None = None


def parse_tcpdump_stats(lines: Sequence[str]) -> dict[str, int]:
    """tcpdump's closing counters from its stderr lines (only those it printed)."""
    found: dict[str, int] = {}
    for line in lines:
        for key, rx in _COUNTERS.items():
            m = rx.match(line.strip())
            if m:
                found[key] = int(m.group(1))
    return found


def _first_error_line(lines: Sequence[str]) -> str:
    """The most telling single line tcpdump printed, e.g. 'tcpdump: X: No such device exists'."""
    for line in lines:
        if line.startswith("tcpdump:") and LISTENING not in line:
            return line.strip()
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return "no output"


class PcapCapture:
    """Runs one tcpdump per capture point; `stop()` returns (and writes) the capture.json document.

    `base_dir` is the strategy folder: point files are reported relative to it and capture.json is
    written there. Usable as a context manager; `stop()` is idempotent and safe after a failed start.
    """

    def __init__(
        self,
        points: Sequence[CapturePoint],
        snaplen: int = 128,
        buffer_kib: int = 8192,
        bpf: str = "tcp",
        base_dir: Path | None = None,
        start_timeout: float = 10.0,
        drain_s: float = 1.0,
        stop_timeout: float = 10.0,
    ) -> None:
        names = [p.name for p in points]
        if len(set(names)) != len(names):
            raise ValueError(f"capture point names must be unique: {names}")
        self.points = list(points)
        self.snaplen = snaplen
        self.buffer_kib = buffer_kib
        self.bpf = bpf
        self.base_dir = base_dir
        self.start_timeout = start_timeout
        self.drain_s = drain_s
        self.stop_timeout = stop_timeout
        self._running: list[_Running] = []
        self._report: dict[str, Any] | None = None

    def argv(self, point: CapturePoint) -> list[str]:
        """The tcpdump command line for one point."""
        argv = [
            "tcpdump",
            "-i",
            point.iface,
            "-s",
            str(self.snaplen),
            "-B",
            str(self.buffer_kib),
            "-w",
            str(point.file),
            "--immediate-mode",
            "-n",
            "-U",
        ]
        return argv + self.bpf.split() if self.bpf else argv

    def start(self) -> None:
        """Launch every tcpdump and return once all are listening; else stop them and raise."""
        if self._running:
            raise RuntimeError("capture already started")
        try:
            self._launch_all()
        except BaseException:  # e.g. Ctrl-C while waiting: leave no tcpdump behind
            self._report = self._halt(drain=False)
            raise

    def _launch_all(self) -> None:
        """Launch one tcpdump per point, then wait for all of them to listen."""
        for point in self.points:
            point.file.parent.mkdir(parents=True, exist_ok=True)
            run = _Running(point)
            self._running.append(run)
            try:
                run.proc = point.popen(
                    self.argv(point),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            except OSError as exc:
                run.error = f"cannot launch tcpdump: {exc}"
                run.eof.set()
                continue
            run.reader = threading.Thread(
                target=self._read_stderr, args=(run,), name=f"tcpdump-stderr-{point.name}", daemon=True
            )
            run.reader.start()
        failures = []
        deadline = time.monotonic() + self.start_timeout
        for run in self._running:
            if run.error is None:
                self._wait_listening(run, deadline)
            if run.error is not None:
                failures.append(f"capture point {run.point.name!r} ({run.point.iface}): {run.error}")
        if failures:
            self._report = self._halt(drain=False)
            raise CaptureError("; ".join(failures))

    def _wait_listening(self, run: _Running, deadline: float) -> None:
        """Block until tcpdump says it listens, exits, or the deadline passes (sets run.error)."""
        while not run.listening.is_set():
            if run.eof.wait(0.02) and not run.listening.is_set():
                run.error = _first_error_line(run.lines)
                return
            if time.monotonic() > deadline:
                run.error = f"tcpdump not listening after {self.start_timeout:g} s"
                return

    @staticmethod
    def _read_stderr(run: _Running) -> None:
        """Collect tcpdump's stderr lines; flag 'listening on' and end of output."""
        assert run.proc is not None and run.proc.stderr is not None
        try:
            for raw in run.proc.stderr:
                line = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
                run.lines.append(line.rstrip("\n"))
                if LISTENING in line:
                    run.listening.set()
        finally:
            run.eof.set()

    def stop(self) -> dict[str, Any]:
        """Drain, SIGINT every tcpdump, and return the capture.json document (written to base_dir)."""
        if self._report is None:
            self._report = self._halt(drain=True)
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            write_json(self.base_dir / "capture.json", self._report)
        return self._report

    def _halt(self, drain: bool) -> dict[str, Any]:
        """End all processes (SIGINT, then SIGKILL if stuck) and build the report."""
        live = [r for r in self._running if r.proc is not None and r.proc.poll() is None]
        if drain and live:
            time.sleep(self.drain_s)  # tcpdump's last packets are still in the kernel ring
        remote = [r.point.interrupt for r in live if r.point.interrupt is not None]
        if remote:  # one ssh each: in parallel, so every capture stops within the same moment
            with ThreadPoolExecutor(max_workers=len(remote)) as pool:
                list(pool.map(lambda interrupt: interrupt(), remote))
        for run in live:
            if run.point.interrupt is None and run.proc is not None and run.proc.poll() is None:
                try:
                    run.proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.stop_timeout
        for run in self._running:
            if run.proc is None:
                continue
            try:
                run.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.wait()
                run.error = run.error or "tcpdump ignored SIGINT and was killed"
            if run.reader is not None:
                run.reader.join(timeout=5)
            if run.proc.stderr is not None:
                run.proc.stderr.close()
        return self._build_report()

    def _build_report(self) -> dict[str, Any]:
        """The capture.json document (runmodel.records.CaptureReport) from what each tcpdump printed."""
        points = []
        for point in self.points:
            run = next((r for r in self._running if r.point is point), None)
            points.append(self._point_entry(point, run))
        return CaptureReport(points).to_dict()

    def _point_entry(self, point: CapturePoint, run: _Running | None) -> CapturePointReport:
        """One point: tcpdump's counters, complete only if nothing was lost."""
        error = "never started" if run is None else run.error
        stats: dict[str, int] = {}
        if run is not None:
            stats = parse_tcpdump_stats(run.lines)
            if error is None and "packets_captured" not in stats:
                error = f"tcpdump ended without its counters: {_first_error_line(run.lines)}"
            rc = run.proc.returncode if run.proc is not None else None
            if error is None and rc not in (0, None):
                error = f"tcpdump exited with code {rc}: {_first_error_line(run.lines)}"
        dropped = stats.get("packets_dropped_kernel", 0) + stats.get("packets_dropped_interface", 0)
        complete = (
            error is None
            and dropped == 0
            and stats.get("packets_received") is not None
            and stats.get("packets_captured") == stats.get("packets_received")
        )
        return CapturePointReport(
            name=point.name,
            iface=point.iface,
            file=self._rel(point.file),
            packets_captured=stats.get("packets_captured"),
            packets_received=stats.get("packets_received"),
            packets_dropped_kernel=stats.get("packets_dropped_kernel"),
            complete=complete,
            error=error,
            packets_dropped_interface=stats.get("packets_dropped_interface"),
        )

    def _rel(self, file: Path) -> str:
        """A point's file as written in capture.json: relative to base_dir when under it."""
        if self.base_dir is not None:
            try:
                return file.resolve().relative_to(self.base_dir.resolve()).as_posix()
            except ValueError:
                pass
        return str(file)

    def __enter__(self) -> PcapCapture:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
