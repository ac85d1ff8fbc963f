"""A pinned run survives a controller restart, and its decisions show in the record, the API and the
live dashboard: the ring under `--routing firstfit` with `controller-restart@step2` (about 25 s)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request
from typing import Any

import pytest

from runmodel.records import read_jsonl
from tests import test_dashboard as dash
from tests.conftest import ROOT, incastlab_cmd
from tests.test_dashboard import driver  # noqa: F401 - the headless Chromium fixture
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]
STEPS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=2) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def test_firstfit_pins_flows_that_survive_a_controller_restart(clean_host, driver, tmp_path):  # noqa: F811
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        incastlab_cmd()
        + [
            "compare",
            "--strategies",
            "ring",
            "--workers",
            "3",
            "--steps",
            str(STEPS),
            "--routing",
            "firstfit",
        ]
        + ["--capture", "ps-port", "--fault", "controller-restart@step2", "--api-port", str(port)]
        + ["--results", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[dict[str, Any]] = []  # every routing decision /api/events served while the run lasted

    def watch_events() -> None:
        while proc.poll() is None:
            try:
                events = api(base, "/api/events")["events"]
            except (OSError, ValueError):
                time.sleep(0.3)
                continue
            for e in events:
                if e["event"] == "flow_pinned" and e not in seen:
                    seen.append(e)
            time.sleep(0.3)

    watcher = threading.Thread(target=watch_events, daemon=True)
    watcher.start()
    try:
        wait_for(lambda: proc.poll() is not None or api_up(base), 60, "the controller's API")
        dash.open_dashboard(driver, base, timeout=30)
        wait_for(
            lambda: driver.execute_script(
                "return document.querySelectorAll('#routing-table tr[data-event=flow_pinned]').length > 0"
                " && document.querySelectorAll('#flows-table tbody tr').length > 0"
            ),
            40,
            "a pin decision and a flow row on the dashboard",
        )
        shown = driver.execute_script("return document.querySelector('#routing-table tbody tr').innerText")
        dash.save_screenshot(driver, "routing-firstfit.png")
        assert not dash.js_errors(driver)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=30)
    watcher.join(timeout=5)
    assert proc.returncode == 0, err[-2000:]
    assert "flow_pinned" in shown and "→ sp" in shown, shown

    run = tmp_path / "latest"
    assert json.loads((run / "config.json").read_text())["controller"]["routing"] == "firstfit"
    rows = read_jsonl(run / "controller.jsonl")
    pins = [r for r in rows if r.get("event") == "flow_pinned"]
    assert pins, "firstfit pinned no flow"
    for p in pins:
        assert p["old_path"] is None and p["new_path"].startswith("sp") and "least-loaded" in p["why"]
    assert seen and {e["flow"] for e in seen} <= {p["flow"] for p in pins}, "the API served the recorded pins"

    # every flow went the way it was pinned: the spine whose exact entry counted it is the chosen one
    pinned = {p["flow"]: p["new_path"] for p in pins}
    flow_rows = [r for r in rows if r.get("kind") == "flow"]
    last = {r["flow"]: r for r in flow_rows}
    big = {f: r for f, r in last.items() if f in pinned and r["bytes"] > 100_000}
    assert big, "the ring's data flows are pinned"
    for flow, r in big.items():
        assert r["spine"] == pinned[flow], f"{flow} took {r['spine']}, pinned to {pinned[flow]}"

    # the restart: training went on, and the pinned data flows moved bytes after the new controller came
    faults = read_jsonl(run / "ring" / "faults.jsonl")
    t_back = next(f["t"] for f in faults if f.get("state") == "restarted")
    steps = [r for r in read_jsonl(run / "ring" / "worker-0.jsonl") if "step" in r]
    assert len(steps) == STEPS, "training went on through the restart"
    before = {
        f: max((r["bytes"] for r in flow_rows if r["flow"] == f and r["t"] <= t_back), default=0) for f in big
    }
    after = {
        f: max((r["bytes"] for r in flow_rows if r["flow"] == f and r["t"] > t_back), default=0) for f in big
    }
    stalled = [f for f in big if after[f] <= before[f]]
    assert not stalled, f"pinned flows moved no bytes after the restart: {stalled}"


def api_up(base: str) -> bool:
    try:
        api(base, "/api/topology")
        return True
    except (OSError, ValueError):
        return False
