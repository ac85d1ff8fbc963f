"""The dashboard API under load during a run: does measuring slow what it measures?

CLIENTS threads poll every /api/* path of the controller, each a round of them every ROUND_S (the
dashboard polls one round a second), in windows of WINDOW_S switched on and off through the run of a
default-fabric ring. The latencies are the clients' own clocks; each step's iteration time is the
worker's log, and a step counts as loaded or unloaded when it lies wholly inside an on or an off
window, so drift over the run falls on both alike. The run-to-run noise a step time has without load
is measured in the same run: the interquartile range of the unloaded steps.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.running import Running

pytestmark = pytest.mark.integration
CLIENTS = 16
ROUND_S = 1.0  # each client: a round of every path a second, as the dashboard polls
WINDOW_S = 2.0  # load on for 2 s, off for 2 s, ...
PATHS = ("/api/ports", "/api/queues", "/api/phase", "/api/events", "/api/topology", "/api/timeseries")
BASE = "http://127.0.0.1:8080"


@dataclass
class Load:
    """The clients, the on/off windows and every request's (latency s, error or None)."""

    on: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    windows: list[tuple[float, float, bool]] = field(default_factory=list)  # (t0, t1, loaded)
    results: list[tuple[float, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self) -> None:
        while not self.stop.is_set():
            if not self.on.wait(0.05):
                continue
            t_round = time.monotonic()
            for path in PATHS:
                query = f"?since={time.time() - 2}" if path == "/api/timeseries" else ""
                t0 = time.perf_counter()
                error = None
                try:
                    with urllib.request.urlopen(BASE + path + query, timeout=5) as resp:  # noqa: S310
                        json.loads(resp.read())
                        if resp.status != 200:
                            error = f"{path}: HTTP {resp.status}"
                except Exception as exc:  # noqa: BLE001 - every failure is counted, none hidden
                    error = f"{path}: {type(exc).__name__}: {exc}"
                with self.lock:
                    self.results.append((time.perf_counter() - t0, error))
            time.sleep(max(0.0, ROUND_S - (time.monotonic() - t_round)))

    def switch(self, finished: threading.Event) -> None:
        """Load on and off in windows of WINDOW_S until `finished`."""
        loaded = False
        while not finished.is_set():
            loaded = not loaded
            (self.on.set if loaded else self.on.clear)()
            t0 = time.time()
            finished.wait(WINDOW_S)
            self.windows.append((t0, time.time(), loaded))
        self.on.clear()


def step_times(folder: Path, windows: list[tuple[float, float, bool]]) -> dict[bool, list[float]]:
    """Worker 0's iteration times of the steps that lie wholly inside a loaded / unloaded window."""
    out: dict[bool, list[float]] = {True: [], False: []}
    for line in (folder / "ring" / "worker-0.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "step" not in row or row["step"] <= 1:  # the first step holds the start-up
            continue
        for t0, t1, loaded in windows:
            if t0 <= row["t_start"] and row["t_end"] <= t1:
                out[loaded].append(row["t_end"] - row["t_start"])
    return out


def test_the_api_under_load_answers_every_request_and_does_not_slow_the_run(clean_host, tmp_path):
    load = Load()
    finished = threading.Event()
    clients = [threading.Thread(target=load.client, daemon=True) for _ in range(CLIENTS)]
    switcher = threading.Thread(target=load.switch, args=(finished,), daemon=True)
    run = Running(["compare", "--strategies", "ring", "--steps", "30", "--results", str(tmp_path)])
    try:
        with run.killed_on_error():
            run.wait_line(r"ring: step [1-9]", 300)
            for t in [*clients, switcher]:
                t.start()
            run.wait_line(r"ring: done", 300)
            finished.set()
            switcher.join()
            code, _ = run.wait_exit(guard=300)
    finally:
        finished.set()
        load.stop.set()
    for t in clients:
        t.join(timeout=10)
    assert code == 0, run.tail()

    latencies = sorted(lat for lat, _ in load.results)
    errors = [e for _, e in load.results if e]
    p50, p99 = latencies[len(latencies) // 2], latencies[int(0.99 * (len(latencies) - 1))]
    on_s = sum(t1 - t0 for t0, t1, loaded in load.windows if loaded)
    times = step_times((tmp_path / "latest").resolve(), load.windows)
    q1, med_off, q3 = statistics.quantiles(times[False], n=4)
    med_on = statistics.median(times[True])
    print(
        f"{len(latencies)} requests in {on_s:.1f} s of load ({len(latencies) / on_s:.0f}/s, {CLIENTS} "
        f"clients): p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, {len(errors)} errors; ring step "
        f"unloaded median {med_off:.3f} s (IQR {q1:.3f}-{q3:.3f}, n={len(times[False])}), loaded "
        f"{med_on:.3f} s (n={len(times[True])})"
    )
    assert errors == [], errors[:5]
    assert len(latencies) >= CLIENTS * len(PATHS) * on_s / ROUND_S / 4, "the load was not applied"
    assert p99 < 1.0, f"p99 {p99:.3f} s: a dashboard polling once a second would fall behind"
    assert min(len(times[True]), len(times[False])) >= 5, times
    assert med_on <= q3, (
        f"loaded steps' median {med_on:.3f} s beyond the unloaded steps' IQR {q1:.3f}-{q3:.3f}"
    )
