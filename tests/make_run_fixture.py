"""Regenerate tests/data/run-small/ from a REAL run: the runner, the fabric, PyTorch, tcpdump.

    python tests/make_run_fixture.py                 # run it, trim it, write tests/data/run-small/
    python tests/make_run_fixture.py --from RUN_DIR  # trim an existing run folder instead

The run is `incastlab compare` with COMMAND below (PS and ring, 3 workers, 3 steps, every host
captured) on the default fabric. It builds a network, so it runs under `flock LOCK`: one network
experiment on this machine at a time. Nothing is made up: the copy keeps every file the summary
and the report read (config, plan, topology, each strategy's worker logs, PS log, status,
controller samples, queue samples, capture report, host counters, pcaps, ...); it drops what they
do not read (the whole-run controller record and log, stderr files, the report itself).

The pcaps keep each packet's Ethernet, IP and TCP headers (options included) and lose the payload
bytes tcpdump kept after them (the records' original lengths stay, and no analysis reads payload).
Every other file is the run's own, summary.json included. A check then computes summary.json from
the trimmed copy and from the whole run (analysis.summary.summarize, in temporary copies) and
requires them to be equal: the copy holds every input of every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "run-small"
LOCK = "/tmp/incastlab-fabric.lock"  # one network experiment on this machine at a time
COMMAND = ["compare", "--strategies", "ps,ring", "--steps", "3", "--workers", "3", "--capture", "all"]
SKIP_RUN = ("controller.jsonl", "controller.log", "report.html", "report.md", "figures")  # not read again
SKIP_STRATEGY = ("*.stderr",)  # the processes' stderr: nothing reads it after the run
MAX_BYTES = 6_000_000  # the fixture must stay a few MB


def run_real(results: Path, command: list[str] = COMMAND) -> Path:
    """`incastlab command --results results` under the lock; the run folder it wrote."""
    cmd = ["flock", LOCK, sys.executable, "-m", "incastlab.cli", *command, "--results", str(results)]
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, timeout=1800)
    sys.stderr.write(proc.stderr[-4000:])
    if proc.returncode != 0:
        raise SystemExit(f"incastlab {command[0]} exited {proc.returncode}")
    return (results / "latest").resolve()


def trim_pcap(src: Path, dest: Path) -> None:
    """Copy a classic pcap keeping of each packet its headers only (Ethernet, IPv4 and TCP with their
    options); a torn last record is left out, as the reader skips it."""
    data = src.read_bytes()
    if len(data) < 24:
        shutil.copyfile(src, dest)
        return
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out = bytearray(data[:24])
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack(order + "IIII", data[off : off + 16])
        pkt = data[off + 16 : off + 16 + incl]
        if len(pkt) < incl:
            break
        keep = min(incl, header_bytes(pkt))
        out += struct.pack(order + "IIII", sec, frac, keep, orig) + pkt[:keep]
        off += 16 + incl
    dest.write_bytes(bytes(out))


def header_bytes(pkt: bytes) -> int:
    """Bytes of the Ethernet + IPv4 + TCP headers at the start of a frame (the frame if not TCP/IPv4)."""
    if len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
        return len(pkt)
    ihl = (pkt[14] & 0x0F) * 4
    if pkt[23] != 6 or len(pkt) < 14 + ihl + 13:
        return len(pkt)
    return 14 + ihl + (pkt[14 + ihl + 12] >> 4) * 4


def copy_files(src: Path, dest: Path, skip: tuple[str, ...]) -> None:
    """The files (not folders) of src into dest, but those matching a glob pattern of skip."""
    dropped = {p for pattern in skip for p in src.glob(pattern)}
    for item in sorted(src.iterdir()):
        if item.is_file() and item not in dropped:
            shutil.copyfile(item, dest / item.name)


def copy_folder(src: Path, parent: Path, skip: tuple[str, ...]) -> Path | None:
    """src's files, but those of skip, into a new folder of src's name under parent; that folder, or
    None (nothing made) when src is not a folder."""
    if not src.is_dir():
        return None
    out = parent / src.name
    out.mkdir()
    copy_files(src, out, skip)
    return out


def copy_pcaps(src: Path, dest: Path) -> None:
    """src/pcap/*.pcap, trimmed to their headers, into dest/pcap (nothing if src has no pcap folder)."""
    if (src / "pcap").is_dir():
        (dest / "pcap").mkdir()
        for pcap in sorted((src / "pcap").glob("*.pcap")):
            trim_pcap(pcap, dest / "pcap" / pcap.name)


def fresh(dest: Path) -> None:
    """dest as an empty folder (what was there goes)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)


def copy_trimmed(run: Path, dest: Path) -> None:
    """`run` into a fresh `dest` without what nothing reads again (SKIP_RUN, SKIP_STRATEGY), pcaps
    trimmed to their headers."""
    fresh(dest)
    strategies = json.loads((run / "config.json").read_text())["strategies"]
    copy_files(run, dest, SKIP_RUN)
    for strategy in strategies:
        out = copy_folder(run / strategy, dest, SKIP_STRATEGY)
        if out is not None:
            copy_pcaps(run / strategy, out)


def from_both(run: Path, fixture: Path, compute: Callable[[Path], T]) -> tuple[T, T]:
    """compute() of the whole run and of the trimmed copy, each on a temporary copy (the analysis
    writes into the folder it reads, and neither original may change)."""
    with tempfile.TemporaryDirectory() as tmp:
        whole, trimmed = Path(tmp) / "whole", Path(tmp) / "trimmed"
        shutil.copytree(run, whole)
        shutil.copytree(fixture, trimmed)
        return compute(whole), compute(trimmed)


def check_nothing_lost(run: Path, fixture: Path) -> None:
    """summary.json computed from the trimmed copy equals the one computed from the whole run (both by
    today's analysis.summary, each in a temporary copy): the copy keeps every input of every figure."""
    from analysis.summary import summarize

    want, got = from_both(run, fixture, lambda folder: summarize(folder).to_dict())
    diff = [
        f"{s}.{k}"
        for s, fig in want["strategies"].items()
        for k, v in fig.items()
        if got["strategies"].get(s, {}).get(k) != v
    ]
    if diff or want["capture"] != got["capture"]:
        raise SystemExit(f"the trimmed copy's summary differs from the whole run's: {diff}")


def regenerate(
    argv: list[str] | None,
    doc: str,
    command: list[str],
    fixture_dir: Path,
    max_bytes: int,
    copy: Callable[[Path, Path], None],
    check: Callable[[Path, Path], None],
) -> int:
    """The command line both fixture makers share: run `incastlab command` (or take --from), copy it
    with `copy` into --out, `check` that nothing was lost, and refuse a fixture over max_bytes."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--from", dest="run", type=Path, help="an existing run folder (default: run one now)")
    p.add_argument("--out", type=Path, default=fixture_dir, help=f"default: {fixture_dir}")
    p.add_argument("--keep", type=Path, help="run into this results folder and keep it (default: a temp dir)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    tmp = None
    if args.run is None:
        results = args.keep or Path(tmp := tempfile.mkdtemp(prefix=f"incastlab-{fixture_dir.name}-"))
        run = run_real(results, command)
    else:
        run = args.run.resolve()
    copy(run, args.out)
    check(run, args.out)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {size / 1e3:.0f} KB from {run}", file=sys.stderr)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if size > max_bytes:
        raise SystemExit(f"fixture is {size / 1e3:.0f} KB, more than {max_bytes / 1e3:.0f} KB")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run (or take) a run, copy it trimmed into --out, check that nothing the summary reads was lost."""
    return regenerate(argv, __doc__, COMMAND, FIXTURE_DIR, MAX_BYTES, copy_trimmed, check_nothing_lost)


if __name__ == "__main__":
    raise SystemExit(main())
