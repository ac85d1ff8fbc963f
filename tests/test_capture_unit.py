"""capture/ without a network: parsers, and PcapCapture's life cycle against a fake tcpdump."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capture.counters import counter_deltas, parse_nstat, read_host_counters
from capture.cpu import CpuSampler, StreamedReadings, stream_script
from capture.pcap import CaptureError, CapturePoint, PcapCapture, parse_tcpdump_stats
from capture.queue_depth import (
    TCA_STATS2,
    TCA_STATS_BASIC,
    TCA_STATS_PKT64,
    TCA_STATS_QUEUE,
    ClassStats,
    QueueSampler,
    QueueSamplerError,
    RemoteQueueSampler,
    parse_tclass_stats,
)
from runmodel.records import HostCounters

# A stand-in for tcpdump: behaves as its first argument says, then ignores the tcpdump argv.
FAKE_TCPDUMP = r"""
import signal, sys, time
mode = sys.argv[1]
iface = sys.argv[sys.argv.index("-i") + 1]
def counters(captured, received, dropped):
    sys.stderr.write(f"{captured} packets captured\n{received} packets received by filter\n"
                     f"{dropped} packets dropped by kernel\n")
    sys.stderr.flush()
if mode == "nodev":
    sys.stderr.write(f"tcpdump: {iface}: No such device exists\n(No such device exists)\n")
    sys.exit(1)
if mode == "silent":
    time.sleep(60)
    sys.exit(0)
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
sys.stderr.write(f"tcpdump: listening on {iface}, link-type EN10MB (Ethernet), snapshot length 128 bytes\n")
sys.stderr.flush()
if mode == "dies":
    sys.stderr.write("tcpdump: pcap_loop: The interface disappeared\n")
    counters(3, 3, 0)
    sys.exit(1)
while not stop:
    time.sleep(0.01)
if mode == "ok":
    counters(42, 42, 0)
elif mode == "drops":
    counters(40, 45, 5)
elif mode == "one":
    sys.stderr.write("1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n")
sys.exit(0)
"""


def fake(mode: str, launched: list[subprocess.Popen[Any]]):
    """A popen for CapturePoint that runs the fake tcpdump in `mode` and remembers the process."""

    def popen(argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
        assert argv[0] == "tcpdump"
        proc = subprocess.Popen([sys.executable, "-c", FAKE_TCPDUMP, mode, *argv[1:]], **kw)
        launched.append(proc)
        return proc

    return popen


def point(tmp_path: Path, name: str, mode: str, launched: list[subprocess.Popen[Any]]) -> CapturePoint:
    return CapturePoint(name, f"if-{name}", tmp_path / "pcap" / f"{name}.pcap", fake(mode, launched))


def all_ended(launched: list[subprocess.Popen[Any]]) -> bool:
    return all(p.poll() is not None for p in launched)


def test_parse_tcpdump_stats() -> None:
    lines = [
        "tcpdump: listening on lf1-eth3, link-type EN10MB (Ethernet), snapshot length 128 bytes",
        "1 packet captured",
        "12 packets received by filter",
        "3 packets dropped by kernel",
        "7 packets dropped by interface",
    ]
    assert parse_tcpdump_stats(lines) == {
        "packets_captured": 1,
        "packets_received": 12,
        "packets_dropped_kernel": 3,
        "packets_dropped_interface": 7,
    }
    assert parse_tcpdump_stats(["tcpdump: x: No such device exists"]) == {}


def test_argv_is_the_documented_command(tmp_path: Path) -> None:
    cap = PcapCapture([CapturePoint("ps-port", "lf1-eth3", tmp_path / "p.pcap")], bpf="tcp port 5000")
    assert cap.argv(cap.points[0]) == [
        "tcpdump",
        "-i",
        "lf1-eth3",
        "-s",
        "128",
        "-B",
        "8192",
        "-w",
        str(tmp_path / "p.pcap"),
        "--immediate-mode",
        "-n",
        "-U",
        "tcp",
        "port",
        "5000",
    ]


def test_clean_run_writes_complete_capture_json(tmp_path: Path) -> None:
    launched: list[subprocess.Popen[Any]] = []
    cap = PcapCapture(
        [point(tmp_path, "ps-port", "ok", launched), point(tmp_path, "h2", "one", launched)],
        base_dir=tmp_path,
        drain_s=0,
    )
    with cap:
        assert len(launched) == 2 and not any(p.poll() is not None for p in launched)
    doc = json.loads((tmp_path / "capture.json").read_text())
    assert doc["complete"] is True
    assert [(p["name"], p["file"], p["packets_captured"], p["complete"]) for p in doc["points"]] == [
        ("ps-port", "pcap/ps-port.pcap", 42, True),
        ("h2", "pcap/h2.pcap", 1, True),
    ]
    assert all_ended(launched)
    assert cap.stop() == doc  # idempotent, same document


def test_kernel_drops_make_point_incomplete(tmp_path: Path) -> None:
    launched: list[subprocess.Popen[Any]] = []
    cap = PcapCapture(
        [point(tmp_path, "a", "ok", launched), point(tmp_path, "b", "drops", launched)], drain_s=0
    )
    cap.start()
    doc = cap.stop()
    assert doc["complete"] is False
    b = doc["points"][1]
    assert (b["complete"], b["packets_captured"], b["packets_received"], b["packets_dropped_kernel"]) == (
        False,
        40,
        45,
        5,
    )
    assert doc["points"][0]["complete"] is True


def test_missing_interface_is_a_one_line_error_naming_the_point(tmp_path: Path) -> None:
    launched: list[subprocess.Popen[Any]] = []
    points = [point(tmp_path, "good", "ok", launched), point(tmp_path, "ps-port", "nodev", launched)]
    cap = PcapCapture(points, drain_s=0)
    with pytest.raises(CaptureError) as err:
        cap.start()
    msg = str(err.value)
    assert "\n" not in msg and "'ps-port'" in msg and "No such device" in msg and "good" not in msg
    assert all_ended(launched)  # the point that did start was stopped too
    doc = cap.stop()
    assert cap.stop() == doc
    assert doc["complete"] is False
    assert doc["points"][0]["complete"] is True and doc["points"][1]["complete"] is False
    assert "No such device" in doc["points"][1]["error"]


def test_start_times_out_when_tcpdump_never_listens(tmp_path: Path) -> None:
    launched: list[subprocess.Popen[Any]] = []
    cap = PcapCapture([point(tmp_path, "mute", "silent", launched)], start_timeout=0.5, stop_timeout=1)
    with pytest.raises(CaptureError, match="'mute'.*not listening"):
        cap.start()
    assert all_ended(launched)
    assert cap.stop()["points"][0]["complete"] is False


def test_tcpdump_that_died_early_is_reported_not_raised(tmp_path: Path) -> None:
    launched: list[subprocess.Popen[Any]] = []
    cap = PcapCapture(
        [point(tmp_path, "gone", "dies", launched), point(tmp_path, "ok", "ok", launched)], drain_s=0
    )
    cap.start()
    launched[0].wait(timeout=10)
    doc = cap.stop()
    gone = doc["points"][0]
    assert gone["complete"] is False and "interface disappeared" in gone["error"]
    assert gone["packets_captured"] == 3
    assert doc["points"][1]["complete"] is True and doc["complete"] is False


# A stand-in for ssh to another machine: runs its command as a child whose stderr is the pipe back,
# writes the child's pid to argv[1], and on SIGINT drops the connection (kills the child): what a
# signal to the local ssh does to a remote tcpdump's closing counters.
FAKE_SSH = r"""
import os, signal, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
open(sys.argv[1], "w").write(str(child.pid))
def dropped(*a):
    child.kill()
    os._exit(255)
signal.signal(signal.SIGINT, dropped)
sys.exit(child.wait())
"""


def test_a_remote_tcpdump_is_interrupted_where_it_runs(tmp_path: Path) -> None:
    """A point with `interrupt` (a tcpdump behind ssh): stop() SIGINTs it there, not the local ssh,
    so its closing counters come back through the pipe and the point is complete."""
    pidfile = tmp_path / "remote.pid"
    wrappers: list[subprocess.Popen[Any]] = []

    def over_ssh(argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
        cmd = [sys.executable, "-c", FAKE_SSH, str(pidfile), sys.executable, "-c", FAKE_TCPDUMP, "ok"]
        wrappers.append(subprocess.Popen([*cmd, *argv[1:]], **kw))
        return wrappers[-1]

    def interrupt() -> None:
        os.kill(int(pidfile.read_text()), signal.SIGINT)

    far = CapturePoint("h5", "h5-eth0", tmp_path / "pcap" / "h5.pcap", over_ssh, interrupt=interrupt)
    doc = PcapCapture([far], base_dir=tmp_path, drain_s=0).__enter__().stop()
    assert doc["points"][0]["packets_captured"] == 42 and doc["complete"] is True, doc
    assert wrappers[0].returncode == 0  # the ssh stand-in ended with its command, never signalled


def test_stop_without_start_is_harmless(tmp_path: Path) -> None:
    cap = PcapCapture([CapturePoint("p", "eth9", tmp_path / "p.pcap")])
    doc = cap.stop()
    assert doc["complete"] is False and doc["points"][0]["error"] == "never started"


def test_duplicate_point_names_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        PcapCapture([CapturePoint("p", "a", tmp_path / "a"), CapturePoint("p", "b", tmp_path / "b")])


def _rtattr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _tcmsg_with_stats(
    bytes_: int, packets: int, qlen: int, backlog: int, drops: int, pkt64: int | None = None
) -> bytes:
    basic = struct.pack("=QI", bytes_, packets) + b"\0" * 4  # the kernel pads gnet_stats_basic to 16
    nested = _rtattr(TCA_STATS_BASIC, basic) + _rtattr(
        TCA_STATS_QUEUE, struct.pack("=IIIII", qlen, backlog, drops, 0, 9)
    )
    if pkt64 is not None:
        nested += _rtattr(TCA_STATS_PKT64, struct.pack("=Q", pkt64))
    tcmsg = struct.pack("=BxxxiIII", 0, 5, 0x10001, 0x10000, 0)
    return tcmsg + _rtattr(1, b"htb\0") + _rtattr(TCA_STATS2 | 0x8000, nested)


def test_parse_tclass_stats() -> None:
    assert parse_tclass_stats(_tcmsg_with_stats(3000, 2, 20, 30280, 7)) == ClassStats(30280, 20, 7, 2)
    assert parse_tclass_stats(_tcmsg_with_stats(1, 5, 0, 0, 0, pkt64=1 << 33)).sent_packets == 1 << 33
    assert parse_tclass_stats(struct.pack("=BxxxiIII", 0, 5, 0x10001, 0, 0)) is None


def test_sampler_rejects_missing_interface(tmp_path: Path) -> None:
    sampler = QueueSampler(["lo", "iltcap-none"], tmp_path / "q.jsonl")
    with pytest.raises(QueueSamplerError, match="iltcap-none"):
        sampler.start()
    assert sampler.stop()["samples"] == 0


# /proc/net/snmp and /proc/net/netstat excerpts as a 6.x kernel writes them (groups in pairs of lines)
SNMP = """Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 32552
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens CurrEstab InSegs OutSegs RetransSegs
Tcp: 1 200 120000 -1 689 12 32444 29699 46
Udp: InDatagrams NoPorts
Udp: 107 0
"""
NETSTAT = """TcpExt: SyncookiesSent DelayedACKs TCPTimeouts TCPLossProbes
TcpExt: 0 311 5 9
IpExt: InNoRoutes InOctets
IpExt: 0 9913350
"""


def test_parse_nstat_keeps_the_tcp_groups_under_nstat_names() -> None:
    got = parse_nstat(SNMP, NETSTAT)
    # by hand from the excerpts above: group name + field name, Ip/Udp/IpExt left out
    assert got == {
        "TcpRtoAlgorithm": 1,
        "TcpRtoMin": 200,
        "TcpRtoMax": 120000,
        "TcpMaxConn": -1,
        "TcpActiveOpens": 689,
        "TcpCurrEstab": 12,
        "TcpInSegs": 32444,
        "TcpOutSegs": 29699,
        "TcpRetransSegs": 46,
        "TcpExtSyncookiesSent": 0,
        "TcpExtDelayedACKs": 311,
        "TcpExtTCPTimeouts": 5,
        "TcpExtTCPLossProbes": 9,
    }


def test_counter_deltas_keep_only_what_moved() -> None:
    before = HostCounters(40, 1000, 2000, {"TcpRetransSegs": 40, "TcpExtTCPTimeouts": 2, "TcpCurrEstab": 5})
    after = HostCounters(46, 1500, 2600, {"TcpRetransSegs": 46, "TcpExtTCPTimeouts": 2, "TcpCurrEstab": 3})
    assert counter_deltas(before, after) == HostCounters(
        6, 500, 600, {"TcpCurrEstab": -2, "TcpRetransSegs": 6}
    )


def test_host_counters_of_this_process_namespace() -> None:
    # this process's own namespace: every TCP counter nstat shows is there; no such interface: 0 bytes
    got = read_host_counters("iltcap-none", os.getpid())
    assert {"TcpRetransSegs", "TcpExtTCPTimeouts", "TcpOutSegs"} <= set(got.kernel)
    assert (got.rx_bytes, got.tx_bytes) == (0, 0)


def test_a_servers_cpu_streamed_by_one_command_is_sampled_per_block(tmp_path: Path) -> None:
    """CpuSampler fed by StreamedReadings (here the server script run by sh on this machine instead
    of ssh): a line per block, every core of this machine, and a core kept busy by a pinned child
    shows as busy (the child's own work is the oracle)."""
    out = tmp_path / "cpu-server.jsonl"
    sampler = CpuSampler(out, source=StreamedReadings(["sh", "-c", stream_script(0.2)]))
    sampler.start()
    burn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, time\nos.sched_setaffinity(0, {0})\nt = time.time()\n"
            "while time.time() - t < 1.2: pass",
        ]
    )
    burn.wait()
    sampler.stop()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 4, rows  # 1.2 s of 0.2 s blocks, the first one the baseline
    assert all(len(r["cores"]) == os.cpu_count() for r in rows)
    assert max(r["cores"][0] for r in rows) >= 0.9, rows
    assert sampler.source is not None and sampler.source.proc.poll() is not None  # the command ended


def _remote_sampler(tmp_path: Path, port: str) -> RemoteQueueSampler:
    """A RemoteQueueSampler whose 'server' is a private network namespace of this machine with one
    veth port under a pfifo root qdisc (what ssh to a server would reach)."""
    line = (
        "ip link add d0 type veth peer name d1 && ip link set d0 up && "
        "tc qdisc add dev d0 root pfifo limit 10 && "
        f"exec {sys.executable} -m capture.queue_depth {tmp_path / 'q.jsonl'} 0.01 {port}"
    )
    return RemoteQueueSampler(["unshare", "-n", "sh", "-c", line])


def test_a_remote_queue_sampler_stops_on_its_input_and_returns_its_summary(tmp_path: Path) -> None:
    sampler = _remote_sampler(tmp_path, "d0")
    sampler.start()
    assert sampler.proc is not None and sampler.proc.poll() is None
    summary = sampler.stop()
    assert summary["error"] is None and summary["samples"] >= 2, summary
    assert summary["ports"] == {"d0": {"max_backlog_packets": 0, "max_backlog_bytes": 0, "drops_delta": 0}}
    rows = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert {r["port"] for r in rows} == {"d0"} and len(rows) >= 2  # the first and the last sample
    assert sampler.proc.returncode == 0


def test_a_remote_queue_samplers_error_is_its_own_line(tmp_path: Path) -> None:
    sampler = _remote_sampler(tmp_path, "iltcap-none")
    with pytest.raises(QueueSamplerError, match="no interface 'iltcap-none'"):
        sampler.start()
    assert sampler.proc is not None and sampler.proc.poll() is not None
