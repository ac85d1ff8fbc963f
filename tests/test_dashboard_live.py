"""The dashboard against the real controller: a real fabric with traffic, and a 4x8x4 plan."""

from __future__ import annotations

import socket

import pytest

from runmodel.config import ControllerOptions
from runmodel.fabric import FabricSpec, build_plan
from tests import test_dashboard as dash
from tests.conftest import guarded_host
from tests.iperf import start_incast
from tests.test_dashboard import driver  # noqa: F401 - the headless Chromium fixture

pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The default fabric with the real controller, polled every 0.5 s."""
    from incastlab.session import fabric_session

    workdir = tmp_path_factory.mktemp("dash")
    with (
        guarded_host("the dashboard session"),
        fabric_session(
            build_plan(FabricSpec()), ControllerOptions(api_port=free_port()), workdir, ping=False
        ) as sess,
    ):
        yield sess


@pytest.mark.integration
def test_live_fabric_is_drawn_updates_and_marks_incast_drops(live, driver):  # noqa: F811
    base = live.controller.base
    dash.open_dashboard(driver, base)
    dash.check_fabric_drawn(driver, base, 2, 4, 2)
    fab = live.fabric
    servers, clients = start_incast(fab, 5500, "-t", "6")
    try:
        dash.check_live_value_changes(driver, timeout=10)
        dash.check_ps_port_dropping(driver, base, dropping=True, timeout=10)
        dash.save_screenshot(driver, "live-incast.png")
        dash.check_tables(driver, base)
    finally:
        for p in clients + servers:
            p.terminate()
            p.wait()
    assert not dash.js_errors(driver)


@pytest.mark.integration
def test_live_page_says_stale_when_the_controller_stops(live, driver):  # noqa: F811
    base = live.controller.base
    dash.open_dashboard(driver, base)
    dash.check_stale_banner(driver, visible=False)
    live.controller.kill()
    try:
        dash.check_stale_banner(driver, visible=True, timeout=10)
        dash.save_screenshot(driver, "live-stale.png")
    finally:
        live.controller.start()
    dash.check_stale_banner(driver, visible=False, timeout=15)


def test_large_plan_from_the_real_controller_lays_out_cleanly(driver, tmp_path):  # noqa: F811
    """4 spines x 8 leaves x 4 hosts, served by the real controller process (no switches needed)."""
    from controller.launch import ControllerProcess

    plan = build_plan(FabricSpec(spines=4, leaves=8, hosts_per_leaf=4))
    ctl = ControllerProcess(plan, ControllerOptions(of_port=free_port(), api_port=free_port()), tmp_path)
    ctl.start()
    try:
        dash.open_dashboard(driver, ctl.base)
        dash.check_fabric_drawn(driver, ctl.base, 4, 8, 4)
        dash.check_layout(driver)
        dash.save_screenshot(driver, "live-4x8x4.png")
    finally:
        ctl.stop()
