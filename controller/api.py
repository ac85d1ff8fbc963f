"""The controller's read-only HTTP API and dashboard files, as a plain WSGI application.

GET only; JSON everywhere; bad queries get 400, unknown paths 404, other methods 405, and none of
them a traceback. Kept free of os-ken so it can be tested by calling it directly.
"""

from __future__ import annotations

import json
import math
import mimetypes
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from controller.stats import StatsStore
from runmodel.fabric import Plan

STATIC_DIR = Path(__file__).with_name("static")
MAX_QUERY = 2048
# seconds a client may stall mid-request or idle on a kept-alive connection before the server drops
# it: without a limit ~1000 stalled clients fill eventlet's connection pool and the API stops answering
CLIENT_TIMEOUT = 10.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class ApiApp:
    """WSGI app over a StatsStore, the plan, switch connection state and a phase file."""

    def __init__(
        self,
        plan: Plan,
        store: StatsStore,
        connected: Callable[[], set[int]],
        phase_file: Path | None = None,
        static_dir: Path = STATIC_DIR,
        flows: Callable[[int], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.plan = plan
        self.store = store
        self.connected = connected
        self.phase_file = phase_file
        self.static_dir = static_dir
        self.top_flows = flows or (lambda n: [])

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            status, headers, body = self.handle(environ)
        except Exception as exc:  # noqa: BLE001 - an API must answer, never crash the controller
            status, headers, body = self._json(500, {"error": f"internal error: {type(exc).__name__}"})
        start_response(status, headers)
        # HEAD: the headers of a GET (Content-Length included), never its body (RFC 9110 9.3.2)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    # -- routing ----------------------------------------------------------------------------
    def handle(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Route one request to its handler."""
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        query = environ.get("QUERY_STRING", "")
        if method not in ("GET", "HEAD"):
            code, headers, body = self._json(405, {"error": f"method {method} not allowed: read-only API"})
            return code, headers + [("Allow", "GET, HEAD")], body
        if len(query) > MAX_QUERY or len(path) > MAX_QUERY:
            return self._json(414, {"error": "request URI too long"})
        routes: dict[str, Callable[[dict[str, list[str]]], tuple[str, list[tuple[str, str]], bytes]]] = {
            "/api/topology": self.topology,
            "/api/ports": self.ports,
            "/api/queues": self.queues,
            "/api/timeseries": self.timeseries,
            "/api/phase": self.phase,
            "/api/events": self.events,
            "/api/flows": self.flows,
        }
        try:
            params = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=20)
        except ValueError:
            return self._json(400, {"error": "malformed query string"})
        if path in routes:
            return routes[path](params)
        if path == "/" or path == "/index.html":
            return self._static("index.html")
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        return self._json(404, {"error": f"no such path: {path[:100]}"})

    # -- handlers ---------------------------------------------------------------------------
    def topology(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Switches (with connection state), hosts, links, the PS and its port."""
        up = self.connected()
        doc = self.plan.to_dict()
        doc["switches"] = [dict(s, connected=s["dpid"] in up) for s in doc["switches"]]
        return self._json(200, doc)

    def ports(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Newest counters and rates of every switch port."""
        return self._json(200, {"t": self.store.now(), "ports": self.store.latest_ports()})

    def queues(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Newest counters, rates and drops of every port queue."""
        return self._json(200, {"t": self.store.now(), "queues": self.store.latest_queues()})

    def timeseries(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Samples newer than ?since=<unix seconds> (default: the last 60 s)."""
        now = self.store.now()
        raw = params.get("since", [str(now - 60)])[-1]
        try:
            since = float(raw)
        except ValueError:
            return self._json(400, {"error": f"since must be unix seconds, got {raw[:40]!r}"})
        if not math.isfinite(since):
            return self._json(400, {"error": "since must be a finite number"})
        return self._json(200, {"t": now, "samples": self.store.since(since)})

    def events(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Fabric events: switch connects and disconnects, port state changes."""
        return self._json(200, {"t": self.store.now(), "events": list(self.store.events)})

    def flows(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """The ?top=N (default 20, at most 1000) flows by rate, then bytes, as the switches count them."""
        raw = params.get("top", ["20"])[-1]
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses (an HTTP 500)
        if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= 1000:
            return self._json(400, {"error": f"top must be an integer in 1..1000, got {raw[:40]!r}"})
        return self._json(200, {"t": self.store.now(), "flows": self.top_flows(int(raw))})

    def phase(self, params: dict[str, list[str]]) -> tuple[str, list[tuple[str, str]], bytes]:
        """What the experiment runner says it is doing (it writes the phase file)."""
        doc: dict[str, Any] = {"state": "idle", "strategy": None, "step": None, "steps": None}
        if self.phase_file is not None and self.phase_file.exists():
            try:
                doc.update(json.loads(self.phase_file.read_text()))
            except (OSError, ValueError):
                pass
        doc["t"] = self.store.now()
        return self._json(200, doc)

    # -- helpers ----------------------------------------------------------------------------
    def _static(self, rel: str) -> tuple[str, list[tuple[str, str]], bytes]:
        base = self.static_dir.resolve()
        try:
            target = (base / rel).resolve()
            found = base in target.parents and target.is_file()
        except (OSError, ValueError):  # a NUL byte, a name too long for the file system
            found = False
        if not found:
            return self._json(404, {"error": f"no such file: {rel[:100]}"})
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        body = target.read_bytes()
        return (
            "200 OK",
            [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Cache-Control", "no-cache")],
            body,
        )

    @staticmethod
    def _json(code: int, doc: Any) -> tuple[str, list[tuple[str, str]], bytes]:
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            414: "URI Too Long",
            500: "Internal Server Error",
        }[code]
        body = json.dumps(doc).encode()
        return (
            f"{code} {reason}",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-cache"),
            ],
            body,
        )
