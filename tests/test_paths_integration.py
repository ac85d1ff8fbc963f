"""`incastlab paths` on a real fabric: every probe mapped to one spine, and the mapping agrees with
the spines' kernel interface counters (sysfs), read here, not through ovs-ofctl as the product does."""

from __future__ import annotations

from pathlib import Path

import pytest

from incastlab.paths import ProbeSpec, Sender, probe_paths, spine_ports
from runmodel.config import ControllerOptions
from runmodel.fabric import FabricSpec, build_plan, iface
from tests.conftest import guarded_host
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SPEC = FabricSpec(spines=4, leaves=2, hosts_per_leaf=2, runtime="netns")


def sysfs_tx(ports: dict[str, int]) -> dict[str, int]:
    """Each spine's kernel tx packet counter on its interface toward the destination leaf."""
    return {
        sp: int(Path(f"/sys/class/net/{iface(sp, port)}/statistics/tx_packets").read_text())
        for sp, port in ports.items()
    }


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from incastlab.session import fabric_session

    workdir = tmp_path_factory.mktemp("paths")
    with (
        guarded_host("the session"),
        fabric_session(build_plan(SPEC), ControllerOptions(), workdir, ping=False) as sess,
    ):
        yield sess


def test_sixteen_probes_agree_with_the_spines_kernel_counters(session):
    probe = ProbeSpec("h1", "h3", count=16, proto="tcp")
    probe.validate(SPEC)
    ports = spine_ports(session.plan, "h3")
    assert sorted(ports) == ["sp1", "sp2", "sp3", "sp4"]
    before = sysfs_tx(ports)
    probes = probe_paths(session, probe)
    after = sysfs_tx(ports)
    assert [p.sport for p in probes] == probe.sports
    assert all(p.spine in ports for p in probes), [(p.sport, p.deltas) for p in probes]
    # the kernel saw, on each spine's port toward lf2, at least the probes mapped to that spine
    # and no more than a few stray frames besides (nothing else runs on this fabric)
    for sp in ports:
        # each probe: its counted frames and its first frame sent alone ahead of them (same hash)
        mapped = (probe.packets + 1) * sum(p.spine == sp for p in probes)
        moved = after[sp] - before[sp]
        assert mapped <= moved <= mapped + 2 * probe.packets, (sp, mapped, moved)
    assert len({p.spine for p in probes}) >= 2, "16 flows hashed onto one spine of four"
    # per flow: the same 5-tuple sent again moves the kernel counter of the spine it was mapped to
    sender = Sender(session.fabric.host("h1").shell.pid, session.plan.host("h1").nic, session.plan, probe)
    try:
        for p in probes[:6]:
            was = sysfs_tx(ports)
            sender.send(p.sport)
            wait_for(
                lambda w=was: sum(sysfs_tx(ports).values()) - sum(w.values()) >= probe.packets,
                5,
                "the probe's frames on a spine",
            )
            now = sysfs_tx(ports)
            assert now[p.spine] - was[p.spine] >= probe.packets, (p.sport, p.spine, was, now)
    finally:
        sender.close()


def test_udp_probes_are_mapped_too(session):
    probe = ProbeSpec("h4", "h2", count=4, proto="udp", dport=9)
    probes = probe_paths(session, probe)
    assert all(p.spine is not None for p in probes), [p.deltas for p in probes]


def test_no_fabric_interface_speaks_ipv6(session):
    """The kernel's own IPv6 (router solicitations, MLD) is off on every switch port and host
    interface: otherwise it crosses the spines every few seconds and the counters read above count
    it as probe frames. Asked of the kernel: /proc here for the switches, each host's namespace."""
    plan = session.plan
    for sw in plan.switches:
        for intf in session.fabric.net.get(sw.name).intfList():
            if intf.name != "lo":
                assert Path(f"/proc/sys/net/ipv6/conf/{intf.name}/disable_ipv6").read_text() == "1\n", intf
    for h in plan.hosts:
        nic = plan.host(h.name).nic
        got = session.fabric.host(h.name).cmd(f"cat /proc/sys/net/ipv6/conf/{nic}/disable_ipv6").strip()
        assert got == "1", (h.name, nic, got)
