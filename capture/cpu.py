"""CPU sampler: how busy each core and the software switch were, once a second, as JSON lines.

The fidelity verdict needs it: a userspace OVS that gets no CPU drops packets no queue counts and
stretches the gaps between packets it forwards. /proc/stat's per-core jiffies and ovs-vswitchd's
own utime+stime, differenced over each interval. For a server of a cluster the same readings come
from that machine through one long-lived command (StreamedReadings: ssh running a loop there).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

from runmodel.records import CpuSample

CLK_TCK = os.sysconf("SC_CLK_TCK")


def core_jiffies(stat_text: str) -> list[tuple[int, int]]:
    """(busy, total) jiffies of each core from /proc/stat (busy = all but idle and iowait)."""
    out = []
    for line in stat_text.splitlines():
        words = line.split()
        if words and words[0].startswith("cpu") and words[0] != "cpu":
            vals = [int(v) for v in words[1:9]]
            idle = vals[3] + vals[4]
            out.append((sum(vals) - idle, sum(vals)))
    return out


def process_jiffies(pid: int) -> int | None:
    """utime + stime of a process (None when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


def find_process(name: str) -> int | None:
    """The pid of the first process called `name` (ovs-vswitchd), or None."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    return int(entry.name)
            except OSError:
                continue
    return None


def stream_script(interval: float = 1.0) -> str:
    """What a server runs for StreamedReadings: every `interval` its cores' /proc/stat lines, then
    ovs-vswitchd's utime and stime, then a line that ends the block."""
    return (
        "pid=$(cat /var/run/openvswitch/ovs-vswitchd.pid 2>/dev/null); "
        "while :; do grep '^cpu[0-9]' /proc/stat; "
        'echo "switch $(cut -d" " -f14,15 /proc/$pid/stat 2>/dev/null)"; echo end; '
        f"sleep {interval:g}; done"
    )


class StreamedReadings:
    """(/proc/stat text, switch jiffies or None) of another machine, one block per interval, from
    one command that stays up for the whole window (`argv`: ssh to the server running
    stream_script()); one ssh per window, not one per second. close() ends it (the remote loop ends
    at its next write)."""

    def __init__(self, argv: list[str]) -> None:
        self.blocks: queue.Queue[tuple[str, int | None]] = queue.Queue()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        threading.Thread(target=self._read, name="cpu-stream", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        lines: list[str] = []
        for line in self.proc.stdout:
            if line.strip() != "end":
                lines.append(line)
                continue
            words = lines[-1].split() if lines and lines[-1].startswith("switch") else []
            sw = int(words[1]) + int(words[2]) if len(words) == 3 else None
            self.blocks.put(("".join(lines), sw))
            lines = []

    def next(self, halt: threading.Event) -> tuple[str, int | None] | None:
        """The next block, or None once `halt` is set or the command ended."""
        while not halt.is_set():
            try:
                return self.blocks.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and self.blocks.empty():
                    return None
        return None

    def close(self) -> None:
        """End the command here."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class CpuSampler:
    """Background thread writing one CpuSample line per interval to `out`: this machine's, or from
    `source` (StreamedReadings) another's, a line per block it sends."""

    def __init__(
        self,
        out: Path,
        interval: float = 1.0,
        switch_process: str = "ovs-vswitchd",
        source: StreamedReadings | None = None,
    ) -> None:
        self.out = out
        self.interval = interval
        self.source = source
        self.pid = find_process(switch_process) if source is None else None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why sampling ended early (the file could not be written)

    def _reading(self, first: bool = False) -> tuple[str, int | None] | None:
        """The next (/proc/stat text, switch jiffies): here, at once when `first` else an interval
        from now; or the source's next block. None once halted."""
        if self.source is not None:
            return self.source.next(self._halt)
        if not first and self._halt.wait(self.interval):
            return None
        return Path("/proc/stat").read_text(), process_jiffies(self.pid) if self.pid else None

    def start(self) -> None:
        """Start sampling (the first line comes one interval from now)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            self._sample_until_halted()
        except OSError as exc:  # the results disk is full: the lines so far stay
            self.error = f"{self.out.name}: {exc}"

    def _sample_until_halted(self) -> None:
        first = self._reading(first=True)
        if first is None:
            return
        prev_cores, prev_sw = core_jiffies(first[0]), first[1]
        prev_t = time.monotonic()
        with self.out.open("a", encoding="utf-8") as f:
            while (reading := self._reading()) is not None:
                cores, sw = core_jiffies(reading[0]), reading[1]
                now = time.monotonic()
                busy = [
                    round((b1 - b0) / (t1 - t0), 3) if t1 > t0 else 0.0
                    for (b0, t0), (b1, t1) in zip(prev_cores, cores, strict=False)
                ]
                share = (
                    round((sw - prev_sw) / CLK_TCK / (now - prev_t), 3)
                    if sw is not None and prev_sw is not None and now > prev_t
                    else None
                )
                f.write(json.dumps(CpuSample(time.time(), busy, share).to_dict()) + "\n")
                f.flush()
                prev_cores, prev_sw, prev_t = cores, sw, now

    def stop(self) -> None:
        """Stop sampling (and the source's command)."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.source is not None:
            self.source.close()
