"""`incastlab inspect` (analysis/inspect.py): sequence/ACK numbers and windows exactly as tshark
shows them (relative and absolute, scaled by the handshake or not), header, labels, options."""

from __future__ import annotations

import collections
import json
import subprocess
from pathlib import Path

import pytest

from analysis.inspect import connection_rows, connections
from incastlab.cli import main as cli_main
from tests.pcapwrite import read_records, to_ipv6, write_pcap
from tests.test_analysis_trace import ACK, PSH, SYN, Trace, tcp_options
from tests.tshark import tshark_fields

FLOW = "10.0.0.2:40000-10.0.0.1:5000"


def _conn(ws_a: int | None = 7, ws_b: int | None = 9, isn_a: int = 0xFFFFFF00, isn_b: int = 123456) -> Trace:
    tr = Trace()
    tr.fwd(0.0, isn_a, 0, SYN, win=64240, opts=tcp_options(mss=1460, wscale=ws_a, sack_ok=True))
    tr.rev(
        0.001, isn_b, isn_a + 1, SYN | ACK, win=65160, opts=tcp_options(mss=1460, wscale=ws_b, sack_ok=True)
    )
    tr.fwd(0.002, isn_a + 1, isn_b + 1, ACK, win=502)
    seq = isn_a + 1
    for k in range(6):  # crosses the 32-bit wrap of A's sequence numbers
        tr.fwd(0.010 + 0.001 * k, seq, isn_b + 1, ACK | PSH, n=100, win=502)
        seq += 100
        if k % 2:
            tr.rev(0.0105 + 0.001 * k, isn_b + 1, seq, ACK, win=300 + k)
    for k in range(2):  # lost
        tr.fwd(0.020 + 0.001 * k, seq + 100 * k, isn_b + 1, ACK | PSH, n=100, win=502)
    tr.fwd(0.300, seq, isn_b + 1, ACK | PSH, n=100, win=502)  # their timeout
    tr.rev(0.301, isn_b + 1, seq + 200, ACK, win=290)
    return tr


def _compare(f: Path, absolute: bool) -> tuple[int, tuple[int, int] | None]:
    rows, scales = connection_rows(str(f), FLOW, absolute=absolute)
    ours = {
        r["frame"]: (str(r["seq"]), "" if r["ack"] is None else str(r["ack"]), str(r["win"])) for r in rows
    }
    fields = ("tcp.seq_raw", "tcp.ack_raw") if absolute else ("tcp.seq", "tcp.ack")
    theirs = {}
    for fr, seq, ack, win, syn, ackf in tshark_fields(
        f, "frame.number", *fields, "tcp.window_size", "tcp.flags.syn", "tcp.flags.ack"
    ):
        theirs[int(fr)] = (seq, "" if syn == "1" and ackf == "0" else ack, win)
    assert ours == theirs
    return len(rows), scales


@pytest.mark.parametrize("absolute", [False, True])
@pytest.mark.parametrize("ws", [(7, 9), (None, 9), (0, 14)])
def test_numbers_and_windows_as_tshark_shows_them(
    tmp_path: Path, absolute: bool, ws: tuple[int | None, int | None]
) -> None:
    f = _conn(*ws).write(tmp_path / "c.pcap")
    n, scales = _compare(f, absolute)
    assert n == 16
    assert scales == ((0, 0) if None in ws else ws)


@pytest.mark.parametrize("drop", [3, 4])
def test_without_the_handshake(tmp_path: Path, drop: int) -> None:
    """Mid-stream capture: tshark's bases (one less than the first sequence or ACK number seen),
    raw windows; the text says they are unscaled."""
    tr = _conn()
    tr.rows = tr.rows[drop:]
    f = tr.write(tmp_path / "mid.pcap")
    _n, scales = _compare(f, absolute=False)
    assert scales is None


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(_conn().write(tmp_path / "c.pcap"))
    assert cli_main(["inspect", f, "--flow", FLOW]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "window scale -> x128, <- x512" in lines[0] and "relative" in lines[1]
    head = lines[2].split()
    assert head == ["frame", "time", "dir", "flags", "seq", "ack", "len", "win", "what"]
    syn = lines[3].split()
    assert syn[:6] == ["1", "0.000000", "->", "S", "0", "0"] and syn[6] == "64240"  # no ack column
    assert "RTO timeout" in lines[-2] and lines[-2].split()[4] == "601"
    assert all(line == line.rstrip() for line in lines)
    # around / span, absolute, a mid-stream capture, a cut file
    assert cli_main(["inspect", f, "--flow", FLOW, "--around", "0.3", "--span", "0.0015", "--absolute"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "absolute" in out[1] and len(out) == 5
    assert out[3].split()[4] == str((0xFFFFFF00 + 601) & 0xFFFFFFFF)
    tr = _conn()
    tr.rows = tr.rows[3:]
    mid = str(tr.write(tmp_path / "mid.pcap"))
    assert cli_main(["inspect", mid, "--flow", FLOW]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "unscaled" in out[0] and "win(unscaled)" in out[2]
    data = Path(f).read_bytes()
    Path(f).write_bytes(data[:-20])
    assert cli_main(["inspect", f, "--flow", FLOW]) == 2
    assert "truncated" in capsys.readouterr().err
    assert cli_main(["inspect", f, "--flow", FLOW, "--allow-truncated"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3 + 15


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(_conn().write(tmp_path / "c.pcap"))
    for argv, msg in (
        (
            [f, "--flow", "10.0.0.9:1-10.0.0.1:5000"],
            f"no connection 10.0.0.9:1-10.0.0.1:5000 in {f}; its busiest: {FLOW}",
        ),
        ([f, "--flow", "nonsense"], "bad --flow"),
        ([f, "--flow", FLOW, "--around", "5"], "no packets of that flow in the --around"),
        ([f, "--flow", FLOW, "--span", "-1"], "--span must be >= 0"),
        ([f, "--rto-min-ms", "0"], "--rto-min-ms must be > 0"),
        ([], "required"),
    ):
        assert cli_main(["inspect", *argv]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err


# ---- real captures (tests/data): the connection list and the labels against tshark
DATA = Path(__file__).resolve().parent / "data"
INCAST = DATA / "incast-small"
SENDERS = ("h5", "h6", "h9", "h13")  # one sender per capture, its own interface
LISTED = [
    DATA / "run-small" / "ps" / "pcap" / "ps-port.pcap",  # three connections, many retransmissions
    DATA / "run-small" / "ring" / "pcap" / "h3.pcap",
    INCAST / "base" / "n04" / "pcap" / "client-port.pcap",  # four senders, the receiver's side
    INCAST / "rto_min_ms-1" / "n04" / "pcap" / "h9.pcap",
]


def _rto_min_ms(line: str) -> float:
    """The rto_min the senders of an incast line ran with (config.json: its rto_min_ms, or the
    line's override, e.g. the folder rto_min_ms-1 is the line rto_min_ms=1)."""
    cfg = json.loads((INCAST / "config.json").read_text())
    for kv in cfg["lines"]:
        if kv.startswith("rto_min_ms=") and kv.replace("=", "-") == line:
            return float(kv.split("=")[1])
    return float(cfg["rto_min_ms"])


def _tshark_conversations(f: Path) -> dict[frozenset[str], tuple[int, int, int]]:
    """{the two endpoints: (frames, frame bytes, retransmissions)} per tcp.stream, from tshark."""
    ends: dict[str, frozenset[str]] = {}
    frames: collections.Counter[str] = collections.Counter()
    nbytes: collections.Counter[str] = collections.Counter()
    for st, src, src6, sp, dst, dst6, dp, ln in tshark_fields(
        f, "tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport", "frame.len"
    ):
        ends[st] = frozenset((f"{src or src6}:{sp}", f"{dst or dst6}:{dp}"))
        frames[st] += 1
        nbytes[st] += int(ln)
    rtx = collections.Counter(
        st for (st,) in tshark_fields(f, "tcp.stream", display="tcp.analysis.retransmission")
    )
    return {ends[st]: (frames[st], nbytes[st], rtx[st]) for st in ends}


def _key(connection: object) -> frozenset[str]:
    """The two endpoints of a connection's name, as tshark's fields write them (IPv6 unbracketed)."""
    return frozenset(e.replace("[", "").replace("]", "") for e in str(connection).split("-"))


@pytest.mark.parametrize("f", [*LISTED, "ipv6.pcapng"], ids=lambda p: "/".join(Path(p).parts[-4:]))
def test_connection_list_equals_tsharks_conversations(f: Path | str, tmp_path: Path) -> None:
    """Per connection: frames and frame bytes as tshark's conversation table counts them, and the
    packets tshark's tcp.analysis.retransmission matches; busiest (most bytes) first. Also on the
    first capture rewritten as IPv6 and saved as pcapng."""
    if f == "ipv6.pcapng":
        linktype, snaplen, recs = read_records(LISTED[0])
        write_pcap(tmp_path / "v6.pcap", linktype, snaplen, to_ipv6(recs))
        f = tmp_path / "v6.pcapng"
        subprocess.run(["editcap", "-F", "pcapng", str(tmp_path / "v6.pcap"), str(f)], check=True)
    f = Path(f)
    _pk, rows = connections(str(f))
    theirs = _tshark_conversations(f)
    assert len(theirs) >= 1
    assert {_key(r["connection"]): (r["packets"], r["bytes"], r["retransmits"]) for r in rows} == theirs
    shown = [theirs[_key(r["connection"])][1] for r in rows]
    assert shown == sorted(shown, reverse=True)


@pytest.mark.parametrize("host", SENDERS)
def test_connection_list_timeouts_equal_the_kernels(host: str) -> None:
    """A sender's capture at rto_min 200 ms: the list's timeouts are its kernel's TcpExtTCPTimeouts
    (hosts.json, read at the end of the point)."""
    point = INCAST / "base" / "n04"
    kernel = json.loads((point / "hosts.json").read_text())[host]["kernel"].get("TcpExtTCPTimeouts", 0)
    _pk, rows = connections(str(point / "pcap" / f"{host}.pcap"), rto_min_s=_rto_min_ms("base") / 1000)
    assert len(rows) == 1 and rows[0]["timeouts"] == kernel


def _previous_copy_gaps(f: Path) -> dict[int, float]:
    """{frame: s since the previous capture of the same sequence number in the same direction},
    for data packets that have one (tshark's raw sequence numbers and times)."""
    last: dict[tuple[str, str, str], float] = {}
    gaps = {}
    for fr, src, sp, seq, ln, t in tshark_fields(
        f, "frame.number", "ip.src", "tcp.srcport", "tcp.seq_raw", "tcp.len", "frame.time_epoch"
    ):
        if int(ln or 0):
            k = (src, sp, seq)
            if k in last:
                gaps[int(fr)] = float(t) - last[k]
            last[k] = float(t)
    return gaps


@pytest.mark.parametrize("line", ["base", "rto_min_ms-1"])
@pytest.mark.parametrize("host", SENDERS)
def test_labels_say_timeout_only_when_a_timer_can_have_fired(line: str, host: str) -> None:
    """On a sender's capture every retransmission carries tshark's word for it (tshark's fast and
    spurious ones theirs, the others "retransmission ..."); one is called a timeout only when at
    least the rto_min in force passed since the segment's previous copy; at 200 ms nothing tshark
    calls a fast retransmission is called a timeout. (A tail loss probe's timer is 2 SRTT, not
    rto_min: its label is not checked here.)"""
    f = INCAST / line / "n04" / "pcap" / f"{host}.pcap"
    rto_ms = _rto_min_ms(line)
    _pk, conns = connections(str(f), rto_min_s=rto_ms / 1000)
    what = {}
    for c in conns:
        for r in connection_rows(str(f), str(c["connection"]), rto_min_s=rto_ms / 1000)[0]:
            what[r["frame"]] = list(r["what"])  # type: ignore[call-overload]

    def frames(display: str) -> set[int]:
        return {int(x[0]) for x in tshark_fields(f, "frame.number", display=display)}

    rtx, fast = frames("tcp.analysis.retransmission"), frames("tcp.analysis.fast_retransmission")
    spurious = frames("tcp.analysis.spurious_retransmission")
    assert rtx, "the capture has retransmissions"
    assert {fr for fr, w in what.items() if w and "retransmission" in w[0]} == rtx
    assert all(what[fr][0] == "fast retransmission" for fr in fast)
    assert all(what[fr][0] == "spurious retransmission" for fr in spurious)
    gaps = _previous_copy_gaps(f)
    timed = {fr for fr, w in what.items() if any("timeout" in x for x in w)}  # RTO and SYN timers
    short = {fr for fr in rtx if gaps.get(fr, 0.0) < rto_ms / 1000}
    assert not timed & short, sorted((fr, gaps.get(fr), what[fr]) for fr in timed & short)
    if rto_ms >= 200:
        assert not timed & fast
    print(f"{f}: {len(rtx)} retransmissions, {len(timed)} timer events, {len(short)} too soon for one")


def test_the_reported_retransmission_is_no_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #30: run-small's h2.pcap frame 73, 17 ms after its first copy, is what tshark calls
    '(suspected) retransmission': plain "retransmission", not a timeout."""
    f = DATA / "run-small" / "ps" / "pcap" / "h2.pcap"
    (row,) = tshark_fields(f, "_ws.expert.message", "tcp.stream", display="frame.number == 73")
    assert row[0] == "This frame is a (suspected) retransmission"
    assert cli_main(["inspect", str(f), "--flow", "10.0.0.2:34418-10.0.0.1:29600"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.split()[0] == "73"]
    assert line.endswith(" retransmission") and "timeout" not in line


def test_inspect_without_flow_lists_the_connections(capsys: pytest.CaptureFixture[str]) -> None:
    """`inspect FILE`: the project's table (header, units row, one row per connection, `#` footer)
    and --json (schema incastlab.table/1); a --flow not in the file: one line naming the busiest
    ones that are, exit 2."""
    f = str(LISTED[0])
    theirs = _tshark_conversations(LISTED[0])
    assert cli_main(["inspect", f]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["connection", "packets"] and lines[1].split()[0] == "A:port-B:port"
    body = [x for x in lines[2:] if not x.startswith("#")]
    assert len(body) == len(theirs) and lines[-1].startswith("# ")
    busiest = max(theirs, key=lambda k: theirs[k][1])
    assert _key(body[0].split()[0]) == busiest
    assert cli_main(["inspect", f, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "incastlab.table/1" and doc["file"] == f
    assert {
        _key(r["connection"]): (r["packets"], r["bytes"], r["retransmits"]) for r in doc["rows"]
    } == theirs
    assert cli_main(["inspect", f, "--flow", "10.0.0.9:1-10.0.0.1:29600"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no connection 10.0.0.9:1-10.0.0.1:29600" in err
    assert all("-".join(sorted(k)) in err or "-".join(sorted(k, reverse=True)) in err for k in theirs)
    flow = body[0].split()[0]
    assert cli_main(["inspect", f, "--flow", flow, "--json", "--around", "1", "--span", "0.01"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["flow"] == flow and doc["packets"] and all(abs(p["t_rel"] - 1) <= 0.01 for p in doc["packets"])
