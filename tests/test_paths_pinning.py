"""`incastlab paths` under a pinning policy (--routing firstfit): the controller's choice of each
probe's spine (its flow_pinned events) is what the switches did, by the spines' kernel counters.
Its own module: the other paths tests share one fabric, and only one fabric can be up."""

from __future__ import annotations

import pytest

from incastlab.paths import ProbeSpec, probe_paths, spine_ports
from runmodel.config import ControllerOptions
from runmodel.fabric import build_plan
from tests.conftest import guarded_host
from tests.test_paths_integration import SPEC, sysfs_tx

pytestmark = pytest.mark.integration


def test_under_firstfit_the_switches_follow_the_controllers_pins(tmp_path):
    """A pinning policy: each probe's flow_pinned event names the spine whose kernel counter moved."""
    from incastlab.session import fabric_session

    options = ControllerOptions(routing="firstfit")
    probe = ProbeSpec("h2", "h4", count=6, proto="tcp")
    with guarded_host("firstfit"), fabric_session(build_plan(SPEC), options, tmp_path, ping=False) as sess:
        ports = spine_ports(sess.plan, "h4")
        before = sysfs_tx(ports)
        probes = probe_paths(sess, probe)
        after = sysfs_tx(ports)
    assert all(p.pinned is not None for p in probes), "a probe without a flow_pinned event"
    assert [p.spine for p in probes] == [p.pinned for p in probes], [
        (p.sport, p.pinned, p.deltas) for p in probes
    ]
    for sp in ports:  # the counted frames; the first frame of each may have gone by the hash
        mapped = probe.packets * sum(p.pinned == sp for p in probes)
        assert mapped <= after[sp] - before[sp] <= mapped + probe.count + 2 * probe.packets, sp
