"""Benchmark (not a test): our pcap reading + TCP analysis in packets/s against tshark on the same
file, `tshark -r F -Y tcp.analysis.retransmission` and a full `tshark -r F` pass.

    python bench/bench_analysis.py [--pcap F] [--packets N] [--out results/bench_analysis.json]

Without --pcap it writes a synthetic lossy capture (several bulk flows, random drops, dup ACKs,
fast and timeout retransmissions) to a temporary file. Goal: >= 10x tshark.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analysis.pcapfile import read_pcap  # noqa: E402
from analysis.tcp import analyze  # noqa: E402
from report.console import goal_text  # noqa: E402


def _frame(
    src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, win: int, plen: int, snap: int
) -> tuple[bytes, int]:
    ip = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + 20 + plen, 0, 0x4000, 64, 6, 0, src, dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, win, 0, 0)
    eth = b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x02\x08\x00"
    wire = eth + ip + tcp + b"\x00" * plen
    return wire[:snap], len(wire)


def _seg(
    ends: tuple[int, int, int, int], isn: int, risn: int, seq: int, plen: int, snap: int
) -> tuple[bytes, int]:
    return _frame(*ends, (isn + seq) & 0xFFFFFFFF, risn + 1, 0x18, 502, plen, snap)


def _ack(ends: tuple[int, int, int, int], isn: int, risn: int, ackno: int, snap: int) -> tuple[bytes, int]:
    src, dst, sport, dport = ends
    return _frame(dst, src, dport, sport, risn + 1, (isn + ackno) & 0xFFFFFFFF, 0x10, 1000, 0, snap)


def synth_pcap(path: str, packets: int, seed: int = 1, loss: float = 0.02) -> int:
    """Write a sender-side capture of bulk flows through a lossy link; returns the packet count."""
    rng = random.Random(seed)
    recs: list[tuple[float, bytes, int]] = []
    t = 1_700_000_000.0
    mss, snap = 1448, 128
    flow = 0
    while len(recs) < packets:
        flow += 1
        ends = (0x0A000002 + flow % 8, 0x0A000001, 40000 + flow, 5000)
        isn, risn = rng.randrange(1 << 32), rng.randrange(1 << 32)
        recs.append((t, *_frame(*ends, isn, 0, 0x02, 64240, 0, snap)))
        t += 0.0001
        recs.append((t, *_frame(ends[1], ends[0], ends[3], ends[2], risn, isn + 1, 0x12, 65160, 0, snap)))
        t += 0.0001
        recs.append((t, *_frame(*ends, isn + 1, risn + 1, 0x10, 502, 0, snap)))
        nxt, rcv_next, lost = 1, 1, set()
        for _ in range(2000):
            t += 0.00005
            recs.append((t, *_seg(ends, isn, risn, nxt, mss, snap)))
            if rng.random() < loss:
                lost.add(nxt)
            elif nxt == rcv_next:
                rcv_next += mss
            nxt += mss
            t += 0.00005
            recs.append((t, *_ack(ends, isn, risn, rcv_next, snap)))
            if rcv_next < nxt and rcv_next in lost:
                for _dup in range(3):  # dup ACKs, then a fast (or, sometimes, timeout) retransmission
                    t += 0.00005
                    recs.append((t, *_seg(ends, isn, risn, nxt, mss, snap)))
                    nxt += mss
                    recs.append((t, *_ack(ends, isn, risn, rcv_next, snap)))
                t += 0.00002 if rng.random() < 0.7 else 0.2
                recs.append((t, *_seg(ends, isn, risn, rcv_next, mss, snap)))
                lost.discard(rcv_next)
                rcv_next = nxt
                t += 0.00005
                recs.append((t, *_ack(ends, isn, risn, rcv_next, snap)))
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snap, 1))
        for ts, data, wire in recs:
            sec = int(ts)
            fh.write(struct.pack("<IIII", sec, int(round((ts - sec) * 1e6)) % 1_000_000, len(data), wire))
            fh.write(data)
    return len(recs)


def _time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pcap", help="capture to use (default: a synthetic one)")
    ap.add_argument("--packets", type=int, default=300_000, help="size of the synthetic capture")
    ap.add_argument("--out", default="results/bench_analysis.json")
    ap.add_argument("--repeat", type=int, default=5, help="runs of ours (best is kept; tshark: 2)")
    a = ap.parse_args(argv)
    tshark = shutil.which("tshark")
    tmp = None
    path = a.pcap
    if path is None:
        tmp = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False)
        tmp.close()
        path = tmp.name
        synth_pcap(path, a.packets)
    try:
        pk = read_pcap(path)
        n = len(pk)
        ours_s = _time(lambda: analyze(read_pcap(path)).summary(), a.repeat)
        read_s = _time(lambda: read_pcap(path), a.repeat)
        retx = analyze(pk).summary()["retransmits"]
        rows = [("incastlab read+analyze", ours_s, retx), ("incastlab read only", read_s, None)]
        if tshark:

            def run(args: list[str]) -> str:
                return subprocess.run(
                    [tshark, "-r", path, *args], capture_output=True, text=True, check=True
                ).stdout

            ts_retx: list[int] = []
            t_r = _time(lambda: ts_retx.append(run(["-Y", "tcp.analysis.retransmission"]).count("\n")), 2)
            t_full = _time(lambda: run([]), 2)
            rows += [
                ("tshark -Y tcp.analysis.retransmission", t_r, ts_retx[-1]),
                ("tshark full pass", t_full, None),
            ]
        print(f"{path}: {n} packets")
        print(f"{'tool':<40} {'seconds':>9} {'packets/s':>12} {'retransmits':>12}")
        for name, s, r in rows:
            print(f"{name:<40} {s:9.3f} {n / s:12.0f} {'' if r is None else r:>12}")
        result: dict[str, object] = {
            "file": a.pcap or "synthetic",
            "packets": n,
            "ours_s": ours_s,
            "ours_pps": n / ours_s,
            "read_s": read_s,
            "ours_retransmits": retx,
        }
        if tshark:
            result.update(
                {
                    "tshark_retx_s": t_r,
                    "tshark_full_s": t_full,
                    "tshark_retransmits": ts_retx[-1],
                    "ratio_vs_tshark_retx": t_r / ours_s,
                    "ratio_vs_tshark_full": t_full / ours_s,
                }
            )
            ratio = t_r / ours_s
            print(
                f"RATIO: incastlab read+analyze is {ratio:.1f}x faster than tshark -Y "
                f"tcp.analysis.retransmission ({t_full / ours_s:.1f}x a full tshark pass); "
                + "goal "
                + goal_text("read+analyze >= 10x faster than tshark", ratio >= 10)
            )
            if ts_retx[-1] != retx:
                print(f"WARNING: retransmissions differ: ours {retx}, tshark {ts_retx[-1]}")
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=1)
        return 0
    finally:
        if tmp is not None:
            os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
