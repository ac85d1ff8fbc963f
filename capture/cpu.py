"""CPU sampler: how busy each core and the software switch were, once a second, as JSON lines.

The fidelity verdict needs it: a userspace OVS that gets no CPU drops packets no queue counts and
stretches the gaps between packets it forwards. /proc/stat's per-core jiffies and ovs-vswitchd's
own utime+stime, differenced over each interval.
"""

from __future__ import annotations

import json
import os
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


class CpuSampler:
    """Background thread writing one CpuSample line per interval to `out`."""

    def __init__(self, out: Path, interval: float = 1.0, switch_process: str = "ovs-vswitchd") -> None:
        self.out = out
        self.interval = interval
        self.pid = find_process(switch_process)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why sampling ended early (the file could not be written)

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
        prev_cores = core_jiffies(Path("/proc/stat").read_text())
        prev_sw = process_jiffies(self.pid) if self.pid else None
        prev_t = time.monotonic()
        with self.out.open("a", encoding="utf-8") as f:
            while not self._halt.wait(self.interval):
                cores = core_jiffies(Path("/proc/stat").read_text())
                sw = process_jiffies(self.pid) if self.pid else None
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
        """Stop sampling."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
