"""The capture commands (analyze, inspect): their options, what they run and how they print; the
`incastlab` command's one argparse tree adds them (incastlab/cli.py). They sit here, at the end of
the data flow, because they print through report/console.py's table writer.

Errors are one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import math
import sys

from analysis.errors import AnalysisError
from analysis.goodput import delivered_bytes
from analysis.pcapfile import read_pcap
from analysis.rto import RTO_MIN_S, rto_events
from analysis.tcp import analyze
from analysis.tcpopts import read_options
from report.console import Col, Table

_TEXT_KEYS = (
    "records",
    "packets",
    "segments",
    "bytes",
    "retransmits",
    "retransmits_with_dup_acks",
    "retransmits_without_dup_acks",
    "wireshark_fast_retransmits",
    "spurious_retransmits",
    "dup_acks",
    "out_of_order",
    "zero_window",
    "lost_segments",
    "timeouts",
    "loss_probes",
    "stall_s",
    "delivered_bytes",
    "flows",
    "connections",
)
_FLOW_KEYS = (
    "segments",
    "retransmits",
    "dup_acks",
    "out_of_order",
    "timeouts",
    "loss_probes",
    "delivered_bytes",
)


def analyze_counts(
    path: str, *, allow_truncated: bool = False, per_flow: bool = False, rto_min_s: float = RTO_MIN_S
) -> dict[str, object]:
    """The counts `incastlab analyze` prints for one file.

    tcp.TcpAnalysis.summary() (segment counts, Wireshark-style classification, its split of the
    retransmissions by dup-ACK evidence) plus: file,
    truncated_at, records (all records of the file, TCP or not); timeouts, loss_probes, stall_s
    (rto.rto_events: timeout *events*, meaningful on a sender's capture) and timeouts_by_sender
    ({sender IP: {"timeouts", "loss_probes", "stall_s"}}); delivered_bytes (goodput.delivered_bytes:
    unique payload bytes, meaningful on a receiver's capture) and delivered_by_receiver. A valid
    capture without TCP packets (e.g. only a file header) gives zeros. With per_flow, "per_flow"
    lists each flow direction with the same counts.
    """
    pk = read_pcap(path, allow_truncated=allow_truncated, require_tcp=False)
    an = analyze(pk)
    rt = rto_events(pk, tsval=read_options(pk).tsval, rto_min_s=rto_min_s)
    dl = delivered_bytes(pk)
    res: dict[str, object] = {"file": path, "truncated_at": pk.truncated_at, "records": pk.records}
    res.update(an.summary())
    res.update(
        timeouts=rt.timeouts,
        loss_probes=rt.loss_probes,
        stall_s=rt.stall_s,
        delivered_bytes=dl.bytes,
        timeouts_by_sender=rt.by_sender(),
        delivered_by_receiver={k: v["bytes"] for k, v in dl.by_receiver.items()},
    )
    if per_flow:
        to = {f.flow: f for f in rt.flows}
        got = {f.flow: f.bytes for f in dl.flows}
        rows = an.per_flow()
        for row in rows:
            f = to.get(str(row["flow"]))
            row.update(
                timeouts=f.timeouts if f else 0,
                loss_probes=f.loss_probes if f else 0,
                stall_s=f.stall_s if f else 0.0,
                delivered_bytes=got.get(str(row["flow"]), 0),
            )
        res["per_flow"] = rows
    return res


def _print_text(res: dict[str, object]) -> None:
    head = str(res["file"])
    if res["truncated_at"]:
        head += f" (truncated at record {res['truncated_at']})"
    if not res["packets"]:
        head += f" (no TCP packets in {res['records']} records)"
    print(head)
    for k in _TEXT_KEYS:
        print(f"  {k:<28} {res[k]}")
    by = res.get("timeouts_by_sender") or {}
    if by:
        print(
            f"  {'timeouts by sender':<28} " + " ".join(f"{ip}={row['timeouts']}" for ip, row in by.items())
        )  # type: ignore[union-attr,index]
    for row in res.get("per_flow", []):  # type: ignore[union-attr]
        print(f"  {row['flow']}: " + " ".join(f"{k}={row[k]}" for k in _FLOW_KEYS))


ANALYZE_HELP = (
    "TCP counts of pcap or pcapng files (IPv4 and IPv6): segments, retransmissions (all, and "
    "tshark's fast and spurious ones; split by whether the receiver was repeating an ACK), dup "
    "ACKs, out-of-order, zero windows, timeout events and tail loss probes (count them on the "
    "sender's capture), delivered bytes (unique payload bytes; count them on the receiver's capture)."
)
INSPECT_HELP = (
    "without --flow: the file's TCP connections, busiest first (packets, bytes, retransmissions, "
    "timeouts), like tshark -z conv,tcp; with --flow: the packets of one connection (both "
    "directions), each labelled in tshark's words (retransmission, fast retransmission, dup ACK, "
    "...) plus the timer events (RTO timeout, tail loss probe) found with --rto-min-ms; sequence "
    "numbers and windows as tshark shows them"
)
RTO_MIN_MS = RTO_MIN_S * 1000


def _add_rto_min_ms(ap: argparse.ArgumentParser, what: str, *, seconds_alias: bool = False) -> None:
    """--rto-min-ms: the minimum RTO the timer rules assume, in ms as every other flag gives it;
    with seconds_alias also the deprecated --rto-min in seconds (analyze had it first)."""
    flags = [
        (
            "--rto-min-ms",
            "MS",
            f"the senders' minimum RTO in ms, as the runs' rto_min_ms, for {what}",
            RTO_MIN_MS,
        )
    ]
    if seconds_alias:
        flags.append(("--rto-min", "S", "deprecated: use --rto-min-ms; the same in seconds", RTO_MIN_S))
    for flag, metavar, text, default in flags:
        ap.add_argument(
            flag, type=float, default=None, metavar=metavar, help=f"{text} (default: {default:g})"
        )


def _rto_min_s(a: argparse.Namespace) -> float:
    """The --rto-min-ms given (or the deprecated --rto-min in seconds, with a one-line note), in s."""
    old = getattr(a, "rto_min", None)
    if old is not None and a.rto_min_ms is not None:
        raise AnalysisError("--rto-min (seconds) and --rto-min-ms given: use only --rto-min-ms")
    ms = old * 1000 if old is not None else RTO_MIN_MS if a.rto_min_ms is None else a.rto_min_ms
    if not 0 < ms < math.inf:
        raise AnalysisError(f"{'--rto-min' if old is not None else '--rto-min-ms'} must be > 0 and finite")
    if old is not None:
        print(
            f"incastlab {a.command}: --rto-min is deprecated (seconds); use --rto-min-ms {ms:g}",
            file=sys.stderr,
        )
    return ms / 1000


def add_analyze_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of `incastlab analyze` (the command line's tree adds the subcommand)."""
    ap.add_argument("pcap", nargs="+", help="one or more pcap or pcapng files")
    ap.add_argument(
        "--json", action="store_true", help="print one JSON object per file, one per line (default: text)"
    )
    ap.add_argument(
        "--per-flow",
        action="store_true",
        help="also the counts of each flow direction (default: totals only)",
    )
    ap.add_argument(
        "--allow-truncated",
        action="store_true",
        help="count what precedes a cut record (default: a cut file is an error)",
    )
    _add_rto_min_ms(ap, "the timeout count", seconds_alias=True)


def run_analyze(a: argparse.Namespace) -> int:
    """`incastlab analyze`: counts per file; exit 2 if a file could not be read."""
    rto_min_s = _rto_min_s(a)
    failed = 0
    try:
        for path in a.pcap:
            try:
                res = analyze_counts(
                    path, allow_truncated=a.allow_truncated, per_flow=a.per_flow, rto_min_s=rto_min_s
                )
            except AnalysisError as exc:
                if len(a.pcap) == 1:
                    raise
                failed += 1
                print(f"incastlab analyze: error: {exc}", file=sys.stderr)
                if a.json:
                    print(json.dumps({"file": path, "error": str(exc)}), flush=True)
                continue
            if a.json:
                print(json.dumps(res), flush=True)
            else:
                _print_text(res)
    except BrokenPipeError:
        return 0
    return 2 if failed else 0


def add_inspect_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of `incastlab inspect`."""
    ap.add_argument("pcap", help="a pcap or pcapng file")
    ap.add_argument(
        "--flow",
        default=None,
        metavar="SRC:PORT-DST:PORT",
        help="the connection to show (either direction; default: list the file's connections)",
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="print the connection list (schema incastlab.table/1) or the packets as one JSON "
        "document on stdout (default: text)",
    )
    ap.add_argument(
        "--around",
        type=float,
        default=None,
        metavar="T",
        help="only packets near T seconds after the capture's first packet (default: the whole connection)",
    )
    ap.add_argument(
        "--span",
        type=float,
        default=0.05,
        metavar="S",
        help="half-width of the --around window in seconds (default: 0.05)",
    )
    ap.add_argument(
        "--absolute",
        action="store_true",
        help="absolute sequence and ACK numbers (default: relative, as tshark shows them)",
    )
    ap.add_argument(
        "--allow-truncated",
        action="store_true",
        help="show what precedes a cut record (default: a cut file is an error)",
    )
    _add_rto_min_ms(ap, "the timer labels and counts")


def connections_table(path: str, rows: list[dict[str, object]], records: int, rto_min_s: float) -> Table:
    """The connection list of `inspect FILE` (inspect.list_connections' rows) as the project's
    terminal table: what each column counts in the footer."""
    cols = [
        Col("connection", "A:port-B:port", "connection", align="<"),
        Col("packets", "pkts", "packets", "{:d}"),
        Col("bytes", "frames", "bytes", "{:d}"),
        Col("payload", "bytes", "payload_bytes", "{:d}"),
        Col("retransmits", "segs", "retransmits", "{:d}"),
        Col("timeouts", "RTOs", "timeouts", "{:d}"),
        Col("loss probes", "TLPs", "loss_probes", "{:d}"),
        Col("start", "s", "start_s", "{:.6f}"),
    ]
    head = f"{len(rows)} TCP connection{'' if len(rows) == 1 else 's'} in {path}, most bytes first"
    footer = [
        head if rows else f"no TCP packets in {path} ({records} records)",
        "bytes: frame bytes, as tshark -z conv,tcp; retransmits: tshark's tcp.analysis.retransmission",
        f"timeouts, loss probes: timer events with rto_min {rto_min_s * 1000:g} ms (on the sender's capture)",
        "one connection's packets: incastlab inspect FILE --flow CONNECTION",
    ]
    return Table(cols, rows, footer=footer)


def run_inspect(a: argparse.Namespace) -> int:
    """`incastlab inspect`: the file's connections, or one connection's packets."""
    from analysis.inspect import connections, inspect_flow

    if a.span < 0:
        raise AnalysisError("--span must be >= 0")
    rto_min_s = _rto_min_s(a)
    try:
        if a.flow is None:
            pk, rows = connections(a.pcap, rto_min_s=rto_min_s, allow_truncated=a.allow_truncated)
            table = connections_table(a.pcap, rows, pk.records, rto_min_s)
            print(table.render_json(file=a.pcap) if a.json else table.render(), flush=True)
            return 0
        n = inspect_flow(
            a.pcap,
            a.flow,
            around=a.around,
            span=a.span,
            absolute=a.absolute,
            allow_truncated=a.allow_truncated,
            rto_min_s=rto_min_s,
            as_json=a.json,
        )
    except BrokenPipeError:
        return 0
    if n == 0:
        raise AnalysisError("no packets of that flow in the --around window")
    return 0
