"""Regenerate tests/data/incast-small/ from a REAL incast sweep: the fabric, the servers, tcpdump.

    python tests/make_incast_fixture.py                 # run it, trim it, write tests/data/incast-small/
    python tests/make_incast_fixture.py --from RUN_DIR  # trim an existing sweep's run folder instead

The sweep is `incastlab incast` with COMMAND below (the base and the 1 ms minimum RTO, N = 1 and 4
senders, 3 rounds of 16 KiB blocks: small pcaps) on the incast fabric. It builds a network, so it
runs under `flock LOCK`: one network experiment on this machine at a time. Nothing is made up: the
copy keeps every file the analysis (analysis.incast) and the report read: config, plan, topology,
each curve's settings and servers, each point's job, client log, status, kernel counters, capture
report, queue and CPU samples, pcaps, and the run's own incast.json and timeline.json. It drops what
they do not read: the controller's record and log, stderr files, the servers' logs, the report.

The pcaps keep each packet's Ethernet, IP and TCP headers (tests/make_run_fixture.trim_pcap: the
payload bytes tcpdump kept after them go, the records' original lengths stay). A check then computes
incast.json from the trimmed copy and from the whole run (analysis.incast.analyze_sweep, in temporary
copies) and requires every row to be equal: the copy holds every input of every figure.
tests/test_analysis_incast.py's expectations were read off the fixture by hand (its docstring says
how): after regenerating it, read them again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.make_run_fixture import trim_pcap  # noqa: E402 - after the path that makes `tests` importable

FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "incast-small"
LOCK = "/tmp/incastlab-fabric.lock"
COMMAND = ["incast", "--senders", "1,4", "--rounds", "3", "--sru", "16k", "--lines", "base,rto_min_ms=1"]
SKIP_RUN = ("controller.jsonl", "controller.log", "report.html", "report.md", "figures")  # not read again
SKIP_LINE = ("*.stderr", "server-*.jsonl")  # the processes' stderr and the servers' own logs
SKIP_POINT = ("*.stderr",)
MAX_BYTES = 400_000  # the fixture must stay a few hundred KB


def run_real(results: Path) -> Path:
    """`incastlab COMMAND --results results` under the lock; the run folder it wrote."""
    cmd = ["flock", LOCK, sys.executable, "-m", "incastlab.cli", *COMMAND, "--results", str(results)]
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, timeout=1800)
    sys.stderr.write(proc.stderr[-4000:])
    if proc.returncode != 0:
        raise SystemExit(f"incastlab incast exited {proc.returncode}")
    return (results / "latest").resolve()


def _copy_files(src: Path, dest: Path, skip: tuple[str, ...]) -> None:
    """The files (not folders) of src into dest, but those matching a pattern of skip."""
    dropped = {p for pattern in skip for p in src.glob(pattern)}
    for item in sorted(src.iterdir()):
        if item.is_file() and item not in dropped:
            shutil.copyfile(item, dest / item.name)


def copy_trimmed(run: Path, dest: Path) -> None:
    """`run` into a fresh `dest` without what nothing reads again, pcaps trimmed to their headers."""
    from runmodel.incast import IncastFolder

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    folder = IncastFolder(run)
    cfg = folder.incast_config()
    _copy_files(run, dest, SKIP_RUN)
    for line in cfg.curves:
        lf = folder.line(line)
        if not lf.path.is_dir():
            continue
        out = dest / lf.path.name
        out.mkdir()
        _copy_files(lf.path, out, SKIP_LINE)
        for n in cfg.senders:
            pf = lf.point(n)
            if not pf.path.is_dir():
                continue
            pout = out / pf.path.name
            pout.mkdir()
            _copy_files(pf.path, pout, SKIP_POINT)
            if pf.pcap_dir.is_dir():
                (pout / "pcap").mkdir()
                for pcap in sorted(pf.pcap_dir.glob("*.pcap")):
                    trim_pcap(pcap, pout / "pcap" / pcap.name)


def check_nothing_lost(run: Path, fixture: Path) -> None:
    """incast.json computed from the trimmed copy equals the one computed from the whole run (both by
    today's analysis.incast, each in a temporary copy): the copy keeps every input of every figure."""
    from analysis.incast import analyze_sweep

    with tempfile.TemporaryDirectory() as tmp:
        whole, trimmed = Path(tmp) / "whole", Path(tmp) / "trimmed"
        shutil.copytree(run, whole)
        shutil.copytree(fixture, trimmed)
        want, got = analyze_sweep(whole).to_dict(), analyze_sweep(trimmed).to_dict()
        tl_want = json.loads((whole / "timeline.json").read_text())
        tl_got = json.loads((trimmed / "timeline.json").read_text())
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
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--from", dest="run", type=Path, help="an existing sweep's run folder (default: run one)")
    p.add_argument("--out", type=Path, default=FIXTURE_DIR, help=f"default: {FIXTURE_DIR}")
    p.add_argument("--keep", type=Path, help="run into this results folder and keep it (default: a temp dir)")
    args = p.parse_args(argv)
    tmp = None
    if args.run is None:
        results = args.keep or Path(tmp := tempfile.mkdtemp(prefix="incastlab-incast-fixture-"))
        run = run_real(results)
    else:
        run = args.run.resolve()
    copy_trimmed(run, args.out)
    check_nothing_lost(run, args.out)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {size / 1e3:.0f} KB from {run}", file=sys.stderr)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if size > MAX_BYTES:
        raise SystemExit(f"fixture is {size / 1e3:.0f} KB, more than {MAX_BYTES / 1e3:.0f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
