"""Fake controller HTTP API (docs/DESIGN.md "Controller HTTP API") for dashboard tests.

Serves controller/static/ and the API documents of a parametrised fake leaf-spine fabric on
127.0.0.1 (a free port). Counters advance on API requests (at most one sample per `min_interval`
seconds). Switches: `fabric.ps_dropping` makes the PS port's queue drop packets; `api.mode`
"ok" | "down" (connections closed without an answer) | "frozen" (answers, timestamps stop) |
"error" (HTTP 500). Run `python -m tests.fakeapi --spines 4 --leaves 8 --hosts 4` to look at it.
"""

from __future__ import annotations

import argparse
import json
import math
import mimetypes
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from controller.stats import PORT_FIELDS

STATIC_DIR = Path(__file__).resolve().parent.parent / "controller" / "static"
MODES = ("ok", "down", "frozen", "error")
# the port counters the real controller keeps and /api/ports serves, but the error counts: the fake
# fabric has no errors to count
PORT_COUNTERS = tuple(f for f in PORT_FIELDS if not f.endswith("_errors"))


@dataclass(eq=False)
class FakeFabric:
    """S spines, L leaves, H hosts per leaf, named and numbered as DESIGN.md says."""

    spines: int = 2
    leaves: int = 4
    hosts_per_leaf: int = 2
    rate_mbit: float = 50.0
    ps_host: str = "h1"
    min_interval: float = 0.25
    history_s: float = 180.0
    ps_dropping: bool = field(default=False, init=False)
    phase: dict[str, Any] = field(
        default_factory=lambda: {"strategy": None, "step": 0, "steps": 0, "state": "idle"}, init=False
    )
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    tick_count: int = field(default=0, init=False)
    t: float = field(default_factory=time.time, init=False)
    samples: deque[dict[str, Any]] = field(default_factory=deque, init=False)

    def __post_init__(self) -> None:
        """The wiring and zeroed counters, and the first sample."""
        spines, leaves = self.spines, self.leaves
        # (switch, port) -> peer name; ports in DESIGN.md order
        self.port_peers: dict[tuple[str, int], str] = {}
        for j in range(1, leaves + 1):
            for i in range(1, spines + 1):
                self.port_peers[(f"lf{j}", i)] = f"sp{i}"
            for k in range(1, self.hosts_per_leaf + 1):
                self.port_peers[(f"lf{j}", spines + k)] = self.host_name(j, k)
        for i in range(1, spines + 1):
            for j in range(1, leaves + 1):
                self.port_peers[(f"sp{i}", j)] = f"lf{j}"
        self.counters: dict[tuple[str, int], dict[str, float]] = {
            key: dict.fromkeys((*PORT_COUNTERS, "tx_bps", "rx_bps", "q_drops", "q_dps"), 0.0)
            for key in self.port_peers
        }
        ps = self.host(self.ps_host)
        self.ps_port = (ps["leaf"], ps["port"])
        self._sample(self.t)

    def host_name(self, leaf: int, k: int) -> str:
        """Name of the k-th host (1-based) of leaf number `leaf`."""
        return f"h{(leaf - 1) * self.hosts_per_leaf + k}"

    def host(self, name: str) -> dict[str, Any]:
        """The /api/topology entry of one host."""
        n = int(name[1:])
        leaf = (n - 1) // self.hosts_per_leaf + 1
        k = (n - 1) % self.hosts_per_leaf + 1
        mac = ":".join(f"{b:02x}" for b in n.to_bytes(6, "big"))
        return {
            "name": name,
            "ip": f"10.0.0.{n}",
            "mac": mac,
            "leaf": f"lf{leaf}",
            "port": self.spines + k,
            "ps": name == self.ps_host,
        }

    def topology(self) -> dict[str, Any]:
        """The /api/topology document."""
        switches = [
            {"name": f"sp{i}", "dpid": 0x100 + i, "role": "spine", "connected": True}
            for i in range(1, self.spines + 1)
        ]
        switches += [
            {"name": f"lf{j}", "dpid": 0x200 + j, "role": "leaf", "connected": True}
            for j in range(1, self.leaves + 1)
        ]
        hosts = [
            self.host(self.host_name(j, k))
            for j in range(1, self.leaves + 1)
            for k in range(1, self.hosts_per_leaf + 1)
        ]
        links = [
            {
                "a": f"lf{j}",
                "a_port": i,
                "b": f"sp{i}",
                "b_port": j,
                "kind": "uplink",
                "rate_mbit": self.rate_mbit,
            }
            for j in range(1, self.leaves + 1)
            for i in range(1, self.spines + 1)
        ]
        links += [
            {
                "a": h["leaf"],
                "a_port": h["port"],
                "b": h["name"],
                "b_port": 0,
                "kind": "host",
                "rate_mbit": self.rate_mbit,
            }
            for h in hosts
        ]
        return {
            "switches": switches,
            "hosts": hosts,
            "links": links,
            "ps_host": self.ps_host,
            "ps_port": {"switch": self.ps_port[0], "port": self.ps_port[1]},
        }

    def _util(self, key: tuple[str, int], tick: int, rx: bool) -> float:
        """Deterministic, always-changing utilisation of one port direction."""
        seed = (sum(map(ord, key[0])) * 31 + key[1] * 7 + (13 if rx else 0)) % 97
        if key == self.ps_port and not rx:
            return 0.99 if self.ps_dropping else 0.7 + 0.2 * math.sin(0.9 * tick)
        return 0.05 + 0.4 * (0.5 + 0.5 * math.sin(0.6 * tick + seed))

    def _sample(self, now: float) -> None:
        dt = now - self.t if self.tick_count else 0.0
        self.t = now
        self.tick_count += 1
        cap = self.rate_mbit * 1e6
        for key, c in self.counters.items():
            c["tx_bps"] = cap * self._util(key, self.tick_count, rx=False)
            c["rx_bps"] = cap * self._util(key, self.tick_count, rx=True)
            for d in ("tx", "rx"):
                c[f"{d}_bytes"] += c[f"{d}_bps"] * dt / 8
                c[f"{d}_packets"] = c[f"{d}_bytes"] // 1500
            c["q_dps"] = (
                40.0 + 10 * math.sin(self.tick_count) if key == self.ps_port and self.ps_dropping else 0.0
            )
            c["q_drops"] += c["q_dps"] * dt
        for p in self.ports_list():
            self.samples.append({"t": now, "kind": "port", **p})
        for q in self.queues_list():
            self.samples.append({"t": now, "kind": "queue", **q})
        while self.samples and self.samples[0]["t"] < now - self.history_s:
            self.samples.popleft()

    def advance(self) -> None:
        """Take a new sample if `min_interval` passed since the last one."""
        with self.lock:
            now = time.time()
            if now - self.t >= self.min_interval:
                self._sample(now)

    def ports_list(self) -> list[dict[str, Any]]:
        """Entries of /api/ports."""
        cap = self.rate_mbit * 1e6
        out = []
        for (sw, port), c in self.counters.items():
            out.append(
                {
                    "switch": sw,
                    "port": port,
                    "name": f"{sw}-eth{port}",
                    "peer": self.port_peers[(sw, port)],
                    **{k: int(c[k]) for k in PORT_COUNTERS},
                    "tx_bps": c["tx_bps"],
                    "rx_bps": c["rx_bps"],
                    "util": c["tx_bps"] / cap,
                }
            )
        return out

    def queues_list(self) -> list[dict[str, Any]]:
        """Entries of /api/queues (one queue, id 0, per port)."""
        return [
            {
                "switch": sw,
                "port": port,
                "name": f"{sw}-eth{port}",
                "peer": self.port_peers[(sw, port)],
                "queue_id": 0,
                "tx_bytes": int(c["tx_bytes"]),
                "tx_packets": int(c["tx_packets"]),
                "drops": int(c["q_drops"]),
                "tx_bps": c["tx_bps"],
                "drops_per_s": c["q_dps"],
            }
            for (sw, port), c in self.counters.items()
        ]

    def document(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """(status, JSON document) of one API GET."""
        with self.lock:
            if path == "/api/topology":
                return 200, self.topology()
            if path == "/api/ports":
                return 200, {"t": self.t, "ports": self.ports_list()}
            if path == "/api/queues":
                return 200, {"t": self.t, "queues": self.queues_list()}
            if path == "/api/phase":
                return 200, {**self.phase, "t": self.t}
            if path == "/api/timeseries":
                try:
                    since = float(query.get("since", ["0"])[0])
                except ValueError:
                    return 400, {"error": "since must be a number (unix seconds)"}
                return 200, {"t": self.t, "samples": [s for s in self.samples if s["t"] > since]}
        return 404, {"error": f"no such resource: {path}"}


class FakeApi:
    """A threaded HTTP server serving a FakeFabric and controller/static/ on 127.0.0.1."""

    def __init__(self, fabric: FakeFabric | None = None, port: int = 0) -> None:
        self.fabric = fabric or FakeFabric()
        self.mode = "ok"
        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self.server.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:40123."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def set_mode(self, mode: str) -> None:
        """Switch between "ok", "down", "frozen" and "error"."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode = mode

    def start(self) -> FakeApi:
        """Serve in a daemon thread."""
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="fakeapi"
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        if self.thread:
            self.thread.join(timeout=5)

    def __enter__(self) -> FakeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            """Routes GETs to static files and fake API documents."""

            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                self._send(status, json.dumps(doc).encode(), "application/json")

            def do_GET(self) -> None:
                api.requests += 1
                if api.mode == "down":
                    self.close_connection = True
                    return
                url = urlsplit(self.path)
                if url.path == "/" or url.path.startswith("/static/"):
                    name = "index.html" if url.path == "/" else url.path[len("/static/") :]
                    file = STATIC_DIR / name
                    if "/" in name or name.startswith(".") or not file.is_file():
                        self._json(404, {"error": f"no such file: {name}"})
                        return
                    ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
                    if ctype.startswith("text/") or ctype.endswith("javascript"):
                        ctype += "; charset=utf-8"
                    self._send(200, file.read_bytes(), ctype)
                    return
                if api.mode == "error" and url.path.startswith("/api/"):
                    self._json(500, {"error": "fake controller error"})
                    return
                if api.mode == "ok":
                    api.fabric.advance()
                status, doc = api.fabric.document(url.path, parse_qs(url.query))
                self._json(status, doc)

            def _not_allowed(self) -> None:
                self._json(405, {"error": "read-only API: GET only"})

            do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

        return Handler


def main() -> None:
    """Serve a fake fabric until interrupted (for looking at the dashboard by hand)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spines", type=int, default=2)
    ap.add_argument("--leaves", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=2, help="hosts per leaf")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--drop", action="store_true", help="make the PS port drop")
    args = ap.parse_args()
    fabric = FakeFabric(args.spines, args.leaves, args.hosts)
    fabric.ps_dropping = args.drop
    fabric.phase = {"strategy": "ps", "step": 3, "steps": 10, "state": "running"}
    with FakeApi(fabric, port=args.port) as api:
        print(f"fake controller API on {api.url}/", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
