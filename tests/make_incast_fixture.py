"""Regenerate tests/data/incast-small/ from a REAL incast sweep: the fabric, the servers, tcpdump.

    python tests/make_incast_fixture.py                 # run it, trim it, write tests/data/incast-small/
    python tests/make_incast_fixture.py --from RUN_DIR  # trim an existing sweep's run folder instead

The sweep is `incastlab incast` with COMMAND below (the base and the 1 ms minimum RTO, N = 1 and 4
senders, 3 rounds of 16 KiB blocks: small pcaps) on the incast fabric. It builds a network, so it
runs under `flock` (tests/make_run_fixture.LOCK): one network experiment on this machine at a time.
Nothing is made up: the copy keeps every file the analysis (analysis.incast) and the report read:
config, plan, topology, each curve's settings and servers, each point's job, client log, status,
kernel counters, capture report, queue and CPU samples, pcaps, and the run's own incast.json and
timeline.json. It drops what they do not read: the controller's record and log, stderr files, the
servers' logs, the report.

The pcaps keep each packet's Ethernet, IP and TCP headers (tests/make_run_fixture.trim_pcap: the
payload bytes tcpdump kept after them go, the records' original lengths stay). A check then computes
incast.json from the trimmed copy and from the whole run (analysis.incast.analyze_sweep, in temporary
copies) and requires every row to be equal: the copy holds every input of every figure.
tests/test_analysis_incast.py's expectations were read off the fixture by hand (its docstring says
how): after regenerating it, read them again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.make_run_fixture import (  # noqa: E402 - after the path that makes `tests` importable
    copy_files,
    copy_folder,
    copy_pcaps,
    fresh,
    from_both,
    regenerate,
)

FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "incast-small"
COMMAND = ["incast", "--senders", "1,4", "--rounds", "3", "--sru", "16k", "--lines", "base,rto_min_ms=1"]
SKIP_RUN = ("controller.jsonl", "controller.log", "report.html", "report.md", "figures")  # not read again
SKIP_LINE = ("*.stderr", "server-*.jsonl")  # the processes' stderr and the servers' own logs
SKIP_POINT = ("*.stderr",)
MAX_BYTES = 400_000  # the fixture must stay a few hundred KB


def copy_trimmed(run: Path, dest: Path) -> None:
    """`run` into a fresh `dest` without what nothing reads again, pcaps trimmed to their headers."""
    from runmodel.incast import IncastFolder

    fresh(dest)
    folder = IncastFolder(run)
    cfg = folder.incast_config()
    copy_files(run, dest, SKIP_RUN)
    for line in cfg.curves:
        lf = folder.line(line)
        out = copy_folder(lf.path, dest, SKIP_LINE)
        if out is None:
            continue
        for n in cfg.senders:
            pf = lf.point(n)
            pout = copy_folder(pf.path, out, SKIP_POINT)
            if pout is not None:
                copy_pcaps(pf.path, pout)


def check_nothing_lost(run: Path, fixture: Path) -> None:
    """incast.json computed from the trimmed copy equals the one computed from the whole run (both by
    today's analysis.incast, each in a temporary copy): the copy keeps every input of every figure."""
    from analysis.incast import analyze_sweep

    def incast_and_timeline(folder: Path) -> tuple[dict, object]:
        return analyze_sweep(folder).to_dict(), json.loads((folder / "timeline.json").read_text())

    (want, tl_want), (got, tl_got) = from_both(run, fixture, incast_and_timeline)
    diff = [
        f"{a['line']} N={a['senders']}: {k}"
        for a, b in zip(want["rows"], got["rows"], strict=True)
        for k in a
        if a[k] != b.get(k)
    ]
    if diff or want["goals"] != got["goals"] or tl_want != tl_got:
        raise SystemExit(f"the trimmed copy's incast.json differs from the whole run's: {diff}")


def main(argv: list[str] | None = None) -> int:
    """Run (or take) a sweep, copy it trimmed into --out, check that nothing the analysis reads was lost."""
    return regenerate(argv, __doc__, COMMAND, FIXTURE_DIR, MAX_BYTES, copy_trimmed, check_nothing_lost)


if __name__ == "__main__":
    raise SystemExit(main())
