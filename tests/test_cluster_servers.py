"""The cluster's server checks (topologies.servers.preflight_servers) refuse bad input in one line per
missing piece, before anything is built.

ssh is faked by a script first on PATH (a faked process, as the rules allow): it refuses 192.0.2.*
(TEST-NET: nothing is sent) like an unreachable machine, and runs the check script of any other
address here, with a PATH of its own per address, so a server can lack ovs-vsctl, and `hostname`
says the name the test gives it (two addresses, one machine).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from incastlab.cli import main
from runmodel.config import ControllerOptions
from runmodel.params import ParamError
from topologies.servers import ServerError, preflight_servers

FAKE_SSH = """#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in -o|-F) shift 2;; -tt|-n|-q) shift;; *) break;; esac
done
host=${1#root@}; shift
case "$host" in 192.0.2.*) echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255;; esac
exec env PATH="$FAKE_BIN/$host" sh -c "$*"
"""
TOOLS = ("cat", "grep", "cut", "ip", "ovs-vsctl", "mnexec", "tr", "sh", "env", "printf")


def fake_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: dict[str, dict]) -> None:
    """ssh faked on PATH; per address a bin folder of real tools (less `missing`) and a hostname."""
    bindir = tmp_path / "ssh-bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(FAKE_SSH)
    (bindir / "ssh").chmod(0o755)
    for addr, how in servers.items():
        d = tmp_path / "servers" / addr
        d.mkdir(parents=True)
        for tool in TOOLS:
            if tool not in how.get("missing", ()) and (real := shutil.which(tool)):
                (d / tool).symlink_to(real)
        if (d / "ovs-vsctl").exists():  # its bridges are the test's, not those of a run on this machine
            bridges = "\\n".join(how.get("bridges", ()))
            (d / "ovs-vsctl").unlink()
            real = shutil.which("ovs-vsctl")
            (d / "ovs-vsctl").write_text(
                f'#!/bin/sh\ncase "$*" in *list-br*) printf "{bridges}";; *) exec {real} "$@";; esac\n'
            )
            (d / "ovs-vsctl").chmod(0o755)
        (d / "hostname").write_text(f"#!/bin/sh\necho {how.get('name', addr)}\n")
        (d / "hostname").chmod(0o755)
    monkeypatch.setenv("FAKE_BIN", str(tmp_path / "servers"))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.delenv("INCASTLAB_SSH_CONFIG", raising=False)


def refusal(servers: list[str], **kw: object) -> list[str]:
    with pytest.raises(ServerError) as info:
        preflight_servers(servers, **kw)  # type: ignore[arg-type]
    return info.value.lines


@pytest.fixture
def need_ovs() -> None:
    if shutil.which("ovs-vsctl") is None or shutil.which("mnexec") is None:
        pytest.fail("ovs-vsctl and mnexec are part of the project's set-up (make deps)")


def test_two_good_servers_pass(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {}, "127.0.0.3": {}})
    assert preflight_servers(["127.0.0.2", "127.0.0.3"]) == {
        "127.0.0.2": "127.0.0.2",
        "127.0.0.3": "127.0.0.3",
    }


def test_unreachable_server_is_one_line(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {}})
    lines = refusal(["127.0.0.2", "192.0.2.7"])
    assert lines == [
        "server 192.0.2.7: not reachable by ssh as root in BatchMode "
        "(ssh: connect to host 192.0.2.7 port 22: No route to host)"
    ]


def test_server_without_ovs_is_named(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {}, "127.0.0.3": {"missing": ("ovs-vsctl",)}})
    lines = refusal(["127.0.0.2", "127.0.0.3"])
    assert lines == [
        "server 127.0.0.3: Open vSwitch is not installed or not answering (ovs-vsctl show failed)"
    ]


def test_server_without_the_venv_is_named(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {}})
    nowhere = tmp_path / "no-checkout" / ".venv" / "bin" / "python"
    lines = refusal(["127.0.0.2"], python=nowhere)
    assert lines == [f"server 127.0.0.2: no venv at {nowhere} (the checkout and its venv at the same paths)"]
    # the same server with this process's own interpreter passes: the line was about the venv only
    assert preflight_servers(["127.0.0.2"], python=Path(sys.executable))


def test_one_machine_under_two_addresses_is_refused(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {"name": "box"}, "127.0.0.3": {"name": "box"}})
    lines = refusal(["127.0.0.2", "127.0.0.3"])
    assert lines == ["server 127.0.0.3: the same machine as 127.0.0.2: name each machine once"]


def test_one_address_under_two_names_is_refused(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {}})
    lines = refusal(["127.0.0.2", "127.000.000.002"])  # a second spelling that resolves to the first
    assert lines == [
        "server 127.000.000.002: the same machine as 127.0.0.2 (127.0.0.2): name each machine once"
    ]


def test_every_missing_piece_is_its_own_line(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.3": {"missing": ("ovs-vsctl", "mnexec")}})
    lines = refusal(["127.0.0.3", "192.0.2.9"], python=tmp_path / "none")
    assert len(lines) == 4, lines
    assert sum("127.0.0.3" in ln for ln in lines) == 3 and sum("192.0.2.9" in ln for ln in lines) == 1


def test_leftovers_on_a_server_are_named(tmp_path, monkeypatch, need_ovs):
    fake_servers(tmp_path, monkeypatch, {"127.0.0.2": {"bridges": ("lf1", "sp2", "br-other")}})
    lines = refusal(["127.0.0.2"])
    assert lines == [
        "server 127.0.0.2: leftovers of an earlier run (bridges lf1 sp2): remove them with `incastlab clean`"
    ]


def test_the_same_server_twice_is_refused_by_the_flag(capsys):
    with pytest.raises(ParamError, match="names 10.0.0.9 twice"):
        ControllerOptions(servers=("10.0.0.9", "10.0.0.8", "10.0.0.9")).validate()
    assert main(["fabric", "--servers", "s1,s1", "--no-calibrate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["incastlab fabric: --servers names s1 twice: each machine once"]


def test_placement_is_by_leaf():
    from runmodel.fabric import FabricSpec, build_plan
    from topologies.cluster import placement

    plan = build_plan(FabricSpec())  # 4 leaves of 2 hosts under 2 spines
    where = placement(plan, ["a", "b", "c"])
    # leaves in order, split in 3 blocks: lf1, lf2 | lf3 | lf4 (i * 3 // 4 = 0, 0, 1, 2)
    assert [where[f"lf{k}"] for k in (1, 2, 3, 4)] == ["a", "a", "b", "c"]
    assert [where["sp1"], where["sp2"]] == ["a", "b"]
    assert all(where[h.name] == where[h.leaf] for h in plan.hosts)


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (
            ["--fault", "link-down:lf1-eth1@5s"],
            "--servers: faults, stragglers and jobs do not run over several machines yet",
        ),
        (
            ["--straggler", "h3:cpu=0.5"],
            "--servers: faults, stragglers and jobs do not run over several machines yet",
        ),
    ],
)
def test_a_run_over_servers_refuses_what_it_cannot_do(tmp_path, flags, line):
    from incastlab.cli import build_parser
    from incastlab.cliflags import config_from_args
    from runmodel.config import load_scenario
    from topologies.servers import refuse_for_cluster

    ns = build_parser().parse_args(["compare", "--servers", "192.0.2.1", *flags])
    cfg = config_from_args(
        ns, load_scenario(Path(__file__).parent.parent / "incastlab/scenarios/compare.json")
    )
    with pytest.raises(ServerError) as info:
        refuse_for_cluster(cfg, tmp_path, print)
    assert info.value.lines == [line]


def test_tunnel_drops_degrade_the_verdict():
    from analysis.fidelity import cluster_reasons, run_verdict

    ends = {
        "lf1-eth2": {"tx_packets": 600, "tx_dropped": 3, "rx_dropped": 0, "tx_errors": 0, "rx_errors": 1},
        "sp2-eth1": {"tx_packets": 400, "tx_dropped": 0, "rx_dropped": 2, "tx_errors": 0, "rx_errors": 0},
    }
    reasons = cluster_reasons({"tunnel_counters": ends})
    assert reasons and "dropped 6 of 1000 packets" in reasons[0]  # 3 + 1 + 2 by hand; 600 + 400 sent
    assert run_verdict({"ps": {"verdict": "trustworthy", "reasons": []}}, reasons)["verdict"] == "degraded"
    clean = {k: {**v, "tx_dropped": 0, "rx_dropped": 0, "rx_errors": 0} for k, v in ends.items()}
    assert cluster_reasons({"tunnel_counters": clean}) == [] and cluster_reasons(None) == []


def test_a_saturated_server_is_named_in_the_verdict():
    """cluster.json's per-strategy CPU figures of each server: one over the CPU check's limit
    (MAX_SATURATED_SHARE, 25 % of the seconds) is named with its strategy; one under it is not."""
    from analysis.fidelity import cluster_reasons, run_verdict

    cpu = {
        "ps": {"10.0.0.1": {"cpu_saturated_share": 0.5}, "10.0.0.2": {"cpu_saturated_share": 0.2}},
        "ring": {"10.0.0.1": {"cpu_saturated_share": None}, "10.0.0.2": {"cpu_saturated_share": 0.25}},
    }
    reasons = cluster_reasons({"server_cpu": cpu})
    assert len(reasons) == 1 and reasons[0].startswith("ps: server 10.0.0.1: every core"), reasons
    assert "in 50% of the seconds" in reasons[0]
    assert run_verdict({"ps": {"verdict": "trustworthy", "reasons": []}}, reasons)["verdict"] == "degraded"


def test_the_servers_queue_samplers_are_merged_into_one_file(tmp_path):
    """Recorder over two 'servers' (here two private network namespaces of this machine, each with
    the ports its switches hold as veths under a pfifo root, reached by unshare instead of ssh):
    one sampler each, of its own ports only; stop() merges their samples into one time-ordered
    queue_depth.jsonl (the parts gone) and one summary with every port and each server's account."""
    import json
    import types

    from incastlab.record import Recorder
    from runmodel.fabric import FabricSpec, build_plan
    from runmodel.folder import StrategyFolder
    from topologies.cluster import placement

    plan = build_plan(FabricSpec())
    where = placement(plan, ["a", "b"])
    switch_of = {p.name: p.switch for p in plan.switch_ports()}

    def server_python(server, args):
        ports = args[4:]  # -m capture.queue_depth OUT INTERVAL PORT...
        assert all(where[switch_of[p]] == server for p in ports), (server, ports)
        make = " && ".join(
            f"ip link add {p} type veth peer name v{k} && ip link set {p} up && "
            f"tc qdisc add dev {p} root pfifo limit 10"
            for k, p in enumerate(ports)
        )
        return ["unshare", "-n", "sh", "-c", f"{make} && exec {sys.executable} {shlex.join(args)}"]

    fabric = types.SimpleNamespace(
        servers=["a", "b"], where=where, server_python=server_python, ports_here=False
    )
    folder = StrategyFolder(tmp_path, "ps")
    rec = Recorder(
        types.SimpleNamespace(fabric=fabric, plan=plan),
        folder,
        print,
        port=plan.ps_port.name,
        port_point="ps-port",
        hosts=[],
        capture="none",
        snaplen=128,
        queue_sample_ms=10,
    )
    rec._start_server_samplers(sorted(plan.port_names()))
    assert sorted(rec.server_samplers) == ["a", "b"]
    summary = rec._stop_server_samplers()
    assert summary["error"] is None and set(summary["ports"]) == plan.port_names(), summary
    assert sorted(summary["servers"]) == ["a", "b"]
    ps_server = where[switch_of[plan.ps_port.name]]
    assert summary["samples"] == summary["servers"][ps_server]["samples"] >= 2
    rows = [json.loads(line) for line in folder.queue_depth_file.read_text().splitlines()]
    assert {r["port"] for r in rows} == plan.port_names()  # the first sample writes every port
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queue_depth.jsonl"]


class _PingHost:
    def __init__(self, out: str) -> None:
        self.out = out

    def cmd(self, _line: str) -> str:
        return self.out


class _PingFabric:
    def __init__(self, out: str) -> None:
        self.out = out

    def host(self, _name: str) -> _PingHost:
        return _PingHost(self.out)


def test_ping_rtt_reads_pings_summary_and_a_missing_rtt_is_null() -> None:
    from incastlab.clustercheck import ping_rtt

    ok = "50 packets transmitted, 50 received, 0% packet loss\nrtt min/avg/max/mdev = 0.1/0.25/0.9/0.05 ms"
    assert ping_rtt(_PingFabric(ok), "h1", "10.0.0.2") == {"loss_pct": 0.0, "avg_ms": 0.25, "max_ms": 0.9}
    lost = "50 packets transmitted, 0 received, 100% packet loss, time 1010ms\n"
    assert ping_rtt(_PingFabric(lost), "h1", "10.0.0.2") == {
        "loss_pct": 100.0,
        "avg_ms": None,
        "max_ms": None,
    }
