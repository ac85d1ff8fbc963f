"""Soak (a benchmark, not a test): short `compare` runs back to back, watching for leaks.

After every run it counts what an incastlab run must not leave behind (marked processes, veths,
bridges, OVS QoS rows) and what would grow if something leaked slowly: ovs-vswitchd's open file
descriptors and memory, the machine's process and interface counts. The controller's memory at
the end of each run comes from its own process while the run is up.

    python -m bench.soak [--runs 20] [--out results/soak.json] [-- extra compare args]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from capture.cpu import find_process
from incastlab.cleanup import find_leftovers


def _rss_kib(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int | None) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd")) if pid else 0
    except OSError:
        return 0


def machine_counts() -> dict[str, int]:
    """What a leak would make grow."""
    vswitchd = find_process("ovs-vswitchd")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n")
    return {
        "processes": sum(1 for e in Path("/proc").iterdir() if e.name.isdigit()),
        "links": links,
        "vswitchd_fds": _fds(vswitchd),
        "vswitchd_rss_kib": _rss_kib(vswitchd),
    }


def controller_peak_rss(stop: threading.Event, out: dict[str, int]) -> None:
    """Sample the running controller's memory until told to stop."""
    while not stop.is_set():
        for pid in find_leftovers().pids:
            try:
                if b"controller.main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out["controller_rss_kib"] = max(out.get("controller_rss_kib", 0), _rss_kib(pid))
            except OSError:
                continue
        stop.wait(1.0)


def main(argv: list[str] | None = None) -> int:
    """Run the soak; print one line per run and a verdict; write JSON."""
    ap = argparse.ArgumentParser(prog="bench.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default="results/soak.json")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="extra arguments for compare (after --)")
    args = ap.parse_args(argv)
    extra = [a for a in args.extra if a != "--"] or ["--steps", "2", "--workers", "3", "--capture", "ps-port"]
    exe = Path(sys.executable).with_name("incastlab")
    rows: list[dict[str, Any]] = []
    base = machine_counts()
    print(
        f"{'run':>4}{'rc':>4}{'secs':>7}{'left':>7}{'procs':>7}{'links':>7}{'ovs fds':>9}{'ovs MiB':>9}"
        f"{'ctl MiB':>9}"
    )
    for k in range(1, args.runs + 1):
        stop, peak = threading.Event(), {}
        watcher = threading.Thread(target=controller_peak_rss, args=(stop, peak), daemon=True)
        watcher.start()
        t0 = time.monotonic()
        proc = subprocess.run(
            [str(exe), "compare", "--results", "results/soak"] + extra, capture_output=True, text=True
        )
        secs = time.monotonic() - t0
        stop.set()
        watcher.join()
        left = find_leftovers()
        row = {
            "run": k,
            "rc": proc.returncode,
            "seconds": round(secs, 1),
            "leftovers": left.describe(),
            "clean": left.empty(),
            **machine_counts(),
            **peak,
        }
        if proc.returncode != 0:
            row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        rows.append(row)
        print(
            f"{k:>4}{row['rc']:>4}{secs:>7.1f}{'no' if left.empty() else 'YES':>7}{row['processes']:>7}"
            f"{row['links']:>7}{row['vswitchd_fds']:>9}{row['vswitchd_rss_kib'] / 1024:>9.1f}"
            f"{row.get('controller_rss_kib', 0) / 1024:>9.1f}",
            flush=True,
        )
        if not left.empty():
            subprocess.run([str(exe), "clean"], capture_output=True)
    failures = [r for r in rows if r["rc"] != 0]
    leaks = [r for r in rows if not r["clean"]]
    end = machine_counts()
    verdict = {
        "runs": len(rows),
        "failures": len(failures),
        "runs_with_leftovers": len(leaks),
        "processes_delta": end["processes"] - base["processes"],
        "links_delta": end["links"] - base["links"],
        "vswitchd_fds_delta": end["vswitchd_fds"] - base["vswitchd_fds"],
        "vswitchd_rss_delta_kib": end["vswitchd_rss_kib"] - base["vswitchd_rss_kib"],
    }
    print(json.dumps(verdict))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"verdict": verdict, "runs": rows, "baseline": base}, indent=1))
    return 0 if not failures and not leaks else 1


if __name__ == "__main__":
    sys.exit(main())
