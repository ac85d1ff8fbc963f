"""The run folder: where every file of a run is, and the one reader and writer of each.

    results/<YYYYmmdd-HHMMSS>[-NAME]/  RunFolder   (results/latest links to the newest; --name NAME)
        <strategy>/                    StrategyFolder

Every stage names a file through these properties, never by a string of its own.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runmodel.config import ExperimentConfig
from runmodel.fabric import Plan
from runmodel.params import ParamError
from runmodel.records import (
    CaptureReport,
    ControllerSeries,
    CpuSample,
    FaultRecord,
    HostCounters,
    PsEvent,
    QueueSample,
    Status,
    WorkerLog,
    dumps,
    parse_controller_rows,
    read_cpu_samples,
    read_faults,
    read_hosts,
    read_json,
    read_jsonl,
    read_ps_log,
    read_queue_samples,
    read_worker_log,
    write_json,
)
from runmodel.strategy import StrategySpec

_WORKER_RE = re.compile(r"^worker-(\d+)\.jsonl$")
RUN_NAME_MAX = 64
STATUS_BYTES = 4096  # status.json's size on disk: one page, room for any status written after it
_RUN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_run_name(text: str) -> str:
    """A run's --name as it may end its folder's name (results/<timestamp>-NAME); ParamError in one
    line otherwise: it must stay one folder under the results, and a shell must not need quotes for it."""
    if not text:
        raise ParamError("--name: give a name, e.g. --name baseline")
    if "/" in text or "\\" in text:
        raise ParamError(f"--name: a name, not a path: no '/' or '\\' (got {text!r})")
    if len(text) > RUN_NAME_MAX:
        raise ParamError(f"--name: at most {RUN_NAME_MAX} characters (got {len(text)})")
    if not _RUN_NAME_RE.fullmatch(text):
        raise ParamError(
            f"--name: letters, digits, '.', '_' and '-', starting with a letter or digit (got {text!r})"
        )
    return text


class StrategyFolder:
    """<run>/<strategy>/: one strategy's logs, samples, captures and status."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name

    # -- paths ----------------------------------------------------------------------------------
    def worker_log(self, rank: int) -> Path:
        """worker-<rank>.jsonl: one line per step."""
        return self.path / f"worker-{rank}.jsonl"

    def worker_stderr(self, rank: int) -> Path:
        """worker-<rank>.stderr."""
        return self.path / f"worker-{rank}.stderr"

    def worker_stdout(self, rank: int) -> Path:
        """worker-<rank>.stdout: what a user's job printed (the built-in workers print nothing)."""
        return self.path / f"worker-{rank}.stdout"

    def step_lines(self, rank: int) -> Path:
        """worker-<rank>.step_lines.jsonl: when each `step K` line of a user's job was read."""
        return self.path / f"worker-{rank}.step_lines.jsonl"

    def shard_log(self, k: int) -> Path:
        """Events of PS shard k: ps.jsonl for the first (the only one of an unsharded PS)."""
        return self.path / ("ps.jsonl" if k == 0 else f"ps-{k}.jsonl")

    def shard_stderr(self, k: int) -> Path:
        """stderr of PS shard k."""
        return self.path / ("ps.stderr" if k == 0 else f"ps-{k}.stderr")

    job_file = property(lambda self: self.path / "job.json", doc="what the processes were told")
    ps_log = property(lambda self: self.shard_log(0), doc="parameter-server events (of its first shard)")
    status_file = property(lambda self: self.path / "status.json", doc="how the strategy ended")
    timeseries_file = property(lambda self: self.path / "timeseries.jsonl", doc="controller samples")
    queue_depth_file = property(lambda self: self.path / "queue_depth.jsonl", doc="qdisc samples")
    queue_depth_summary_file = property(
        lambda self: self.path / "queue_depth_summary.json", doc="the sampler's own account"
    )
    capture_file = property(lambda self: self.path / "capture.json", doc="tcpdump's counters")
    pcap_dir = property(lambda self: self.path / "pcap", doc="one pcap per capture point")
    hosts_file = property(lambda self: self.path / "hosts.json", doc="kernel counters per host")
    faults_file = property(lambda self: self.path / "faults.jsonl", doc="faults as they fired")
    cpu_file = property(lambda self: self.path / "cpu.jsonl", doc="CPU busy per core and of the switch")
    goodput_file = property(lambda self: self.path / "goodput_timeline.json", doc="goodput over time")
    rto_events_file = property(lambda self: self.path / "rto_events.json", doc="timeouts seen in the pcaps")
    retransmits_file = property(lambda self: self.path / "retransmits_timeline.json", doc="retransmissions")
    dequeue_file = property(lambda self: self.path / "dequeue.json", doc="the bottleneck's pace")

    def pcap(self, point: str) -> Path:
        """pcap/<point>.pcap."""
        return self.pcap_dir / f"{point}.pcap"

    # -- readers --------------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        """True when the strategy got as far as its folder."""
        return self.path.is_dir()

    def ranks(self) -> list[int]:
        """Ranks with a worker log, in order."""
        found = [int(m.group(1)) for p in self.path.glob("worker-*.jsonl") if (m := _WORKER_RE.match(p.name))]
        return sorted(found)

    def worker_logs(self, problems: list[str] | None = None) -> dict[int, WorkerLog]:
        """Every worker log, by rank."""
        return {r: read_worker_log(self.worker_log(r), r, problems) for r in self.ranks()}

    def status(self, problems: list[str] | None = None) -> Status | None:
        """status.json, or None when missing."""
        doc = read_json(self.status_file, problems)
        return None if doc is None else Status.from_dict(doc)

    def write_status(self, status: Status) -> None:
        """Replace status.json, padded to STATUS_BYTES so that the file always holds the room of the
        next status: on a full disk, where no new file can be written, the new status is written in
        place over the old one's bytes. A run stopped by a full disk can still say how it ended."""
        text = dumps(status.to_dict(), "status.json", indent=1)
        padded = text + " " * (STATUS_BYTES - 1 - len(text)) + "\n"
        tmp = self.status_file.with_name(".status.json.tmp")
        try:
            tmp.write_text(padded, encoding="utf-8")  # a new file, renamed over the old: atomic
            os.replace(tmp, self.status_file)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno != errno.ENOSPC or not self.status_file.exists():
                raise
            with self.status_file.open("r+", encoding="utf-8") as f:
                f.write(padded)
                f.truncate()

    def ps_events(self, problems: list[str] | None = None) -> list[PsEvent]:
        """ps.jsonl."""
        return read_ps_log(self.ps_log, problems)

    def controller_series(self, problems: list[str] | None = None) -> ControllerSeries:
        """timeseries.jsonl."""
        return parse_controller_rows(read_jsonl(self.timeseries_file, problems))

    def queue_samples(self, problems: list[str] | None = None) -> list[QueueSample]:
        """queue_depth.jsonl."""
        return read_queue_samples(self.queue_depth_file, problems)

    def capture(self, problems: list[str] | None = None) -> CaptureReport | None:
        """capture.json."""
        return CaptureReport.from_dict(read_json(self.capture_file, problems))

    def hosts(self, problems: list[str] | None = None) -> dict[str, HostCounters] | None:
        """hosts.json."""
        return read_hosts(self.hosts_file, problems)

    def faults(self, problems: list[str] | None = None) -> list[FaultRecord]:
        """faults.jsonl."""
        return read_faults(self.faults_file, problems)

    def cpu_samples(self, problems: list[str] | None = None) -> list[CpuSample]:
        """cpu.jsonl."""
        return read_cpu_samples(self.cpu_file, problems)


@dataclass
class RunFolder:
    """results/<run>/: the run's parameters, plan, controller record, summary and report."""

    path: Path
    problems: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls, root: Path, name: str | None = None, link_latest: bool = True, label: str = ""
    ) -> RunFolder:
        """A new, empty run folder under `root` (and `root/latest` pointing to it): `name`, else the
        time, then `-label` when one is given (check_run_name); `-2`, `-3`... when it exists."""
        base = name or time.strftime("%Y%m%d-%H%M%S")
        if label:
            base = f"{base}-{check_run_name(label)}"
        path = root / base
        k = 1
        while path.exists():
            k += 1
            path = root / f"{base}-{k}"
        path.mkdir(parents=True)
        if link_latest:
            latest = root / "latest"
            try:
                if latest.is_symlink() or latest.exists():
                    latest.unlink()
                latest.symlink_to(path.name)
            except OSError:
                pass
        return cls(path.resolve())  # absolute: a container's processes run in another working directory

    config_file = property(lambda self: self.path / "config.json", doc="every parameter")
    plan_file = property(lambda self: self.path / "plan.json", doc="the wiring plan")
    topology_file = property(lambda self: self.path / "topology.json", doc="the controller's /api/topology")
    phase_file = property(lambda self: self.path / "phase.json", doc="the runner's last phase")
    controller_log = property(lambda self: self.path / "controller.log", doc="the controller's log")
    controller_record = property(lambda self: self.path / "controller.jsonl", doc="every controller sample")
    summary_file = property(lambda self: self.path / "summary.json", doc="the figures")
    report_html = property(lambda self: self.path / "report.html", doc="the report")
    report_md = property(lambda self: self.path / "report.md", doc="the report as Markdown")
    figures_dir = property(lambda self: self.path / "figures", doc="the report's PNGs")

    def strategy(self, name: str) -> StrategyFolder:
        """The folder of one strategy variant, by its name (ps, ps:shards=4; not created)."""
        return StrategyFolder(self.path / StrategySpec.parse(name).folder, name)

    def write_config(self, cfg: ExperimentConfig, **extra: Any) -> None:
        """config.json: the parameters (and what else the runner knows, e.g. the environment)."""
        write_json(self.config_file, dict(cfg.to_dict(), **extra))

    def config_doc(self) -> dict[str, Any] | None:
        """config.json as written (None if missing or unreadable)."""
        doc = read_json(self.config_file, self.problems)
        return doc if isinstance(doc, dict) else None

    def config(self) -> ExperimentConfig:
        """The run's parameters (ParamError if config.json is not a valid config)."""
        doc = self.config_doc()
        if doc is None:
            raise ParamError(f"not a run folder (no readable config.json): {self.path}")
        return ExperimentConfig.from_dict(doc)

    def plan(self) -> Plan:
        """The wiring plan (plan.json, else derived from the config)."""
        doc = read_json(self.plan_file, self.problems)
        if isinstance(doc, dict):
            try:
                return Plan.from_dict(doc)
            except (KeyError, TypeError):
                self.problems.append("plan.json: not a plan; derived from config.json")
        return self.config().plan()

    def summary_doc(self) -> dict[str, Any] | None:
        """summary.json as written."""
        doc = read_json(self.summary_file, self.problems)
        return doc if isinstance(doc, dict) else None
