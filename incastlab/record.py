"""What one strategy leaves besides its processes' own logs: captures, queue samples, the
kernel's counters per host, and the controller's samples of the strategy's window.

Everything is written into the strategy's folder as it is produced or as soon as it is known, so
an interrupted run keeps what was measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from capture.counters import counter_deltas, read_host_counters
from capture.cpu import CpuSampler
from capture.pcap import CapturePoint, PcapCapture
from capture.queue_depth import QueueSampler
from runmodel.config import ExperimentConfig
from runmodel.folder import StrategyFolder
from runmodel.records import HostCounters, read_jsonl, write_json, write_jsonl


class Recorder:
    """Starts and stops the measurements of one strategy around its processes."""

    def __init__(
        self,
        session: Any,
        cfg: ExperimentConfig,
        folder: StrategyFolder,
        participants: list[str],
        say: Callable[[str], None],
    ) -> None:
        self.s = session
        self.cfg = cfg
        self.folder = folder
        self.participants = participants  # hosts whose traffic is captured
        self.say = say
        self.captures: PcapCapture | None = None
        self.sampler: QueueSampler | None = None
        self.cpu: CpuSampler | None = None
        self.before: dict[str, HostCounters] = {}

    def _counters(self) -> dict[str, HostCounters]:
        return {h: read_host_counters(h, self.s.fabric.host(h).shell.pid) for h in self.s.plan.host_names}

    def start(self) -> None:
        """Kernel counters before; the PS-port queue sampler; tcpdump on the capture points."""
        self.before = self._counters()
        ps_port = self.s.plan.ps_port.name
        ports = [ps_port] + sorted(p.name for p in self.s.plan.switch_ports() if p.name != ps_port)
        self.sampler = QueueSampler(
            ports, self.folder.queue_depth_file, interval=self.cfg.queue_sample_ms / 1000.0
        )
        self.sampler.start()
        self.cpu = CpuSampler(self.folder.cpu_file)
        self.cpu.start()
        if self.cfg.capture == "none":
            return
        self.folder.pcap_dir.mkdir(parents=True, exist_ok=True)
        points = [CapturePoint("ps-port", ps_port, self.folder.pcap("ps-port"))]
        if self.cfg.capture == "all":
            for h in self.participants:
                points.append(
                    CapturePoint(
                        h, self.s.plan.host(h).nic, self.folder.pcap(h), popen=self.s.fabric.host(h).popen
                    )
                )
        self.captures = PcapCapture(points, snaplen=self.cfg.snaplen, base_dir=self.folder.path)
        self.captures.start()

    def stop(self, t_start: float, t_end: float) -> None:
        """Everything measured into the folder; each part on its own, so one failure loses no other."""
        self._wait_final_poll(t_end)
        if self.cpu is not None:
            self.cpu.stop()
            self.cpu = None
        try:
            after = self._counters()
            write_json(
                self.folder.hosts_file,
                {h: counter_deltas(self.before[h], after[h]).to_dict() for h in after if h in self.before},
            )
        except Exception as exc:  # noqa: BLE001 - a dead host must not lose the other records
            self.say(f"{self.folder.name}: could not read host counters: {exc}")
        self._save_controller_samples(t_start - 3 * self.cfg.controller.interval)
        if self.captures is not None:
            try:
                self.captures.stop()  # writes capture.json
            finally:
                self.captures = None
        if self.sampler is not None:
            try:
                write_json(self.folder.queue_depth_summary_file, self.sampler.stop())
            finally:
                self.sampler = None

    def _wait_final_poll(self, t_end: float) -> None:
        """Wait until the controller has polled the counters once after the processes ended."""
        ctl = self.s.controller
        deadline = time.monotonic() + 3 * self.cfg.controller.interval + 2.0
        while ctl.alive() and time.monotonic() < deadline:
            try:
                if ctl.get(f"/api/timeseries?since={t_end}", timeout=2)["samples"]:
                    return
            except Exception:  # noqa: BLE001 - a controller that does not answer has nothing to wait for
                return
            time.sleep(0.1)

    def _save_controller_samples(self, since: float) -> None:
        """The controller's rows of this strategy's window (from its record, which survives restarts)."""
        ctl = self.s.controller
        try:
            if ctl.record is not None and ctl.record.exists():
                rows = [r for r in read_jsonl(ctl.record) if r.get("t", 0) > since]
            else:
                rows = ctl.get(f"/api/timeseries?since={since}", timeout=10)["samples"]
            write_jsonl(self.folder.timeseries_file, rows)
        except Exception as exc:  # noqa: BLE001 - the controller may be the thing that failed
            self.say(f"{self.folder.name}: controller time series unavailable ({exc})")
