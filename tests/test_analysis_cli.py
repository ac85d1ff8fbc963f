"""`incastlab analyze` (incastlab/analyze.py) on real captures from tests/data: its counts are named for
what they count and add up to tshark's, and the minimum RTO is given in ms like every other flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from incastlab.cli import main as cli_main
from tests.tshark import tshark_count

POINT = Path(__file__).resolve().parent / "data" / "incast-small" / "rto_min_ms-1" / "n04"
RUN_H2 = Path(__file__).resolve().parent / "data" / "run-small" / "ps" / "pcap" / "h2.pcap"


def _analyze(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict[str, object], str]:
    assert cli_main(["analyze", *argv, "--json", "--per-flow"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def test_the_retransmission_split_is_named_for_what_it_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """The split of the retransmissions is by dup-ACK evidence, not by timer: its two parts add up
    to tshark's tcp.analysis.retransmission count; tshark's fast ones are wireshark_fast_retransmits;
    no count is called a timeout but the timer events (on h2.pcap: 81 retransmissions, 0 timeouts)."""
    res, _err = _analyze(capsys, str(RUN_H2))
    rtx = tshark_count(RUN_H2, "tcp.analysis.retransmission")
    assert res["retransmits"] == rtx > 0
    assert res["retransmits_with_dup_acks"] + res["retransmits_without_dup_acks"] == rtx  # type: ignore[operator]
    assert res["wireshark_fast_retransmits"] == tshark_count(RUN_H2, "tcp.analysis.fast_retransmission")
    names = set(res) | {k for row in res["per_flow"] for k in row}  # type: ignore[attr-defined]
    assert {k for k in names if "timeout" in k} == {"timeouts", "timeouts_by_sender"}
    assert "fast_retransmits" not in names
    assert cli_main(["analyze", str(RUN_H2)]) == 0
    text = capsys.readouterr().out
    assert "retransmits_without_dup_acks" in text and "timeout_retransmits" not in text


def test_rto_min_in_ms(capsys: pytest.CaptureFixture[str]) -> None:
    """--rto-min-ms 1 on a sender that ran with rto_min_ms=1 counts its kernel's TcpExtTCPTimeouts
    (hosts.json); the default (200 ms) counts none of those short waits, and on the same sender
    running with 200 ms counts its kernel's timeouts; the old --rto-min (seconds)
    gives the same figures with a one-line note to use --rto-min-ms."""
    f = str(POINT / "pcap" / "h5.pcap")
    kernel = json.loads((POINT / "hosts.json").read_text())["h5"]["kernel"]["TcpExtTCPTimeouts"]
    ms, err = _analyze(capsys, f, "--rto-min-ms", "1")
    assert ms["timeouts"] == kernel > 0 and err == ""
    default, _err = _analyze(capsys, f)
    assert default["timeouts"] == 0
    base = POINT.parent.parent / "base" / "n04"  # the same sender at the kernel's 200 ms
    kernel = json.loads((base / "hosts.json").read_text())["h5"]["kernel"]["TcpExtTCPTimeouts"]
    default, _err = _analyze(capsys, str(base / "pcap" / "h5.pcap"))
    assert default["timeouts"] == kernel > 0
    old, err = _analyze(capsys, f, "--rto-min", "0.001")
    assert old == ms
    assert err.count("\n") == 1 and "use --rto-min-ms 1" in err
    for argv, msg in (
        (["--rto-min-ms", "0"], "--rto-min-ms must be > 0"),
        (["--rto-min-ms", "inf"], "--rto-min-ms must be > 0 and finite"),
        (["--rto-min", "nan"], "--rto-min must be > 0 and finite"),
        (["--rto-min-ms", "1", "--rto-min", "0.001"], "use only --rto-min-ms"),
    ):
        assert cli_main(["analyze", f, *argv]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1
    assert cli_main(["analyze", "--help"]) == 0
    assert "(default: 200)" in capsys.readouterr().out
