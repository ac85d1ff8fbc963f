"""The controller's statistics store and HTTP API, driven with a fake clock and direct WSGI calls."""

from __future__ import annotations

import json

from controller.api import ApiApp
from controller.stats import StatsStore
from runmodel.fabric import FabricSpec, build_plan

PLAN = build_plan(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2, host_mbit=10, uplink_mbit=10))
LF1 = 0x201


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_rates_and_drops_per_second_from_counter_deltas(tmp_path):
    clock = Clock()
    store = StatsStore(PLAN, record=tmp_path / "rec.jsonl", clock=clock)
    store.add_port(LF1, 3, {"tx_bytes": 0}, duration=10.0)
    clock.t += 0.5
    s = store.add_port(LF1, 3, {"tx_bytes": 625_000}, duration=10.5)
    assert s["tx_bps"] == 10_000_000  # 625 kB in 0.5 s
    assert s["util"] == 1.0 and s["peer"] == "h1" and s["name"] == "lf1-eth3"
    store.add_queue(LF1, 3, 0, {"drops": 10}, duration=10.0)
    q = store.add_queue(LF1, 3, 0, {"drops": 30}, duration=12.0)
    assert q["drops_per_s"] == 10.0 and q["drops"] == 30
    store.close()
    lines = [json.loads(x) for x in (tmp_path / "rec.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["port", "port", "queue", "queue"]


def test_a_restarted_controller_serves_the_events_its_record_holds(tmp_path):
    """A controller started again on the run's record (fault controller-restart) serves the decisions
    the first one made, then its own, in order; the record keeps each once."""
    rec = tmp_path / "controller.jsonl"
    first = StatsStore(PLAN, record=rec, clock=Clock())
    first.add_event("flow_pinned", flow="tcp a>b", old_path=None, new_path="sp1", why="least-loaded")
    first.add_port(LF1, 3, {"tx_bytes": 0}, duration=1.0)
    first.close()
    second = StatsStore(PLAN, record=rec, clock=Clock())
    second.add_event("switch_connected", switch="lf1")
    assert [e["event"] for e in second.events] == ["flow_pinned", "switch_connected"]
    assert second.events[0]["new_path"] == "sp1" and not second.series, "samples are not replayed"
    second.close()
    kinds = [json.loads(x).get("event", x and json.loads(x)["kind"]) for x in rec.read_text().splitlines()]
    assert kinds == ["flow_pinned", "port", "switch_connected"]


def test_unknown_ports_are_ignored():
    store = StatsStore(PLAN)
    assert store.add_port(LF1, 0xFFFFFFFE, {"tx_bytes": 1}, 1.0) is None  # OFPP_LOCAL
    assert store.add_port(0x999, 1, {"tx_bytes": 1}, 1.0) is None
    assert store.latest_ports() == []


def test_since_returns_only_newer_samples():
    clock = Clock()
    store = StatsStore(PLAN, clock=clock)
    for k in range(5):
        clock.t = 1000.0 + k
        store.add_port(LF1, 1, {"tx_bytes": k}, float(k))
    assert [s["tx_bytes"] for s in store.since(1002.0)] == [3, 4]


def call(app, path, method="GET", query=""):
    out = {}

    def start(status, headers):
        out["status"] = int(status.split()[0])
        out["headers"] = dict(headers)

    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query}, start))
    return out["status"], out["headers"], body


def make_app(tmp_path=None):
    store = StatsStore(PLAN, clock=Clock())
    phase = tmp_path / "phase.json" if tmp_path else None
    return ApiApp(PLAN, store, connected=lambda: {LF1}, phase_file=phase), store


def test_topology_reports_connection_state_and_ps():
    app, _ = make_app()
    status, headers, body = call(app, "/api/topology")
    doc = json.loads(body)
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert {s["name"]: s["connected"] for s in doc["switches"]} == {
        "sp1": False,
        "sp2": False,
        "lf1": True,
        "lf2": False,
    }
    assert doc["ps_host"] == "h1" and doc["ps_port"]["name"] == "lf1-eth3"


def test_bad_requests_get_4xx_json_and_no_traceback():
    app, _ = make_app()
    assert call(app, "/api/timeseries", query="since=yesterday")[0] == 400
    assert call(app, "/api/timeseries", query="since=nan")[0] == 400
    assert call(app, "/api/nope")[0] == 404
    assert call(app, "/api/ports", method="POST")[0] == 405
    assert call(app, "/api/ports", method="DELETE")[0] == 405
    assert call(app, "/api/ports", query="x=" + "a" * 5000)[0] == 414
    assert call(app, "/static/../../etc/passwd")[0] == 404
    for code_path in ("/api/nope", "/static/../api.py"):
        status, _, body = call(app, code_path)
        assert "Traceback" not in body.decode() and "error" in json.loads(body)


def test_phase_comes_from_the_runner_file(tmp_path):
    app, _ = make_app(tmp_path)
    assert json.loads(call(app, "/api/phase")[2])["state"] == "idle"
    phase = {"state": "running", "strategy": "ps", "step": 2, "steps": 5}
    (tmp_path / "phase.json").write_text(json.dumps(phase))
    doc = json.loads(call(app, "/api/phase")[2])
    assert (doc["strategy"], doc["step"], doc["state"]) == ("ps", 2, "running")


def test_dashboard_is_served_offline():
    app, _ = make_app()
    status, headers, body = call(app, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"http://" not in body and b"https://" not in body
