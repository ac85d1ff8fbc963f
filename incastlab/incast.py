"""`incastlab incast`: the incast curve on a real fabric, every curve and point on one session.

For each curve (runmodel.incast.IncastLine): set the switch buffers (the client's port shallow,
every other port deep: Fabric.set_port_buffer, no rebuild), the hosts' TCP (congestion control
and minimum RTO in every namespace, delayed ACKs off at the client for quickack=1), then start the
15 servers, so their sockets are made with the new settings. For each sender count N: kernel
counters of every host before, the queue sampler on every switch port, the CPU sampler, tcpdump
at the client's leaf port (the bottleneck's egress), on the client and on each of the N senders;
run the client (R rounds); then everything stopped and saved into <run>/<curve>/nNN/. The figures
(incast.json) and the report are computed afterwards from those files only (analysis.incast,
report.incast), so `incastlab incast --rebuild RUN` recomputes them from a saved run.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from incastlab.record import Recorder
from incastlab.session import Session
from runmodel.folder import RunFolder
from runmodel.incast import (
    OPTIONAL_LINES,
    SERVER_PORT,
    ClientJob,
    IncastConfig,
    IncastFolder,
    IncastLine,
    LineFolder,
    LineSettings,
    PointFolder,
    ServerAddr,
    ServerSet,
)
from runmodel.params import ParamError
from runmodel.records import Status, read_jsonl, write_json
from topologies import hosttcp
from topologies.fabric import kernel_config, qdisc_available
from topologies.processes import stop_processes

SERVER_START_S = 20.0  # at least; a sweep's --timeout when longer (15 Pythons starting under TCG take more)


class PointError(RuntimeError):
    """A point could not be measured (its client failed or hung); the sweep goes on."""


# -- what this kernel can run -------------------------------------------------------------------------
def dctcp_reason() -> str | None:
    """Why DCTCP cannot run here (None if it can): it needs tcp_dctcp and a marking qdisc (sch_red)."""
    missing = []
    if "dctcp" not in hosttcp.available_cc():
        try:
            hosttcp.check_cc("dctcp")
        except ParamError:
            cfg = kernel_config("CONFIG_TCP_CONG_DCTCP")
            missing.append("no tcp_dctcp" + (" (CONFIG_TCP_CONG_DCTCP is not set)" if cfg == "" else ""))
    if not qdisc_available("red"):
        cfg = kernel_config("CONFIG_NET_SCH_RED")
        missing.append(
            "no sch_red to mark ECN at the switch" + (" (CONFIG_NET_SCH_RED is not set)" if cfg == "" else "")
        )
    if not missing:
        return None
    return f"this kernel has {' and '.join(missing)}; it runs where the kernel has both (e.g. the Vagrant VM)"


def why_not(s: LineSettings) -> str | None:
    """Why this kernel cannot run a curve's settings, or None."""
    if s.cc == "dctcp":
        reason = dctcp_reason()
        if reason:
            return reason
    else:
        try:
            hosttcp.check_cc(s.cc)
        except ParamError as exc:
            return str(exc)
    if not hosttcp.rto_min_settable():
        if s.rto_min_ms != 200.0:
            return "this kernel has no per-namespace net.ipv4.tcp_rto_min_us, so only the default 200 ms runs"
    else:
        try:
            hosttcp.check_rto_min(s.rto_min_ms)
        except ParamError as exc:
            return str(exc)
    return None


def kernel_checks(cfg: IncastConfig, lines_given: bool) -> tuple[IncastConfig, list[dict[str, str]]]:
    """Refuse a curve this kernel cannot run (ParamError, before anything is built); a default curve
    marked optional (cc=dctcp) is left out instead, with its reason in the returned list."""
    not_run: list[dict[str, str]] = []
    drop: set[str] = set()
    for line in cfg.curves:
        reason = why_not(cfg.settings(line))
        if reason is None:
            continue
        if not lines_given and line.name in OPTIONAL_LINES:
            not_run.append({"line": line.name, "reason": reason})
            drop.add(line.name)
        else:
            raise ParamError(f"lines: {line.name}: {reason}")
    return cfg.without(drop), not_run


def timer_hz() -> int | None:
    """The kernel's timer frequency (CONFIG_HZ): a minimum RTO is rounded up to whole ticks of it."""
    value = kernel_config("CONFIG_HZ")
    return int(value) if value and value.isdigit() else None


def environment(sess: Session, cfg: IncastConfig) -> dict[str, Any]:
    """What the machine gave the sweep, next to what was asked (recorded in config.json)."""
    env = dataclasses.asdict(sess.environment())
    try:
        default_cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        default_cc = "unknown"
    env.update(
        {
            "default_cc": default_cc,
            "timer_hz": timer_hz(),
            "available_cc": hosttcp.available_cc(),
            "rto_min_settable": hosttcp.rto_min_settable(),
            "ecn_marking": qdisc_available("red"),
            "client_port": cfg.client_port(sess.plan),
        }
    )
    env.pop("torch", None)
    return env


# -- one curve ----------------------------------------------------------------------------------------
class Servers:
    """The servers of one curve, one process per host, all listening before a point starts."""

    def __init__(self, sess: Session, cfg: IncastConfig, lf: LineFolder) -> None:
        self.sess = sess
        self.lf = lf
        plan = sess.plan
        self.job = ServerSet(
            cfg.sru_bytes,
            tuple(ServerAddr(h, plan.host(h).ip, SERVER_PORT) for h in cfg.servers(cfg.max_senders)),
            str(lf.path),
        )
        self.procs: list[Any] = []
        self.start_s = max(SERVER_START_S, cfg.timeout)

    def start(self) -> None:
        self.job.write(self.lf.servers_file)
        for s in self.job.servers:
            argv = [
                sys.executable,
                "-u",
                "-m",
                "workloads.incast",
                "server",
                "--job",
                str(self.lf.servers_file),
                "--host",
                s.host,
            ]
            with open(self.lf.server_stderr(s.host), "wb") as err:
                self.procs.append(
                    self.sess.fabric.workload_popen(s.host, argv[1:], stdout=subprocess.DEVNULL, stderr=err)
                )
        deadline = time.monotonic() + self.start_s
        waiting = list(zip(self.job.servers, self.procs, strict=True))
        while waiting:
            still = []
            for s, proc in waiting:
                rows = read_jsonl(self.job.log(s.host))
                if any(r.get("event") == "listening" for r in rows):
                    continue
                if proc.poll() is not None:
                    raise PointError(
                        f"the server on {s.host} exited ({proc.returncode}): "
                        f"{_tail(self.lf.server_stderr(s.host))}"
                    )
                still.append((s, proc))
            waiting = still
            if waiting and time.monotonic() > deadline:
                raise PointError(
                    f"servers not listening after {self.start_s:g} s: {', '.join(s.host for s, _ in waiting)}"
                )
            if waiting:
                time.sleep(0.05)

    def stop(self) -> None:
        stop_processes(self.procs)
        self.procs = []


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no stderr"
    return lines[-1] if lines else "no stderr"


def apply_line(sess: Session, cfg: IncastConfig, s: LineSettings) -> dict[str, Any]:
    """Buffers and TCP of one curve; returns what the kernel reports back (settings.json)."""
    port = cfg.client_port(sess.plan)
    others = sorted(p for p in sess.plan.port_names() if p != port)
    sess.fabric.set_port_buffer(others, cfg.fabric_buffer_pkts)
    mark = max(1, s.buffer_pkts // 4) if s.ecn else None
    sess.fabric.set_port_buffer([port], s.buffer_pkts, ecn_mark_pkts=mark)
    rto: float | None = s.rto_min_ms if hosttcp.rto_min_settable() else None
    read = sess.set_tcp(
        s.cc,
        rto,
        quickack=[cfg.client] if s.quickack else [],
        check=[cfg.client, cfg.server_order[0]],
    )
    return {
        "asked": dataclasses.asdict(s),
        "kernel": {h: dataclasses.asdict(got) for h, got in read.items()},
        "client_port": port,
        "ecn_mark_pkts": mark,
        "other_ports_buffer_pkts": cfg.fabric_buffer_pkts,
    }


# -- one point ----------------------------------------------------------------------------------------
def run_point(
    sess: Session,
    cfg: IncastConfig,
    line: IncastLine,
    s: LineSettings,
    pf: PointFolder,
    servers: ServerSet,
    n: int,
    say: Callable[[str], None],
) -> Status:
    """One sender count of one curve, measured into its folder; always leaves status.json."""
    pf.path.mkdir(parents=True, exist_ok=True)
    pf.write_status(Status("running"))
    hosts = [cfg.client, *cfg.servers(n)]
    job = ClientJob(
        client=cfg.client,
        servers=servers.servers[:n],
        sru_bytes=cfg.sru_bytes,
        rounds=cfg.rounds,
        max_concurrent=s.max_concurrent,
        timeout=cfg.timeout,
        log=str(pf.client_log),
    )
    job.write(pf.job_file)
    rec = Recorder(
        sess,
        pf,
        say,
        port=cfg.client_port(sess.plan),
        port_point="client-port",
        hosts=hosts,
        capture=cfg.capture,
        snaplen=cfg.snaplen,
        queue_sample_ms=cfg.queue_sample_ms,
    )
    state, error = "failed", None
    t_start = t_end = time.time()
    proc = None
    try:
        rec.start()
        t_start = time.time()
        argv = [sys.executable, "-u", "-m", "workloads.incast", "client", "--job", str(pf.job_file)]
        with open(pf.client_stderr, "wb") as err:
            proc = sess.fabric.workload_popen(cfg.client, argv[1:], stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + cfg.timeout * (cfg.rounds + 1) + 10
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise PointError(
                    f"{line.name} N={n}: the client did not finish in "
                    f"{cfg.timeout * (cfg.rounds + 1) + 10:.0f} s"
                )
            time.sleep(0.05)
        if proc.returncode != 0:
            raise PointError(f"{line.name} N={n}: the client failed: {_tail(pf.client_stderr)}")
        state = "complete"
    except PointError as exc:
        error = str(exc)
    except KeyboardInterrupt:
        state, error = "incomplete", "interrupted"
        raise
    finally:
        t_end = time.time()
        if proc is not None:
            stop_processes([proc])
        rec.stop(t_start, t_end)
        pf.write_status(Status(state, error, t_start, t_end))
    return Status(state, error, t_start, t_end)


def quick_figures(pf: PointFolder, cfg: IncastConfig, hosts: list[str]) -> str:
    """One progress line's figures, straight from the client log and the kernel counters."""
    log = pf.rounds()
    if not log.rounds:
        return "no rounds"
    span = log.rounds[-1].t_end - log.rounds[0].t_start
    mbit = sum(r.bytes for r in log.rounds) * 8 / span / 1e6 if span > 0 else 0.0
    counters = pf.hosts() or {}
    timeouts = sum(counters[h].counter("TcpExtTCPTimeouts") for h in hosts if h in counters)
    probes = sum(counters[h].counter("TcpExtTCPLossProbes") for h in hosts if h in counters)
    rate = cfg.plan().host(cfg.client).rate_mbit
    return (
        f"goodput {mbit:.2f} Mbit/s ({mbit / rate:.0%} of the link), "
        f"{timeouts} timeouts and {probes} loss probes (kernel, senders)"
    )


def run_sweep(
    sess: Session, cfg: IncastConfig, folder: IncastFolder, say: Callable[[str], None]
) -> list[str]:
    """Every curve and point of the sweep; returns the errors of the points that failed."""
    failures: list[str] = []
    write_json(folder.topology_file, sess.controller.get("/api/topology"))
    points = len(cfg.curves) * len(cfg.senders)
    k = 0
    for line in cfg.curves:
        s = cfg.settings(line)
        lf = folder.line(line)
        lf.path.mkdir(parents=True, exist_ok=True)
        say(
            f"{line.name}: rto_min {s.rto_min_ms:g} ms, {s.cc}, client-port buffer {s.buffer_pkts} packets, "
            f"quickack {s.quickack}, max_concurrent {s.max_concurrent or 'all'}"
        )
        write_json(lf.settings_file, apply_line(sess, cfg, s))
        servers = Servers(sess, cfg, lf)
        try:
            servers.start()
            for n in cfg.senders:
                k += 1
                pf = lf.point(n)
                status = run_point(sess, cfg, line, s, pf, servers.job, n, say)
                if status.state != "complete":
                    failures.append(status.error or f"{line.name} N={n}: {status.state}")
                    say(f"{line.name} N={n} ({k}/{points}): FAILED: {status.error}")
                else:
                    say(f"{line.name} N={n} ({k}/{points}): {quick_figures(pf, cfg, cfg.servers(n))}")
        except PointError as exc:
            failures.append(str(exc))
            say(f"{line.name}: {exc}")
        finally:
            servers.stop()
    return failures


# -- the command --------------------------------------------------------------------------------------
def finish(run_dir: Path, say: Callable[[str], None], as_json: bool = False) -> int:
    """incast.json, the table and the report from a run folder's files; 0, or 1 if a step failed.
    With as_json the table is printed as JSON (the run folder under `run`) and the report's path
    goes to stderr, so stdout is one document."""
    from analysis.incast import analyze_sweep
    from report.console import incast, table_text

    try:
        say("analysis: reading the captures and counters of every point")
        result = analyze_sweep(run_dir)
        print(table_text(incast(result), run_dir, as_json), flush=True)
    except Exception as exc:  # noqa: BLE001 - the run's files stay; rebuild later
        say(
            f"analysis failed: {type(exc).__name__}: {exc} (rebuild with `incastlab incast --rebuild "
            f"{run_dir}`)"
        )
        return 1
    try:
        from report.incast import build_incast_report

        say("report: building")
        files = build_incast_report(run_dir)
        (say if as_json else print)(f"report: {files['html']}")
    except Exception as exc:  # noqa: BLE001
        say(
            f"report failed: {type(exc).__name__}: {exc} (rebuild with `incastlab incast --rebuild "
            f"{run_dir}`)"
        )
        return 1
    return 0


def run(
    cfg: IncastConfig,
    results: Path,
    lines_given: bool,
    say: Callable[[str], None],
    scenario: str = "",
    provenance: dict[str, Any] | None = None,
    name: str = "",
    as_json: bool = False,
) -> int:
    """The whole command after its flags: kernel checks, the sweep, the figures and the report.
    `provenance` (incastlab.version.provenance's dict) goes into config.json as compare's does;
    `name` (--name, already checked) ends the run folder's name; as_json: finish's."""
    from incastlab.session import run_session

    cfg, not_run = kernel_checks(cfg, lines_given)
    for item in not_run:
        say(f"{item['line']}: not run: {item['reason']}")
    if not cfg.curves:
        raise ParamError("lines: no curve this kernel can run")
    base = RunFolder.create(results, label=name)
    folder = IncastFolder(base.path)
    doc = dict(cfg.to_dict(), scenario=scenario, not_run=not_run)
    if provenance is not None:
        doc["provenance"] = provenance
    write_json(folder.config_file, doc)
    write_json(folder.plan_file, cfg.plan().to_dict())
    say(f"run folder: {folder.path}")
    say(
        f"sweep: {len(cfg.curves)} curves x senders {','.join(map(str, cfg.senders))}, {cfg.rounds} rounds, "
        f"SRU {cfg.sru_bytes} bytes, {cfg.fabric.host_mbit:g} Mbit/s links, client port "
        f"{cfg.fabric.buffer_pkts} "
        "packets"
    )
    code = 0
    error: str | None = None
    t0 = time.monotonic()
    try:
        tcp = (cfg.cc, cfg.rto_min_ms if hosttcp.rto_min_settable() else None)
        with run_session(cfg, folder, say, tcp) as sess:
            doc["environment"] = environment(sess, cfg)
            write_json(folder.config_file, doc)
            failures = run_sweep(sess, cfg, folder, say)
            if failures:
                code, error = 1, f"{len(failures)} point(s) failed, first: {failures[0]}"
    except KeyboardInterrupt:
        code, error = 130, "interrupted"
    say(f"sweep took {time.monotonic() - t0:.0f} s")
    done = finish(folder.path, say, as_json)
    if error:
        print(f"incastlab incast: {error}; results so far are in {folder.path}", file=sys.stderr)
    return code or done
