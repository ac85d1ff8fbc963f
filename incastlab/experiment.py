"""The experiment runner: the same workers, one strategy after the other, on one fabric.

For each strategy it starts the captures and the PS-port queue sampler, launches the real PyTorch
processes in their Mininet hosts, follows their step logs (progress, phase for the dashboard),
stops everything when they finish or one of them fails, and saves what the controller and the
kernel counted. Everything lands in the run folder as it is produced; the summary and the report
are computed from those files afterwards, so they can be rebuilt from a saved run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from incastlab.runfolder import RunFolder, read_jsonl, read_steps, write_json, write_jsonl
from incastlab.session import Session
from topologies.spec import FabricSpec, SpecError

PS_FAMILY = ("ps", "async", "ssp", "backup")
COLLECTIVES = ("ring", "allreduce")
STRATEGIES = PS_FAMILY + COLLECTIVES
GLOO_PORT = 29500
PS_PORT = 29600


class ExperimentError(RuntimeError):
    """A strategy's run failed; the message is one line naming the process and step."""


@dataclass
class Straggler:
    """A slowed worker: CPU cap, slower link, periodic slow steps (any combination)."""

    host: str
    cpu: float | None = None
    link_mbit: float | None = None
    slow_every: int = 0
    slow_factor: float = 1.0
    compute_factor: float = 1.0


@dataclass
class ExperimentConfig:
    """Every parameter of a run (written to config.json)."""

    fabric: FabricSpec = field(default_factory=FabricSpec)
    workers: int = 0  # 0 = every host but the PS
    strategies: list[str] = field(default_factory=lambda: ["ps", "ring"])
    steps: int = 10
    grad_mb: float = 0.5
    batch: int = 32
    compute_ms: float = 0.0
    lr: float = 1.0
    seed: int = 0
    staleness: int = 2
    backup: int = 1
    capture: str = "all"  # all | ps-port | none
    snaplen: int = 128
    queue_sample_ms: float = 10.0
    interval: float = 0.5
    timeout: float = 60.0
    run_timeout: float = 900.0
    stragglers: list[Straggler] = field(default_factory=list)
    target_loss: float | None = None
    faults: list[str] = field(default_factory=list)

    def validate(self) -> None:
        """Refuse a run that cannot happen, naming the field."""
        hosts = self.fabric.host_names
        others = self.candidate_hosts
        if self.workers < 0 or self.workers > len(others):
            raise SpecError(f"workers must be 1..{len(others)} (hosts but the PS), got {self.workers}")
        n = self.n_workers
        if n < 2:
            raise SpecError(f"workers: data-parallel training needs at least 2 workers, got {n}")
        if not self.strategies:
            raise SpecError("strategies: name at least one")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise SpecError(f"strategies: unknown strategy {s!r} (known: {', '.join(STRATEGIES)})")
        if len(set(self.strategies)) != len(self.strategies):
            raise SpecError("strategies: each strategy may appear once")
        if self.steps < 1:
            raise SpecError(f"steps must be >= 1, got {self.steps}")
        if not 0 < self.grad_mb <= 256:
            raise SpecError(f"grad_mb must be in (0, 256], got {self.grad_mb}")
        if self.batch < 1:
            raise SpecError(f"batch must be >= 1, got {self.batch}")
        if self.staleness < 0:
            raise SpecError(f"staleness (ssp bound s) must be >= 0, got {self.staleness}")
        if not 0 <= self.backup < n:
            raise SpecError(f"backup (b backup workers) must be in [0, {n - 1}] for {n} workers, "
                            f"got {self.backup}")
        if self.capture not in ("all", "ps-port", "none"):
            raise SpecError(f"capture must be all, ps-port or none, got {self.capture!r}")
        if not 16 <= self.snaplen <= 65535:
            raise SpecError(f"snaplen must be in [16, 65535], got {self.snaplen}")
        worker_hosts = set(self.worker_hosts)
        for st in self.stragglers:
            if st.host not in hosts:
                raise SpecError(f"stragglers: host {st.host!r} does not exist (hosts are h1..h{len(hosts)})")
            if st.host not in worker_hosts:
                raise SpecError(f"stragglers: host {st.host!r} runs no worker in this run")
            if st.slow_every < 0 or st.slow_factor < 1 or st.compute_factor < 1:
                raise SpecError(f"stragglers: {st.host}: slow_every must be >= 0, slow_factor and "
                                "compute_factor >= 1")
        if self.compute_ms < 0:
            raise SpecError(f"compute_ms must be >= 0, got {self.compute_ms}")
        self.parsed_faults()

    def parsed_faults(self) -> list[Any]:
        """The fault specs, checked against the fabric."""
        from incastlab.faults import parse_fault
        from topologies.spec import build_plan

        plan = build_plan(self.fabric)
        return [parse_fault(f, plan, self.n_workers) for f in self.faults]

    @property
    def candidate_hosts(self) -> list[str]:
        """Every host but the PS, in name order: where workers may run."""
        return [h for h in self.fabric.host_names if h != self.fabric.ps_host]

    @property
    def n_workers(self) -> int:
        """How many workers train."""
        return self.workers or len(self.candidate_hosts)

    @property
    def worker_hosts(self) -> list[str]:
        """The hosts that run workers, in rank order."""
        return self.candidate_hosts[: self.n_workers]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters (also the keys the report reads)."""
        doc = asdict(self)
        doc["fabric"] = self.fabric.to_dict()
        doc["workers"] = self.n_workers
        doc["worker_hosts"] = self.worker_hosts
        doc["n_workers"] = self.n_workers
        doc["buffer_packets"] = self.fabric.buffer_pkts
        doc["ps_host"] = self.fabric.ps_host
        return doc


@dataclass
class Proc:
    """One launched training process."""

    role: str  # "ps" or "worker"
    rank: int
    host: str
    popen: subprocess.Popen[bytes]
    log: Path
    stderr: Path

    @property
    def label(self) -> str:
        """How errors name it."""
        return "parameter server" if self.role == "ps" else f"worker {self.rank} ({self.host})"


def parse_nstat(snmp: str, netstat: str) -> dict[str, int]:
    """/proc/net/snmp and /proc/net/netstat as nstat names them (TcpRetransSegs, TcpExtTCPTimeouts, ...).

    Both files hold pairs of lines, a header line of field names and a line of values, each line
    starting with its group ("Tcp:", "TcpExt:"); only the TCP groups are kept.
    """
    out: dict[str, int] = {}
    for text in (snmp, netstat):
        lines = [ln.split() for ln in text.splitlines() if ln.strip()]
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            group = head[0].rstrip(":")
            if group not in ("Tcp", "TcpExt") or vals[0] != head[0]:
                continue
            for name, val in zip(head[1:], vals[1:], strict=False):
                try:
                    out[group + name] = int(val)
                except ValueError:
                    continue
    return out


def host_counters(host: Any) -> dict[str, Any]:
    """TCP counters and interface bytes of one host's network namespace, read from /proc/<pid>/net.

    Read through the host shell's pid, not by running a command in the shell: a shell whose last
    command was cut short by Ctrl-C never answers again, while its /proc files always do.
    """
    base = Path(f"/proc/{host.shell.pid}/net")
    kernel = parse_nstat((base / "snmp").read_text(), (base / "netstat").read_text())
    out: dict[str, Any] = {"tcp_retransmits": kernel.get("TcpRetransSegs", 0), "tx_bytes": 0, "rx_bytes": 0}
    m = re.search(rf"{host.name}-eth0:\s*(\d+)(?:\s+\d+){{7}}\s+(\d+)", (base / "dev").read_text())
    if m:
        out["rx_bytes"], out["tx_bytes"] = int(m.group(1)), int(m.group(2))
    out["kernel"] = kernel
    return out


def counter_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after - before of host_counters; `kernel` keeps only the counters that moved (gauges such
    as TcpCurrEstab are differences too, read them as such)."""
    out: dict[str, Any] = {k: after[k] - before[k] for k in ("tcp_retransmits", "tx_bytes", "rx_bytes")}
    kb, ka = before.get("kernel", {}), after.get("kernel", {})
    out["kernel"] = {k: v - kb.get(k, 0) for k, v in sorted(ka.items()) if v - kb.get(k, 0)}
    return out


class StrategyRun:
    """One strategy's processes, captures and records in <run>/<strategy>/."""

    def __init__(self, session: Session, config: ExperimentConfig, strategy: str, out: Path,
                 index: int, say: Callable[[str], None]) -> None:
        self.s = session
        self.cfg = config
        self.strategy = strategy
        self.out = out
        self.index = index
        self.say = say
        self.procs: list[Proc] = []
        self.captures: Any = None
        self.sampler: Any = None
        self.t_start = 0.0
        self.t_end = 0.0
        self.killed: dict[int, str] = {}  # rank -> fault that killed it
        self.dead_since: dict[int, float] = {}  # index in procs -> when first seen dead
        self.injector: Any = None
        self.lost: dict[int, str] = {}  # async only: rank -> why the run goes on without it

    # -- launching --------------------------------------------------------------------------
    def _python(self) -> list[str]:
        return [sys.executable, "-u", "-m"]

    def _launch(self, role: str, rank: int, host: str, argv: list[str]) -> None:
        node = self.s.fabric.host(host)
        stem = "ps" if role == "ps" else f"worker-{rank}"
        err = self.out / f"{stem}.stderr"
        with open(err, "wb") as ferr:
            popen = node.popen(argv, stdout=subprocess.DEVNULL, stderr=ferr)
        self.procs.append(Proc(role, rank, host, popen, self.out / f"{stem}.jsonl", err))

    def launch(self) -> None:
        """Start the PS (if any), then every worker, each in its own Mininet host."""
        cfg, plan = self.cfg, self.s.plan
        ip = {h["name"]: h["ip"] for h in plan["hosts"]}
        common = ["--steps", str(cfg.steps), "--grad-mb", str(cfg.grad_mb), "--lr", str(cfg.lr),
                  "--seed", str(cfg.seed), "--timeout", str(cfg.timeout)]
        n = cfg.n_workers
        if self.strategy in PS_FAMILY:
            port = PS_PORT + self.index
            master = ip[cfg.fabric.ps_host]
            argv = self._python() + ["workloads.ps", "--strategy", self.strategy, "--world", str(n),
                                     "--port", str(port), "--log", str(self.out / "ps.jsonl"),
                                     "--staleness", str(cfg.staleness)] + common
            if self.strategy == "backup":
                argv += ["--backup", str(cfg.backup)]
            self._launch("ps", -1, cfg.fabric.ps_host, argv)
        else:
            port = GLOO_PORT + self.index
            master = ip[cfg.worker_hosts[0]]
        slow = {st.host: st for st in cfg.stragglers}
        for rank, host in enumerate(cfg.worker_hosts):
            argv = self._python() + ["workloads.worker", "--strategy", self.strategy, "--rank", str(rank),
                                     "--world", str(n), "--batch", str(cfg.batch), "--master-addr", master,
                                     "--master-port", str(port), "--ifname", f"{host}-eth0",
                                     "--log", str(self.out / f"worker-{rank}.jsonl")] + common
            st = slow.get(host)
            if cfg.compute_ms:
                argv += ["--compute-ms", str(cfg.compute_ms)]
            if st and st.slow_every:
                argv += ["--slow-every", str(st.slow_every), "--slow-factor", str(st.slow_factor)]
            if st and st.compute_factor != 1.0:
                argv += ["--compute-factor", str(st.compute_factor)]
            self._launch("worker", rank, host, argv)

    # -- capture ----------------------------------------------------------------------------
    def start_capture(self) -> None:
        """tcpdump on the PS port (and every host taking part), and the PS-port queue sampler."""
        from capture.pcap import CapturePoint, PcapCapture
        from capture.queue_depth import QueueSampler

        ps_port = self.s.plan["ps_port"]["name"]
        self.sampler = QueueSampler(ps_port, self.out / "queue_depth.jsonl",
                                    interval=self.cfg.queue_sample_ms / 1000.0)
        self.sampler.start()
        if self.cfg.capture == "none":
            return
        pcap_dir = self.out / "pcap"
        pcap_dir.mkdir(exist_ok=True)
        points = [CapturePoint("ps-port", ps_port, pcap_dir / "ps-port.pcap")]
        if self.cfg.capture == "all":
            hosts = self.cfg.worker_hosts
            if self.strategy in PS_FAMILY:
                hosts = [self.cfg.fabric.ps_host] + hosts
            for h in hosts:
                node = self.s.fabric.host(h)
                points.append(CapturePoint(h, f"{h}-eth0", pcap_dir / f"{h}.pcap", popen=node.popen))
        self.captures = PcapCapture(points, snaplen=self.cfg.snaplen, base_dir=self.out)
        self.captures.start()

    def stop_capture(self) -> None:
        """Stop tcpdump (recording what each lost) and the sampler."""
        if self.captures is not None:
            try:
                self.captures.stop()  # writes capture.json (paths relative to the strategy folder)
            finally:
                self.captures = None
        if self.sampler is not None:
            try:
                stats = self.sampler.stop()
                write_json(self.out / "queue_depth_summary.json", stats)
            finally:
                self.sampler = None

    # -- following ----------------------------------------------------------------------------
    def _steps_done(self) -> dict[int, int]:
        done = {}
        for p in self.procs:
            if p.role == "worker":
                done[p.rank] = len(read_steps(p.log))
        return done

    def _last_err(self, p: Proc) -> str:
        try:
            lines = [ln for ln in p.stderr.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        return lines[-1].strip() if lines else "no message"

    def kill_worker(self, rank: int) -> None:
        """Fault injection: SIGKILL one worker, as a crash would."""
        for p in self.procs:
            if p.role == "worker" and p.rank == rank and p.popen.poll() is None:
                p.popen.kill()
                self.killed[rank] = f"kill-worker:{rank}"

    def wait(self) -> None:
        """Follow the processes until all finish; raise ExperimentError when one fails or hangs."""
        deadline = time.monotonic() + self.cfg.run_timeout
        last_shown = None
        while True:
            done = self._steps_done()
            if self.injector is not None:
                self.injector.tick(min(done.values(), default=0))
            if done:
                lo, hi = min(done.values()), max(done.values())
                shown = (lo, hi)
                if shown != last_shown:
                    ahead = f" (fastest at {hi})" if hi != lo else ""
                    self.say(f"{self.strategy}: step {lo}/{self.cfg.steps}{ahead}")
                    self.s.controller.set_phase(state="running", strategy=self.strategy, step=lo,
                                                steps=self.cfg.steps, fastest=hi)
                    last_shown = shown
            codes = [(p, p.popen.poll()) for p in self.procs]
            now = time.monotonic()
            for k, (_p, c) in enumerate(codes):
                if c not in (None, 0):
                    self.dead_since.setdefault(k, now)
            failed = [(k, p, c) for k, (p, c) in enumerate(codes) if c not in (None, 0)]
            if self.strategy == "async":  # asynchronous SGD carries on without a dead worker
                for _k, p, code in failed:
                    if p.role == "worker" and p.rank not in self.lost:
                        why = (f"killed by fault {self.killed[p.rank]}" if p.rank in self.killed
                               else f"exited with code {code}: {self._last_err(p)}")
                        self.lost[p.rank] = why
                        self.say(f"async: {p.label} {why} at step {done.get(p.rank, 0)}; "
                                 f"training goes on with {self.cfg.n_workers - len(self.lost)} workers")
                failed = [(k, p, c) for k, p, c in failed if p.role != "worker" or p.rank not in self.lost]
            if failed:
                # the first to die is the cause; the others usually fail because of it
                def cause(kpc: tuple[int, Proc, int | None]) -> tuple[bool, float]:
                    k, p, _ = kpc
                    return (p.role != "worker" or p.rank not in self.killed, self.dead_since[k])

                k, p, code = min(failed, key=cause)
                step = done.get(p.rank, 0) if p.role == "worker" else min(done.values(), default=0)
                if p.role == "worker" and p.rank in self.killed:
                    why = f"killed by fault {self.killed[p.rank]}"
                else:
                    why = f"exited with code {code}: {self._last_err(p)}"
                raise ExperimentError(f"{self.strategy}: {p.label} {why} at step {step}")
            if all(c == 0 or (p.role == "worker" and p.rank in self.lost) for p, c in codes):
                return
            if time.monotonic() > deadline:
                raise ExperimentError(f"{self.strategy}: not finished after {self.cfg.run_timeout:.0f} s "
                                      f"(workers at steps {done})")
            time.sleep(0.5)

    def stop_procs(self) -> None:
        """Terminate whatever still runs (after a failure or an interrupt)."""
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.terminate()
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()

    # -- the whole run ------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run the strategy; always leaves status.json saying how it ended."""
        hosts = [h["name"] for h in self.s.plan["hosts"]]
        before = {h: host_counters(self.s.fabric.host(h)) for h in hosts}
        write_json(self.out / "status.json", {"state": "running", "error": None})
        state, error = "incomplete", None
        self.s.controller.set_phase(state="starting", strategy=self.strategy, step=0, steps=self.cfg.steps)
        try:
            self.start_capture()
            self.t_start = time.time()
            faults = self.cfg.parsed_faults()
            if faults:
                from incastlab.faults import FaultInjector

                self.injector = FaultInjector(faults, self.out / "faults.jsonl", self.kill_worker,
                                              self.s.controller, self.say)
                self.injector.start()
            self.launch()
            self.wait()
            state = "complete"
        except ExperimentError as exc:
            state, error = "failed", str(exc)
            raise
        except KeyboardInterrupt:
            state, error = "incomplete", "interrupted"
            raise
        finally:
            self.t_end = time.time()
            self.stop_procs()
            if self.injector is not None:
                self.injector.finish()
                if not self.s.controller.alive():  # a controller fault must not outlive its strategy
                    self.s.controller.start()
            time.sleep(2.5 * self.cfg.interval)  # let the controller poll the final counters
            self._save_records(before, hosts)
            self.stop_capture()
            write_json(self.out / "status.json", {"state": state, "error": error, "t_start": self.t_start,
                                                  "t_end": self.t_end,
                                                  "lost_workers": {str(r): w for r, w in self.lost.items()}})
            self.s.controller.set_phase(state="done" if state == "complete" else state,
                                        strategy=self.strategy, step=None, steps=self.cfg.steps)
        return {"state": state, "t_start": self.t_start, "t_end": self.t_end}

    def _save_records(self, before: dict[str, dict[str, int]], hosts: list[str]) -> None:
        """Kernel counters per host and the controller's samples of this strategy's window."""
        try:
            after = {h: host_counters(self.s.fabric.host(h)) for h in hosts}
            write_json(self.out / "hosts.json", {h: counter_deltas(before[h], after[h]) for h in hosts})
        except Exception as exc:  # noqa: BLE001 - a dead host shell must not lose the other records
            self.say(f"{self.strategy}: could not read host counters: {exc}")
        since = self.t_start - 3 * self.cfg.interval
        record = self.s.controller.record
        try:
            if record is not None and record.exists():
                # the record survives controller restarts; the API only knows the current process
                samples = [r for r in read_jsonl(record) if r.get("t", 0) > since]
            else:
                samples = self.s.controller.get(f"/api/timeseries?since={since}", timeout=10)["samples"]
            write_jsonl(self.out / "timeseries.jsonl", samples)
        except Exception as exc:  # noqa: BLE001 - the controller may be the thing that failed
            self.say(f"{self.strategy}: controller time series unavailable ({exc})")


def run_experiment(session: Session, config: ExperimentConfig, folder: RunFolder,
                   say: Callable[[str], None]) -> dict[str, Any]:
    """Every strategy of the config, one after the other; returns per-strategy outcomes.

    A failing strategy ends the experiment (its ExperimentError propagates) after its records
    are saved; the strategies before it keep theirs.
    """
    outcomes: dict[str, Any] = {}
    write_json(folder.path / "topology.json", session.controller.get("/api/topology"))
    for k, strategy in enumerate(config.strategies):
        say(f"{strategy}: starting {config.n_workers} workers ({k + 1}/{len(config.strategies)} strategies)")
        run = StrategyRun(session, config, strategy, folder.strategy_dir(strategy), k, say)
        outcomes[strategy] = run.run()
        say(f"{strategy}: done in {outcomes[strategy]['t_end'] - outcomes[strategy]['t_start']:.1f} s")
    return outcomes
