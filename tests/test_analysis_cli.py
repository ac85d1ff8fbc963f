"""`incastlab analyze` (analysis/cli.py) on real captures from tests/data: its counts are named for
what they count and add up to tshark's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from incastlab.cli import main as cli_main
from tests.tshark import tshark_count

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
