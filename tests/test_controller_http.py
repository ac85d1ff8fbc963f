"""The real controller process's HTTP API under abuse: bad queries, odd methods, malformed requests.

Starts `python -m controller.main` through ControllerProcess with no switch connected (it then just
serves the plan) on free loopback ports, and talks to it over real sockets. Every answer must be a
4xx (200 for valid GETs), the API's own errors JSON, and neither an answer nor the controller log
may hold a traceback. Needs no root and no Mininet.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from controller.api import CLIENT_TIMEOUT
from controller.launch import ControllerError, ControllerProcess
from controller.main import parse_args
from runmodel.config import ControllerOptions
from runmodel.fabric import FabricSpec, build_plan
from tests.waiting import wait_for

pytestmark = pytest.mark.processes

RESERVED_PORTS = {6653, 8080}  # the Mininet experiments on this machine use these
VALID_GETS = [
    "/api/topology",
    "/api/ports",
    "/api/queues",
    "/api/timeseries?since=0",
    "/api/phase",
    "/api/events",
    "/api/flows",
    "/api/flows?top=1000",
    "/",
    "/static/app.js",
]
TIMEOUT = 5.0
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick for port 0), never a reserved one."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RESERVED_PORTS:
            return port


def default_process() -> ControllerProcess:
    """A ControllerProcess with every option left at its default (not started)."""
    return ControllerProcess(build_plan(FabricSpec()), ControllerOptions(), Path("unused"))


def start_controller(workdir: Path, api_host: str = "127.0.0.1", **kw: str) -> ControllerProcess:
    """The real controller process on free OpenFlow and API ports."""
    options = ControllerOptions(of_port=free_port(), api_port=free_port(), api_host=api_host, **kw)
    ctl = ControllerProcess(build_plan(FabricSpec()), options, workdir)
    ctl.start(timeout=20)
    return ctl


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    """One controller for the whole module; its log is checked for tracebacks at the end."""
    proc = start_controller(tmp_path_factory.mktemp("controller"))
    try:
        yield proc
    finally:
        proc.stop()


# -- clients ------------------------------------------------------------------------------------
class Answer:
    """One HTTP response, parsed leniently from raw bytes."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/\d\.\d (\d{3})", lines[0])
        if m is None:
            # http.server's error page for a request line it could not parse comes HTTP/0.9 style:
            # no status line, no headers, just the HTML page that names the code
            m = re.search(rb"<p>Error code: (\d{3})</p>", raw)
            head, self.body = b"", raw
            lines = [""]
        self.status = int(m.group(1)) if m else None
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}

    def json(self) -> dict:
        assert self.headers.get("content-type") == "application/json", self.raw[:300]
        doc = json.loads(self.body)
        assert isinstance(doc, dict)
        return doc

    def __repr__(self) -> str:
        return f"Answer({self.raw[:300]!r})"


def raw_request(ctl: ControllerProcess, data: bytes, timeout: float = TIMEOUT) -> Answer:
    """Send bytes, half-close, read until the server closes; no traceback may come back."""
    with socket.create_connection(("127.0.0.1", ctl.api_port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse an oversized request (and close) before it was all sent
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    answer = Answer(b"".join(chunks))
    assert b"Traceback" not in answer.raw, answer
    return answer


def request(
    ctl: ControllerProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One well-formed request through http.client."""
    conn = http.client.HTTPConnection("127.0.0.1", ctl.api_port, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        assert b"Traceback" not in data, data[:300]
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def get_json_error(ctl: ControllerProcess, path: str, expect: int) -> dict:
    status, headers, body = request(ctl, "GET", path)
    assert status == expect, (path[:100], status, body[:200])
    assert headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert isinstance(doc.get("error"), str) and doc["error"]
    return doc


def assert_valid_gets(ctl: ControllerProcess) -> None:
    for path in VALID_GETS:
        status, headers, body = request(ctl, "GET", path)
        assert status == 200, (path, status, body[:200])
        if path.startswith("/api/"):
            assert isinstance(json.loads(body), dict)


def get_line(path: str, method: str = "GET", extra: bytes = b"") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n".encode() + extra + b"Connection: close\r\n\r\n"


# -- the API's own checks ----------------------------------------------------------------------
def test_valid_gets_answer_200(ctl: ControllerProcess) -> None:
    assert_valid_gets(ctl)
    topo = ctl.get("/api/topology")
    assert topo["switches"] and not any(s["connected"] for s in topo["switches"])


@pytest.mark.parametrize("top", ["0", "1001", "-1", "ten", "", "1.5", "9" * 40])
def test_bad_top_is_400_json(ctl: ControllerProcess, top: str) -> None:
    doc = get_json_error(ctl, f"/api/flows?top={top}", 400)
    assert "top must be" in doc["error"]


def test_no_flows_before_any_switch(ctl: ControllerProcess) -> None:
    doc = ctl.get("/api/flows")
    assert doc["flows"] == [] and isinstance(doc["t"], float)


@pytest.mark.parametrize(
    "since",
    [
        "yesterday",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e999",
        "",
        "0x10",
        "1,5",
        "%00",
        "%ff",
        "9" * 1500,
        "1" * 2000 + "x",
    ],
    ids=lambda s: s[:12] or "empty",
)
def test_bad_since_is_400_json(ctl: ControllerProcess, since: str) -> None:
    doc = get_json_error(ctl, f"/api/timeseries?since={since}", 400)
    assert "since" in doc["error"]


def test_repeated_and_odd_queries(ctl: ControllerProcess) -> None:
    get_json_error(ctl, "/api/timeseries?since", 400)
    get_json_error(ctl, "/api/timeseries?since=0&since=nope", 400)  # the last one counts
    assert request(ctl, "GET", "/api/timeseries?since=nope&since=0")[0] == 200
    many = "&".join(f"k{i}=v" for i in range(50))
    get_json_error(ctl, f"/api/topology?{many}", 400)  # more fields than the API parses
    for path in ("/api/ports?%zz=1&&&==", "/api/topology?x=%ff", "/api/timeseries?since=-1e308"):
        assert request(ctl, "GET", path)[0] == 200, path


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/api",
        "/api/",
        "/api/topology/",
        "/api/topology/x",
        "/API/ports",
        "/index.htm",
        "/static",
        "/api/topology%00",
        "/%2e%2e/etc/passwd",
        "//etc/passwd",
    ],
)
def test_unknown_paths_are_404_json(ctl: ControllerProcess, path: str) -> None:
    get_json_error(ctl, path, 404)


TRAVERSALS = [
    "../api.py",
    "..%2fapi.py",
    "%2e%2e/api.py",
    "../../pyproject.toml",
    "%2e%2e%2f%2e%2e%2fpyproject.toml",
    "..%5capi.py",
    "/etc/passwd",
    "%2fetc%2fpasswd",
    "....//api.py",
    "./../api.py",
    "",
    ".",
    "..",
    "app.js%00.png",
    "app.js%00",
    "a" * 300,
    "a/" * 900,
    "%c0%ae%c0%ae/api.py",
    "../static/app.js/..",
]


@pytest.mark.parametrize("rel", TRAVERSALS, ids=lambda r: r[:24] or "empty")
def test_static_traversal_is_404(ctl: ControllerProcess, rel: str) -> None:
    status, headers, body = request(ctl, "GET", "/static/" + rel)
    assert status == 404, (rel[:60], status, body[:200])
    assert headers["content-type"] == "application/json"
    assert "error" in json.loads(body)
    assert b"import" not in body and b"root:" not in body and b"[project]" not in body


def test_static_dot_segments_inside_the_folder_still_serve(ctl: ControllerProcess) -> None:
    assert request(ctl, "GET", "/static/./app.js")[0] == 200
    assert request(ctl, "GET", "/static/../static/app.js")[0] in (200, 404)  # never a file outside


@pytest.mark.parametrize("size", [3_000, 10_000, 100_000])
def test_huge_query_string_is_414(ctl: ControllerProcess, size: int) -> None:
    answer = raw_request(ctl, get_line("/api/timeseries?since=0&pad=" + "x" * size))
    assert answer.status == 414, answer
    if size < 8000:  # under eventlet's request-line limit the API itself answers, in JSON
        assert "error" in answer.json()


def test_huge_path_is_414_json(ctl: ControllerProcess) -> None:
    answer = raw_request(ctl, get_line("/static/" + "a" * 5000))
    assert answer.status == 414 and "error" in answer.json()


@pytest.mark.parametrize(
    "headers",
    [
        b"X-Big: " + b"a" * 10_000 + b"\r\n",
        b"X-Big: " + b"a" * 100_000 + b"\r\n",
        b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 4000) for i in range(40)),
        b"".join(b"X-H%d: 1\r\n" % i for i in range(2000)),
        b"Cookie: " + b"c=1; " * 2000 + b"\r\n",
    ],
    ids=["10k-line", "100k-line", "160k-total", "2000-headers", "cookie"],
)
def test_huge_headers_are_4xx(ctl: ControllerProcess, headers: bytes) -> None:
    answer = raw_request(ctl, get_line("/api/topology", extra=headers))
    # past its limit the server stops reading and closes; the unread rest may make that a reset that
    # overtakes its 400, so no answer at all is fine too, only never a non-4xx one
    assert answer.raw == b"" or (answer.status is not None and 400 <= answer.status < 500), answer


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO"])
@pytest.mark.parametrize(
    "body", [None, b"", b'{"state": "done"}', b"x" * 100_000], ids=["none", "empty", "json", "100k"]
)
def test_other_methods_are_405_json(ctl: ControllerProcess, method: str, body: bytes | None) -> None:
    path = "localhost:1" if method == "CONNECT" else "/api/phase"
    status, headers, data = request(
        ctl, method, path, body=body, headers={"Content-Type": "application/json"} if body else None
    )
    assert status == 405, (method, status, data[:200])
    assert headers["content-type"] == "application/json"
    assert headers.get("allow") == "GET, HEAD"
    assert method in json.loads(data)["error"]
    assert ctl.get("/api/phase")["state"] == "idle"  # nothing was written


@pytest.mark.parametrize(
    "data",
    [
        b"POST /api/phase HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        b"PUT /api/phase HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: "
        b"close\r\n\r\nzz\r\n",
        b"POST /api/phase HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n"
        b"Connection: close\r\n\r\n",
        b"DELETE /api/phase HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\nConnection: "
        b"close\r\n\r\nab",
    ],
    ids=["chunked", "bad-chunk", "expect-100", "lying-length"],
)
def test_other_methods_raw_bodies_are_405(ctl: ControllerProcess, data: bytes) -> None:
    answer = raw_request(ctl, data)
    assert answer.status == 405, answer
    assert "error" in answer.json()


def test_head_answers_headers_without_a_body(ctl: ControllerProcess) -> None:
    # two HEADs then a GET on one keep-alive connection: a body after a HEAD would corrupt the stream
    with socket.create_connection(("127.0.0.1", ctl.api_port), timeout=TIMEOUT) as s:
        s.sendall(
            b"HEAD /api/phase HTTP/1.1\r\nHost: x\r\n\r\nHEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /api/phase HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    parts = data.split(b"HTTP/1.1 ")
    assert [p[:3] for p in parts[1:]] == [b"200", b"404", b"200"], data[:600]
    assert parts[1].endswith(b"\r\n\r\n") and parts[2].endswith(b"\r\n\r\n"), data[:600]
    assert json.loads(parts[3].partition(b"\r\n\r\n")[2])["state"] == "idle"


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\xff\xfe garbage \x01\x02\r\n\r\n",
        bytes.fromhex("16030100a5010000a10303") + bytes(range(256)),  # a TLS ClientHello
        b"GET / / / HTTP/1.1\r\n\r\n",
        b"GET /api/topology HTTP/1.1 extra\r\n\r\n",
        b"GET /api/topology HTTP/x.y\r\n\r\n",
        b"GET /api/topology FTP/1.1\r\n\r\n",
        b"GET /api/topology HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nConnection: close\r\n\r\n",
        b"GET /api/topology HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\nConnection: close\r\n\r\n",
        b"\r\n\r\n\r\n",
        b"GET",
        b"A" * 100_000,
        b"\x80" * 5000 + b"\r\n\r\n",
    ],
    ids=[
        "garbage",
        "tls",
        "too-many-words",
        "extra-word",
        "bad-version",
        "not-http",
        "bad-length",
        "negative-length",
        "blank",
        "truncated",
        "no-newline",
        "high-bytes",
    ],
)
def test_malformed_requests_are_4xx_or_closed(ctl: ControllerProcess, data: bytes) -> None:
    answer = raw_request(ctl, data)
    # the server may also just close a connection that never formed a request line
    assert answer.raw == b"" or (answer.status is not None and 400 <= answer.status < 500), answer
    assert b"switches" not in answer.raw


def test_unsupported_http_version(ctl: ControllerProcess) -> None:
    # 505 HTTP Version Not Supported is the one standard 5xx for a client's fault; the server may use it
    answer = raw_request(ctl, b"GET /api/topology HTTP/9.9\r\nHost: x\r\n\r\n")
    assert answer.status in (400, 505), answer


@pytest.mark.parametrize(
    "data",
    [
        b"GET /api/topology HTTP/1.0\r\n\r\n",
        b"GET /api/topology HTTP/1.1\nHost: x\nConnection: close\n\n",
        b"GET http://localhost/api/topology HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET api/topology HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /static/app.js\x00 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /static/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /static/..\\..\\api.py HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /api/timeseries?since=\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /api/topology HTTP/1.1\r\nHost x\r\n: y\r\n\x00: \x01\r\nConnection: close\r\n\r\n",
        b"GET /api/topology HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n",
        b"GET /api/topology\r\n\r\n",
    ],
    ids=[
        "http10",
        "bare-lf",
        "absolute-uri",
        "star",
        "relative",
        "nul",
        "binary-path",
        "backslashes",
        "binary-query",
        "broken-headers",
        "odd-transfer-encoding",
        "http09",
    ],
)
def test_odd_but_parseable_requests_are_200_or_4xx(ctl: ControllerProcess, data: bytes) -> None:
    answer = raw_request(ctl, data)
    assert answer.status is not None and (answer.status == 200 or 400 <= answer.status < 500), answer
    if answer.status == 200:
        assert b"switches" in answer.body  # only /api/topology answers 200 here
    elif answer.headers.get("content-type") == "application/json":
        assert "error" in answer.json()


def test_client_that_resets_mid_request(ctl: ControllerProcess) -> None:
    for data in (get_line("/static/app.js"), b"GET /api/topology HTTP/1.1\r\nHo", b"POST / HTTP/1.1\r\n"):
        s = socket.create_connection(("127.0.0.1", ctl.api_port), timeout=TIMEOUT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        s.sendall(data)
        s.close()
    assert_valid_gets(ctl)


# -- slow and many clients ---------------------------------------------------------------------
def test_slow_clients_do_not_block_others(ctl: ControllerProcess) -> None:
    halves = [
        b"GET /api/topo",
        b"GET /api/topology HTTP/1.1\r\nHost: x\r\n",
        b'POST /api/phase HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"sta',
        b"GET /api/phase HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
        b"",
    ]
    slow = []
    try:
        for data in halves * 4:
            s = socket.create_connection(("127.0.0.1", ctl.api_port), timeout=TIMEOUT)
            s.sendall(data)
            slow.append(s)
        t0 = time.monotonic()
        assert_valid_gets(ctl)
        assert time.monotonic() - t0 < 3.0
        # the slow ones got nothing yet, or a complete answer (405 before reading a body)
        for s in slow:
            s.setblocking(False)
            try:
                got = s.recv(65536)
            except BlockingIOError:
                continue
            assert not got or Answer(got).status in (200, 405), got[:200]
    finally:
        for s in slow:
            s.close()
    assert_valid_gets(ctl)


def test_stalled_clients_are_dropped_after_the_client_timeout(ctl: ControllerProcess) -> None:
    # without a timeout each stalled client held one of eventlet's 1024 connection slots forever;
    # ~1000 of them and the API stopped answering anyone
    stalled = []
    for data in (b"GET /api/topo", b"GET /api/phase HTTP/1.1\r\nHost: x\r\n", b""):
        s = socket.create_connection(("127.0.0.1", ctl.api_port), timeout=CLIENT_TIMEOUT + 5)
        s.sendall(data)
        stalled.append(s)
    idle = socket.create_connection(("127.0.0.1", ctl.api_port), timeout=CLIENT_TIMEOUT + 5)
    idle.sendall(b"GET /api/phase HTTP/1.1\r\nHost: x\r\n\r\n")  # kept alive, then silent
    assert idle.recv(65536).startswith(b"HTTP/1.1 200")
    stalled.append(idle)
    t0 = time.monotonic()
    try:
        assert_valid_gets(ctl)
        for s in stalled:
            try:
                assert s.recv(65536) == b"", "a stalled client got an answer"
            except ConnectionResetError:
                pass
            except TimeoutError:
                pytest.fail(f"a stalled client was not dropped within {CLIENT_TIMEOUT + 5:.0f} s")
    finally:
        for s in stalled:
            s.close()
    assert CLIENT_TIMEOUT - 1 <= time.monotonic() - t0 <= CLIENT_TIMEOUT + 5


def test_many_concurrent_gets(ctl: ControllerProcess) -> None:
    paths = [VALID_GETS[i % len(VALID_GETS)] for i in range(200)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(lambda p: request(ctl, "GET", p)[0], paths))
    assert statuses == [200] * 200


def test_keepalive_connection_reused_many_times(ctl: ControllerProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", ctl.api_port, timeout=TIMEOUT)
    try:
        for i in range(60):
            path = VALID_GETS[i % len(VALID_GETS)] if i % 3 else "/api/timeseries?since=x"
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == (200 if i % 3 else 400)
    finally:
        conn.close()


# -- afterwards --------------------------------------------------------------------------------
def test_controller_survived_without_tracebacks(ctl: ControllerProcess) -> None:
    """Runs last in this module: after all the above the process lives and its log is clean."""
    assert ctl.alive()
    assert_valid_gets(ctl)
    # whatever the server logs about the last requests: wait until the log has stopped growing
    wait_for(lambda: time.time() - ctl.log_file.stat().st_mtime >= 0.3, 10, "the controller log to settle")
    log = ctl.log_file.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert "Internal Server Error" not in log and " 500 " not in log, log[-3000:]
    assert ctl.alive()


# -- listening address -------------------------------------------------------------------------
def listen_addresses(port: int) -> set[str]:
    """Local addresses of the TCP listeners on `port` (from ss, or /proc/net/tcp without it)."""
    if shutil.which("ss"):
        out = subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
        return {line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()}
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hexport = local.split(":")
        if state == "0A" and int(hexport, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return found


def other_local_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, or None."""
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=10
        ).stdout
    except OSError:
        return None
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/", out):
        if not m.group(1).startswith("127."):
            return m.group(1)
    return None


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def assert_answers_on_loopback_only(port: int, what: str) -> None:
    """`port` takes connections on 127.0.0.1 and not on this machine's other address (if it has one)."""
    other = other_local_address()
    if other is not None:
        assert not connects(other, port), f"{what} answers on {other}"
    assert connects("127.0.0.1", port)


@contextmanager
def controller_for_one_test(workdir: Path, **kw: str) -> Iterator[ControllerProcess]:
    """start_controller(workdir, **kw) for the block; stopped after it, then its log holds no traceback."""
    ctl = start_controller(workdir, **kw)
    try:
        yield ctl
    finally:
        ctl.stop()
    assert "Traceback" not in ctl.log_file.read_text(errors="replace")


def test_api_listens_on_loopback_only_by_default(ctl: ControllerProcess) -> None:
    assert parse_args(["--plan", "p.json"]).api_host == "127.0.0.1"
    assert default_process().api_host == "127.0.0.1"
    assert listen_addresses(ctl.api_port) == {"127.0.0.1"}
    assert_answers_on_loopback_only(ctl.api_port, "API")


def test_api_host_all_addresses_only_when_asked(tmp_path: Path) -> None:
    with controller_for_one_test(tmp_path, api_host="0.0.0.0") as ctl:
        assert listen_addresses(ctl.api_port) == {"0.0.0.0"}
        other = other_local_address()
        if other is not None:
            assert connects(other, ctl.api_port)
        assert ctl.get("/api/phase")["state"] == "idle"


def test_openflow_listens_on_loopback_only_by_default(ctl: ControllerProcess) -> None:
    assert parse_args(["--plan", "p.json"]).of_host == "127.0.0.1"
    assert default_process().of_host == "127.0.0.1"
    assert wait_for(lambda: listen_addresses(ctl.of_port), 10, "the OpenFlow listener") == {"127.0.0.1"}
    assert_answers_on_loopback_only(ctl.of_port, "OpenFlow port")


def test_openflow_host_all_addresses_only_when_asked(tmp_path: Path) -> None:
    with controller_for_one_test(tmp_path, of_host="0.0.0.0") as ctl:
        assert wait_for(lambda: listen_addresses(ctl.of_port), 10, "the OpenFlow listener") == {"0.0.0.0"}


@pytest.mark.parametrize("taken_on", ["127.0.0.1", "0.0.0.0"])
def test_openflow_port_taken_is_refused_naming_the_address(tmp_path: Path, taken_on: str) -> None:
    with socket.socket() as s:
        s.bind((taken_on, 0))
        s.listen()
        port = s.getsockname()[1]
        plan = build_plan(FabricSpec())
        (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
        ctl = ControllerProcess(plan, ControllerOptions(of_port=port, api_port=free_port()), tmp_path)
        with pytest.raises(ControllerError, match=f"OpenFlow port 127.0.0.1:{port} is already in use"):
            ctl.check_ports()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "controller.main",
                "--plan",
                str(tmp_path / "plan.json"),
                "--of-port",
                str(port),
                "--api-port",
                str(free_port()),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"controller: OpenFlow port 127.0.0.1:{port} is already in use"
