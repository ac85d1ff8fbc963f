"""What one run's window leaves besides its processes' own logs: captures, queue samples, CPU, the
kernel's counters per host, and the controller's samples of the window. One recorder for a
strategy of compare or job (Recorder.for_strategy) and for a point of incast (incastlab.incast).

Everything is written into the strategy's folder as it is produced or as soon as it is known, so
an interrupted run keeps what was measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from analysis.fidelity import cpu_figures
from capture.counters import counter_deltas, host_counters
from capture.cpu import CpuSampler, StreamedReadings, stream_script
from capture.pcap import CapturePoint, PcapCapture
from capture.queue_depth import QueueSampler, RemoteQueueSampler
from runmodel.config import ExperimentConfig
from runmodel.folder import StrategyFolder
from runmodel.records import HostCounters, read_cpu_samples, read_jsonl, write_json, write_jsonl


@dataclass(eq=False)
class Recorder:
    """Starts and stops the measurements of one run's window around its processes.

    The caller names what is watched: `port`, the bottleneck switch port (sampled first, captured as
    `port_point`), and `hosts`, captured at their NIC when `capture` is "all" ("none": no capture, any
    other value: the port only). The queue sampler covers every switch port and the kernel counters
    every host. `controller_interval` set: the controller's samples of the window are saved too.

    Over servers (a fabric whose ports are not here) each capture runs on the server that holds its
    node, a queue sampler on each server of the ports it holds (merged into the one file), and each
    server's CPU is sampled too (cpu-<server>.jsonl; its figures go to cluster.json).
    """

    session: Any
    folder: StrategyFolder
    say: Callable[[str], None]
    _: KW_ONLY
    port: str
    port_point: str
    hosts: list[str]
    capture: str
    snaplen: int
    queue_sample_ms: float
    controller_interval: float | None = None
    # what start() starts and stop() ends, and the kernel counters before the window
    captures: PcapCapture | None = field(default=None, init=False)
    sampler: QueueSampler | None = field(default=None, init=False)
    cpu: CpuSampler | None = field(default=None, init=False)
    server_cpus: dict[str, CpuSampler] = field(default_factory=dict, init=False)  # over servers
    server_samplers: dict[str, RemoteQueueSampler] = field(default_factory=dict, init=False)
    before: dict[str, HostCounters] = field(default_factory=dict, init=False)

    @classmethod
    def for_strategy(
        cls,
        session: Any,
        cfg: ExperimentConfig,
        folder: StrategyFolder,
        participants: list[str],
        say: Callable[[str], None],
    ) -> Recorder:
        """One strategy of compare or job: the PS port, the strategy's hosts, the controller's samples."""
        return cls(
            session,
            folder,
            say,
            port=session.plan.ps_port.name,
            port_point="ps-port",
            hosts=participants,
            capture=cfg.capture,
            snaplen=cfg.snaplen,
            queue_sample_ms=cfg.queue_sample_ms,
            controller_interval=cfg.controller.interval,
        )

    def _counters(self) -> dict[str, HostCounters]:
        return {h: self.session.fabric.host_call(h, host_counters, h) for h in self.session.plan.host_names}

    def start(self) -> None:
        """Kernel counters before; the queue sampler, the port's first; tcpdump on the capture points."""
        self.before = self._counters()
        ports = [self.port] + sorted(p for p in self.session.plan.port_names() if p != self.port)
        if self.session.fabric.ports_here:
            self.sampler = QueueSampler(
                ports, self.folder.queue_depth_file, interval=self.queue_sample_ms / 1000.0
            )
            self.sampler.start()
        else:  # a cluster: a sampler on each server, of the ports it holds
            self._start_server_samplers(ports)
        self.cpu = CpuSampler(self.folder.cpu_file)
        self.cpu.start()
        if not self.session.fabric.ports_here:  # each server's CPU, one ssh streaming its /proc
            for server in self.session.fabric.servers:
                argv = self.session.fabric.server_argv(server, stream_script())
                sampler = CpuSampler(self._server_cpu_file(server), source=StreamedReadings(argv))
                sampler.start()
                self.server_cpus[server] = sampler
        if self.capture == "none":
            return
        self.folder.pcap_dir.mkdir(parents=True, exist_ok=True)
        switch = next((p.switch for p in self.session.plan.switch_ports() if p.name == self.port), "")
        points = [self._point(self.port_point, self.port, switch)]
        if self.capture == "all":
            points += [self._point(h, self.session.plan.host(h).nic, h) for h in self.hosts]
        self.captures = PcapCapture(points, snaplen=self.snaplen, base_dir=self.folder.path)
        self.captures.start()

    def _start_server_samplers(self, ports: list[str]) -> None:
        """One RemoteQueueSampler per server (through the fabric's ssh), of the ports of the switches
        it holds, each into its own part of the folder; stop() merges them."""
        fabric = self.session.fabric
        switch_of = {p.name: p.switch for p in self.session.plan.switch_ports()}
        for server in fabric.servers:
            mine = [p for p in ports if fabric.where[switch_of[p]] == server]
            if mine:
                interval = f"{self.queue_sample_ms / 1000.0:g}"
                args = ["-m", "capture.queue_depth", str(self._part(server)), interval, *mine]
                self.server_samplers[server] = RemoteQueueSampler(fabric.server_python(server, args))
        with ThreadPoolExecutor(max_workers=max(1, len(self.server_samplers))) as pool:
            list(pool.map(RemoteQueueSampler.start, self.server_samplers.values()))  # at once

    def _part(self, server: str) -> Path:
        """queue_depth-<server>.jsonl: one server's samples until stop() merges them."""
        return self.folder.path.resolve() / f"queue_depth-{server}.jsonl"

    def _stop_server_samplers(self) -> dict[str, Any]:
        """Every server's sampler stopped; their samples merged in time order into queue_depth.jsonl
        (the parts removed) and their summaries into one: the figures of the server with the watched
        port first, every server's ports, and each server's own account under `servers`."""
        summaries = {server: s.stop() for server, s in self.server_samplers.items()}
        self.server_samplers = {}
        rows = [
            r for server in summaries if self._part(server).exists() for r in read_jsonl(self._part(server))
        ]
        write_jsonl(self.folder.queue_depth_file, sorted(rows, key=lambda r: r.get("t", 0)))
        for server in summaries:
            self._part(server).unlink(missing_ok=True)
        first = next((s for s in summaries.values() if self.port in s.get("ports", {})), {})
        errors = [f"{server}: {s['error']}" for server, s in summaries.items() if s.get("error")]
        return {
            **first,
            "error": "; ".join(errors) or None,
            "ports": {p: v for s in summaries.values() for p, v in s.get("ports", {}).items()},
            "servers": {
                server: {k: s.get(k) for k in ("samples", "interval_s_median", "interval_s_max", "error")}
                for server, s in summaries.items()
            },
        }

    def _point(self, name: str, iface: str, node: str) -> CapturePoint:
        """The capture point `name` on `iface` of `node` (a host, or the switch that has the port).
        Here: a host's tcpdump in its namespace, a port's in the root one. Over servers: tcpdump on
        the node's server, through the node (ssh), writing the run folder at the same (absolute)
        path, and interrupted there (ClusterFabric.interrupt_capture)."""
        fabric = self.session.fabric
        if fabric.ports_here:
            if node in self.session.plan.host_names:
                return CapturePoint(name, iface, self.folder.pcap(name), popen=fabric.host(node).popen)
            return CapturePoint(name, iface, self.folder.pcap(name))
        file = self.folder.pcap(name).resolve()
        stop = partial(fabric.interrupt_capture, node, file)
        return CapturePoint(name, iface, file, popen=fabric.host(node).popen, interrupt=stop)

    def stop(self, t_start: float, t_end: float) -> None:
        """Everything measured into the folder; each part on its own, so one failure loses no other."""
        if self.controller_interval is not None:
            self._wait_final_poll(t_end, self.controller_interval)
        try:
            after = self._counters()
            write_json(
                self.folder.hosts_file,
                {h: counter_deltas(self.before[h], after[h]).to_dict() for h in after if h in self.before},
            )
        except Exception as exc:  # noqa: BLE001 - a dead host must not lose the other records
            self.say(f"{self.folder.name}: could not read host counters: {exc}")
        if self.controller_interval is not None:
            self._save_controller_samples(t_start - 3 * self.controller_interval)
        if self.captures is not None:
            try:
                self.captures.stop()  # writes capture.json
            except Exception as exc:  # noqa: BLE001 - the queue samples are still to be saved
                self.say(f"{self.folder.name}: captures: {exc}")
            self.captures = None
        if self.sampler is not None or self.server_samplers:
            try:
                summary = self.sampler.stop() if self.sampler else self._stop_server_samplers()
                write_json(self.folder.queue_depth_summary_file, summary)
            except Exception as exc:  # noqa: BLE001 - a sampler that failed has nothing more to say
                self.say(f"{self.folder.name}: queue sampler: {exc}")
            self.sampler = None
        if self.cpu is not None:  # last: its sample just after t_end covers the window's end
            self.cpu.stop()
            self.cpu = None
        if self.server_cpus:
            self._stop_server_cpus(t_start, t_end)

    def _server_cpu_file(self, server: str) -> Path:
        """cpu-<server>.jsonl beside cpu.jsonl: CpuSample lines of that server."""
        return self.folder.path / f"cpu-{server}.jsonl"

    def _stop_server_cpus(self, t_start: float, t_end: float) -> None:
        """Each server's sampler stopped and its figures over the window (the verdict's CPU figures)
        noted in cluster.json, where the run's verdict reads them (analysis.fidelity.cluster_reasons)."""
        steps = [r for wl in self.folder.worker_logs().values() for r in wl.steps]
        if steps:  # while training ran, as the verdict judges this machine: start-up is not the emulator's
            t_start, t_end = min(r.t_start for r in steps), max(r.t_end for r in steps)
        figures = {}
        for server, sampler in self.server_cpus.items():
            sampler.stop()
            figures[server] = cpu_figures(read_cpu_samples(self._server_cpu_file(server)), t_start, t_end)
        self.server_cpus = {}
        fabric = self.session.fabric
        fabric.server_cpu[self.folder.name] = figures
        try:
            fabric.write_record()
        except OSError as exc:
            self.say(f"{self.folder.name}: cluster.json: {exc}")

    def _wait_final_poll(self, t_end: float, interval: float) -> None:
        """Wait until the controller has polled the counters once after the processes ended."""
        ctl = self.session.controller
        deadline = time.monotonic() + 3 * interval + 2.0
        while ctl.alive() and time.monotonic() < deadline:
            try:
                if ctl.get(f"/api/timeseries?since={t_end}", timeout=2)["samples"]:
                    return
            except Exception:  # noqa: BLE001 - a controller that does not answer has nothing to wait for
                return
            time.sleep(0.1)

    def _save_controller_samples(self, since: float) -> None:
        """The controller's rows of this strategy's window (from its record, which survives restarts)."""
        ctl = self.session.controller
        try:
            if ctl.record is not None and ctl.record.exists():
                rows = [r for r in read_jsonl(ctl.record) if r.get("t", 0) > since]
            else:
                rows = ctl.get(f"/api/timeseries?since={since}", timeout=10)["samples"]
            write_jsonl(self.folder.timeseries_file, rows)
        except Exception as exc:  # noqa: BLE001 - the controller may be the thing that failed
            self.say(f"{self.folder.name}: controller time series unavailable ({exc})")
