"""An `incastlab` command running in the background, followed through its own progress lines.

The command runs in its own session (start_new_session=True), so a signal can go to its whole
process group as a terminal's Ctrl-C would (os.killpg). Reader threads take stdout and stderr
line by line as they come, each line stamped with the monotonic time it arrived, so a test can
wait for "the run says it got there" and check afterwards that it had not moved on yet when the
signal went out. Progress lines on stderr look like `[incastlab HH:MM:SS] message`.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from tests.conftest import ROOT, incastlab_cmd
from tests.waiting import wait_for


class Running:
    """One `incastlab ARGS` process with its output collected as it arrives."""

    def __init__(self, args: list[str]) -> None:
        self.argv = incastlab_cmd() + args
        self.lines: list[tuple[float, str, str]] = []  # (arrival, "stdout"|"stderr", line)
        self.lock = threading.Lock()
        self.t_start = time.monotonic()
        self.t_signal: float | None = None
        self.signal: int | None = None
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.readers = [
            threading.Thread(target=self._read, args=(s, n), daemon=True)
            for s, n in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr"))
        ]
        for t in self.readers:
            t.start()

    def _read(self, stream: IO[str], name: str) -> None:
        for line in stream:
            with self.lock:
                self.lines.append((time.monotonic(), name, line.rstrip("\n")))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def seen(self, pattern: str, before: float | None = None) -> tuple[float, str] | None:
        """(arrival, line) of the first line of either stream matching `pattern` (and before `before`)."""
        rx = re.compile(pattern)
        with self.lock:
            for t, _name, line in self.lines:
                if rx.search(line) and (before is None or t < before):
                    return t, line
        return None

    def wait_line(self, pattern: str, timeout: float) -> tuple[float, str]:
        """Wait until a line matches `pattern`; fail at once, with the output, if the command ends first."""

        def hit() -> tuple[float, str] | None:
            found = self.seen(pattern)
            if found is None and self.proc.poll() is not None and not any(t.is_alive() for t in self.readers):
                raise AssertionError(
                    f"`{' '.join(self.argv[1:])}` exited {self.proc.returncode} before a "
                    f"line matching {pattern!r}:\n{self.tail()}"
                )
            return found

        try:
            return wait_for(hit, timeout, f"a line matching {pattern!r}", interval=0.02)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None

    def send(self, sig: int = signal.SIGINT, group: bool = True) -> float:
        """Send `sig` to the process group (Ctrl-C) or to the command only (kill -9 PID); returns when."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)
        self.t_signal, self.signal = time.monotonic(), sig
        return self.t_signal

    def wait_exit(self, guard: float = 120) -> tuple[int, float]:
        """(exit code, seconds from the signal to the exit); kills the group after `guard` seconds."""
        try:
            code = self.proc.wait(timeout=guard)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise AssertionError(
                f"still running {guard:g} s after signal {self.signal}:\n{self.tail()}"
            ) from None
        t_exit = time.monotonic()
        for t in self.readers:  # a child that inherited a pipe may hold it open: do not wait for ever
            t.join(timeout=5)
        return code, t_exit - (self.t_signal if self.t_signal is not None else self.t_start)

    def kill_group(self) -> None:
        """SIGKILL the whole process group (a test's last resort)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    @contextmanager
    def killed_on_error(self) -> Iterator[None]:
        """Kill the process group if the block raises (a timeout, a failed check, Ctrl-C), then let the
        error go on: a failed test leaves no run behind."""
        try:
            yield
        except BaseException:
            self.kill_group()
            raise

    def text(self, stream: str) -> str:
        """Everything read so far from "stdout" or "stderr"."""
        with self.lock:
            return "\n".join(line for _t, name, line in self.lines if name == stream)

    def tail(self, n: int = 25) -> str:
        """The last `n` lines of both streams, each with its arrival relative to the start (and signal)."""
        with self.lock:
            rows = self.lines[-n:]
        out = []
        for t, name, line in rows:
            rel = f"+{t - self.t_start:6.2f}s"
            if self.t_signal is not None:
                rel += f" (sig{t - self.t_signal:+6.2f}s)"
            out.append(f"{rel} {name}: {line}")
        return "\n".join(out)


EXIT_WITHIN_S = 15  # a Ctrl-C must end the command this soon, wherever it lands


def interrupt_at(
    run: Running,
    rng: random.Random,
    at: str,
    moved_on: str | None,
    max_delay: float,
    sig: int = signal.SIGINT,
    group: bool = True,
    before_signal: Callable[[], None] | None = None,
) -> tuple[int, float]:
    """Wait for the line `at`, then a random moment up to `max_delay` s, then signal the command.

    Returns (exit code, seconds from the signal to the exit) and prints them with the output's
    tail. Fails if the line `moved_on` (the run has left the window) had arrived before the signal.
    `before_signal` runs just before the signal (a quick check that the moment is what it seems).
    """
    with run.killed_on_error():
        run.wait_line(at, 300)
        delay = rng.uniform(0.0, max_delay)
        time.sleep(delay)  # the run is inside the window [at, moved_on) for longer than max_delay
        if before_signal is not None:
            before_signal()
        t_sig = run.send(sig, group=group)
        code, secs = run.wait_exit(guard=120)
    print(f"signal {sig} {delay:.3f} s after {at!r}: exit {code} after {secs:.2f} s\n{run.tail()}")
    if moved_on is not None:
        late = run.seen(moved_on, before=t_sig)
        assert late is None, f"the signal came after {late[1]!r}: not the moment under test\n{run.tail()}"
    return code, secs


def assert_exit_130_soon(code: int, secs: float, run: Running) -> None:
    assert code == 130, f"exit {code}, not 130\n{run.tail()}"
    assert secs <= EXIT_WITHIN_S, f"exited {secs:.1f} s after the signal (> {EXIT_WITHIN_S} s)\n{run.tail()}"
