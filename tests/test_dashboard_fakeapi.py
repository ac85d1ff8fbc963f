"""The fake API (tests/fakeapi.py) serves what DESIGN.md says the controller serves (no browser)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakeapi import FakeApi, FakeFabric
from tests.waiting import wait_for


@pytest.fixture
def api() -> Iterator[FakeApi]:
    """A 4×8×4 fake sampling every 50 ms."""
    with FakeApi(FakeFabric(4, 8, 4, min_interval=0.05)) as fake:
        yield fake


def get(api: FakeApi, path: str, method: str = "GET") -> tuple[int, Any]:
    """(status, decoded JSON or text) of one request."""
    req = urllib.request.Request(api.url + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            body, status, ctype = resp.read(), resp.status, resp.headers["Content-Type"]
    except urllib.error.HTTPError as err:
        body, status, ctype = err.read(), err.code, err.headers["Content-Type"]
    return status, json.loads(body) if ctype.startswith("application/json") else body.decode()


def newer(api: FakeApi, path: str, t: float) -> Any:
    """The document at `path`, once its t is newer than `t` (the fake samples at most every 50 ms)."""
    return wait_for(lambda: (doc := get(api, path)[1])["t"] > t and doc, 5, f"{path} newer than t={t}")


def test_topology_names_and_ports(api: FakeApi) -> None:
    """Names, dpids, port numbering and the PS port follow DESIGN.md."""
    status, topo = get(api, "/api/topology")
    assert status == 200
    assert [s["name"] for s in topo["switches"]][:4] == ["sp1", "sp2", "sp3", "sp4"]
    assert {s["name"]: s["dpid"] for s in topo["switches"]}["lf8"] == 0x208
    assert len(topo["hosts"]) == 32 and len(topo["links"]) == 4 * 8 + 32
    h10 = next(h for h in topo["hosts"] if h["name"] == "h10")
    assert h10 == {
        "name": "h10",
        "ip": "10.0.0.10",
        "mac": "00:00:00:00:00:0a",
        "leaf": "lf3",
        "port": 6,
        "ps": False,
    }
    assert topo["ps_host"] == "h1" and topo["ps_port"] == {"switch": "lf1", "port": 5}
    assert {"a": "lf2", "a_port": 3, "b": "sp3", "b_port": 2, "kind": "uplink", "rate_mbit": 50.0} in topo[
        "links"
    ]


def test_counters_advance_and_timeseries(api: FakeApi) -> None:
    """t and byte counters grow between requests; timeseries honours since."""
    _, p1 = get(api, "/api/ports")
    p2 = newer(api, "/api/ports", p1["t"])
    assert len(p2["ports"]) == 8 * (4 + 4) + 4 * 8
    assert sum(p["tx_bytes"] for p in p2["ports"]) > sum(p["tx_bytes"] for p in p1["ports"])
    assert all(0 <= p["util"] <= 1 for p in p2["ports"])
    _, ts = get(api, f"/api/timeseries?since={p1['t']}")
    assert ts["samples"] and all(s["t"] > p1["t"] for s in ts["samples"])
    assert {s["kind"] for s in ts["samples"]} == {"port", "queue"}


def test_ps_drops_and_modes(api: FakeApi) -> None:
    """ps_dropping raises the PS queue's drops; frozen stops t; down answers nothing."""
    api.fabric.ps_dropping = True
    _, q0 = get(api, "/api/queues")
    q = newer(api, "/api/queues", q0["t"])
    ps = [e for e in q["queues"] if (e["switch"], e["port"]) == ("lf1", 5)]
    assert ps[0]["drops_per_s"] > 0 and ps[0]["drops"] > 0
    assert all(e["drops_per_s"] == 0 for e in q["queues"] if e not in ps)
    api.set_mode("frozen")
    _, a = get(api, "/api/ports")
    # until a new sample is due, the next answer would repeat t even if the fake were not frozen
    wait_for(lambda: time.time() >= a["t"] + api.fabric.min_interval, 5, "a new sample to be due")
    _, b = get(api, "/api/ports")
    assert a["t"] == b["t"]
    api.set_mode("down")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        get(api, "/api/ports")
    api.set_mode("ok")
    assert get(api, "/api/ports")[0] == 200


def test_errors_and_static(api: FakeApi) -> None:
    """404/400/405 JSON errors; / and /static/ serve the dashboard files."""
    assert get(api, "/api/nope")[0] == 404
    status, doc = get(api, "/api/timeseries?since=abc")
    assert status == 400 and "error" in doc
    assert get(api, "/api/ports", method="POST")[0] == 405
    status, html = get(api, "/")
    assert status == 200 and 'id="fabric"' in html and "/static/app.js" in html
    assert get(api, "/static/app.js")[0] == 200 and get(api, "/static/style.css")[0] == 200
    assert get(api, "/static/..%2fapi.py")[0] == 404
