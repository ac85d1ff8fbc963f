"""`incastlab incast` for real: a short sweep on the fabric, its counts against the kernel and tshark.

One sweep (N = 1 and 6 senders, 4 rounds, the base and a 1 ms minimum RTO) shared by the tests; each
figure of incast.json is checked against a source the tool did not compute it from: the senders' own
kernel counters (hosts.json, nstat per namespace), tshark on the captures, the configured link rate.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import guarded_host, run_cli

pytestmark = pytest.mark.integration

SENDERS = (1, 6)
ROUNDS = 4
SRU = 48 * 1024


@pytest.fixture(scope="module")
def incast_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("incast")
    with guarded_host("incast"):
        proc = run_cli(
            [
                "incast",
                "--senders",
                ",".join(map(str, SENDERS)),
                "--rounds",
                str(ROUNDS),
                "--lines",
                "base,rto_min_ms=1",
                "--results",
                str(results),
            ],
            timeout=900,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "incast.json" in proc.stdout + proc.stderr or (results / "latest" / "incast.json").exists()
    return results / "latest"


def rows(run: Path) -> list[dict[str, Any]]:
    return json.loads((run / "incast.json").read_text())["rows"]


def point_dir(run: Path, row: dict[str, Any]) -> Path:
    line = row["line"].replace("=", "-")
    return run / line / f"n{row['senders']:02d}"


def tshark(pcap: Path, *args: str) -> list[str]:
    assert shutil.which("tshark"), "tshark is installed by make deps"
    out = subprocess.run(["tshark", "-r", str(pcap), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-500:]
    return [ln for ln in out.stdout.splitlines() if ln]


def test_every_point_ran_and_moved_exactly_its_blocks(incast_run: Path) -> None:
    data = json.loads((incast_run / "incast.json").read_text())
    assert data["schema"].startswith("incastlab.incast/") and data["complete"] is True
    got = {(r["line"], r["senders"]) for r in data["rows"]}
    assert got == {(line, n) for line in ("base", "rto_min_ms=1") for n in SENDERS}
    for r in data["rows"]:
        assert r["state"] == "complete" and r["rounds"] == ROUNDS, r
        assert r["app_bytes"] == ROUNDS * r["senders"] * SRU
        assert r["delivered_bytes_pcap"] == r["app_bytes"]  # the client's capture saw every block once


def test_goodput_is_the_blocks_over_the_time_against_the_configured_rate(incast_run: Path) -> None:
    for r in rows(incast_run):
        rate = r["config"]["link_mbit"]
        assert r["goodput_mbit"] == pytest.approx(r["app_bytes"] * 8 / r["duration_s"] / 1e6, rel=1e-3)
        assert r["goodput_frac"] == pytest.approx(r["goodput_mbit"] / rate, rel=1e-3)
        assert 0 < r["goodput_frac"] <= 1.0  # a shaped link cannot deliver more than its rate


def test_timeouts_and_retransmissions_are_the_senders_kernel_counters(incast_run: Path) -> None:
    for r in rows(incast_run):
        hosts = json.loads((point_dir(incast_run, r) / "hosts.json").read_text())
        senders = sorted(r["timeouts_by_host"]) or [h for h in hosts if h != "h1" and hosts[h]["kernel"]]
        kernel = {h: hosts[h]["kernel"] for h in senders}
        assert r["timeouts_kernel"] == sum(k.get("TcpExtTCPTimeouts", 0) for k in kernel.values())
        nonzero = {h: n for h, n in r["timeouts_by_host"].items() if n}
        assert nonzero == {h: k["TcpExtTCPTimeouts"] for h, k in kernel.items() if k.get("TcpExtTCPTimeouts")}
        assert r["retransmits_kernel"] == sum(k.get("TcpRetransSegs", 0) for k in kernel.values())
        # the captures tell the same story: RTO events found in the pcaps vs the kernel's count
        assert abs(r["timeouts_pcap"] - r["timeouts_kernel"]) <= max(2, 0.1 * r["timeouts_kernel"]), r


def test_retransmissions_agree_with_tshark_on_the_senders_captures(incast_run: Path) -> None:
    topo = json.loads((incast_run / "topology.json").read_text())
    ip = {h["name"]: h["ip"] for h in topo["hosts"]}
    row = next(r for r in rows(incast_run) if r["line"] == "base" and r["senders"] == max(SENDERS))
    d = point_dir(incast_run, row)
    hosts = json.loads((d / "hosts.json").read_text())
    theirs = 0
    for pcap in sorted((d / "pcap").glob("h*.pcap")):
        host = pcap.stem
        if host == "h1":
            continue
        # Wireshark calls a resent segment "out-of-order" when it leaves within its RTT heuristic of the
        # last one (a loss probe or fast retransmit on a sub-ms path): both are the kernel's retransmits
        theirs += len(
            tshark(
                pcap,
                "-Y",
                f"(tcp.analysis.retransmission || tcp.analysis.out_of_order) && ip.src=={ip[host]}",
                "-T",
                "fields",
                "-e",
                "frame.number",
            )
        )
    ours = sum(hosts[h]["kernel"].get("TcpRetransSegs", 0) for h in hosts if h != "h1")
    print(f"retransmissions at N={row['senders']}: kernel {ours}, tshark {theirs}")
    assert ours > 0, "six senders into a 3-packet port must lose packets"
    assert abs(theirs - ours) <= max(3, 0.05 * ours)


def test_drops_are_the_client_ports_and_a_1ms_rto_recovers_faster(incast_run: Path) -> None:
    by = {(r["line"], r["senders"]): r for r in rows(incast_run)}
    n = max(SENDERS)
    base, fast = by[("base", n)], by[("rto_min_ms=1", n)]
    assert base["client_port_drops"] > 0 and base["client_port_drops"] <= base["queue_drops"]
    assert fast["config"]["rto_min_ms"] == 1 and base["config"]["rto_min_ms"] == 200
    # a 200 ms timer wait costs more than a 1 ms one: at the same N the base cannot be faster
    if base["timeouts_kernel"]:
        assert fast["goodput_frac"] > base["goodput_frac"], (base["goodput_frac"], fast["goodput_frac"])
    assert by[("base", 1)]["timeouts_kernel"] == 0 or by[("base", 1)]["goodput_frac"] > 0.5


def test_the_report_and_rebuild_read_the_same_file(incast_run: Path, tmp_path: Path) -> None:
    assert (incast_run / "report.html").stat().st_size > 5_000
    copy = tmp_path / "run"
    shutil.copytree(incast_run, copy, ignore=shutil.ignore_patterns("report.*", "incast.json"))
    proc = run_cli(["incast", "--rebuild", str(copy)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = {(r["line"], r["senders"]): r["timeouts_kernel"] for r in rows(copy)}
    assert again == {(r["line"], r["senders"]): r["timeouts_kernel"] for r in rows(incast_run)}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--senders", "0"], "senders must be >= 1"),
        (["--senders", "16"], "16 senders need 17 hosts"),
        (["--sru", "0"], "sru_bytes (--sru) must be >= 1"),
        (["--cc", "foo"], "invalid choice: 'foo'"),
        (["--lines", "rto_min_ms=0.0001"], "below the kernel's 1 us"),
        (["--rto-min-ms", "0"], "rto_min_ms must be > 0"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_built(
    args: list[str], says: str, tmp_path: Path
) -> None:
    proc = run_cli(["incast", *args, "--results", str(tmp_path)], timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert says in last and last.startswith("incastlab incast: "), proc.stderr
    assert not list(tmp_path.iterdir()), "a refused run writes no folder"
    assert subprocess.run(["ip", "link", "show", "lf1"], capture_output=True).returncode != 0
