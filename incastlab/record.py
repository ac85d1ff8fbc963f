"""What one run's window leaves besides its processes' own logs: captures, queue samples, CPU, the
kernel's counters per host, and the controller's samples of the window. One recorder for a
strategy of compare or job (Recorder.for_strategy) and for a point of incast (incastlab.incast).

Everything is written into the strategy's folder as it is produced or as soon as it is known, so
an interrupted run keeps what was measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from capture.counters import counter_deltas, host_counters
from capture.cpu import CpuSampler
from capture.pcap import CapturePoint, PcapCapture
from capture.queue_depth import QueueSampler
from runmodel.config import ExperimentConfig
from runmodel.folder import StrategyFolder
from runmodel.records import HostCounters, read_jsonl, write_json, write_jsonl


@dataclass(eq=False)
class Recorder:
    """Starts and stops the measurements of one run's window around its processes.

    The caller names what is watched: `port`, the bottleneck switch port (sampled first, captured as
    `port_point`), and `hosts`, captured at their NIC when `capture` is "all" ("none": no capture, any
    other value: the port only). The queue sampler covers every switch port and the kernel counters
    every host. `controller_interval` set: the controller's samples of the window are saved too.
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
        if self.session.fabric.ports_here:  # a cluster's ports are on its servers: the controller's only
            self.sampler = QueueSampler(
                ports, self.folder.queue_depth_file, interval=self.queue_sample_ms / 1000.0
            )
            self.sampler.start()
        self.cpu = CpuSampler(self.folder.cpu_file)
        self.cpu.start()
        if self.capture == "none":
            return
        self.folder.pcap_dir.mkdir(parents=True, exist_ok=True)
        points = [CapturePoint(self.port_point, self.port, self.folder.pcap(self.port_point))]
        if self.capture == "all":
            for h in self.hosts:
                points.append(
                    CapturePoint(
                        h,
                        self.session.plan.host(h).nic,
                        self.folder.pcap(h),
                        popen=self.session.fabric.host(h).popen,
                    )
                )
        self.captures = PcapCapture(points, snaplen=self.snaplen, base_dir=self.folder.path)
        self.captures.start()

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
        if self.sampler is not None:
            try:
                write_json(self.folder.queue_depth_summary_file, self.sampler.stop())
            except Exception as exc:  # noqa: BLE001 - a sampler that failed has nothing more to say
                self.say(f"{self.folder.name}: queue sampler: {exc}")
            self.sampler = None
        if self.cpu is not None:  # last: its sample just after t_end covers the window's end
            self.cpu.stop()
            self.cpu = None

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
