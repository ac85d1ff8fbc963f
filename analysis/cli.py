"""Command-line entry points of the analysis stage; incastlab's CLI delegates here.

Errors are one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys

from analysis.errors import AnalysisError
from analysis.pcapfile import read_pcap
from analysis.tcp import analyze

_TEXT_KEYS = ("packets", "segments", "bytes", "retransmits", "fast_retransmits", "timeout_retransmits",
              "wireshark_fast_retransmits", "spurious_retransmits", "dup_acks", "out_of_order",
              "zero_window", "lost_segments", "flows", "connections")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise AnalysisError(message)


def _run(prog: str, fn, argv: list[str]) -> int:
    try:
        return fn(argv)
    except AnalysisError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except BrokenPipeError:
        return 0


def analyze_counts(path: str, *, allow_truncated: bool = False, per_flow: bool = False) -> dict[str, object]:
    """The counts `incastlab analyze` prints: tcp.TcpAnalysis.summary() plus file info."""
    pk = read_pcap(path, allow_truncated=allow_truncated)
    an = analyze(pk)
    res: dict[str, object] = {"file": path, "truncated_at": pk.truncated_at}
    res.update(an.summary())
    if per_flow:
        res["per_flow"] = an.per_flow()
    return res


def _analyze(argv: list[str]) -> int:
    ap = _Parser(prog="incastlab analyze", description="TCP counts of any pcap file")
    ap.add_argument("pcap")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    ap.add_argument("--per-flow", action="store_true", help="also the counts of each flow direction")
    ap.add_argument("--allow-truncated", action="store_true", help="count what precedes a cut record")
    a = ap.parse_args(argv)
    res = analyze_counts(a.pcap, allow_truncated=a.allow_truncated, per_flow=a.per_flow)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{a.pcap}" + (f" (truncated at record {res['truncated_at']})" if res["truncated_at"] else ""))
    for k in _TEXT_KEYS:
        print(f"  {k:<27} {res[k]}")
    for row in res.get("per_flow", []):  # type: ignore[union-attr]
        print(f"  {row['flow']}: segments={row['segments']} retransmits={row['retransmits']} "
              f"dup_acks={row['dup_acks']} out_of_order={row['out_of_order']}")
    return 0


def _inspect(argv: list[str]) -> int:
    from analysis.inspect import inspect_flow  # scapy import is slow, only load it here

    ap = _Parser(prog="incastlab inspect", description="packets of one TCP flow, classified")
    ap.add_argument("pcap")
    ap.add_argument("--flow", required=True, help="SRC:PORT-DST:PORT")
    ap.add_argument("--around", type=float, default=None, help="seconds since the capture start")
    ap.add_argument("--span", type=float, default=0.05, help="half-width of the --around window (s)")
    a = ap.parse_args(argv)
    n = inspect_flow(a.pcap, a.flow, around=a.around, span=a.span)
    if n == 0:
        raise AnalysisError("no packets of that flow in the --around window")
    return 0


def analyze_main(argv: list[str]) -> int:
    """`incastlab analyze PCAP [--json] [--per-flow] [--allow-truncated]`."""
    return _run("incastlab analyze", _analyze, argv)


def inspect_main(argv: list[str]) -> int:
    """`incastlab inspect PCAP --flow SRC:PORT-DST:PORT [--around T] [--span S]`."""
    return _run("incastlab inspect", _inspect, argv)


if __name__ == "__main__":
    sys.exit(analyze_main(sys.argv[1:]))
