"""The records of a run, one type per kind of line or file, with the one writer and reader of each.

Files are JSON (replaced atomically) or JSON lines (appended and flushed line by line, so a crash
loses at most the line being written; a torn last line is skipped by the reader and reported as a
problem, never an exception). The field names are the file format: docs/DESIGN.md lists them.
Every writer goes through `dumps`: strict JSON (RFC 8259), which has no NaN or Infinity, so a value
that is missing is null and a NaN that reaches a writer is an error naming its key, never a file
that JSON.parse or jq refuses.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import IO, Any, ClassVar, Self, TypeVar

T = TypeVar("T")


# -- plain files -----------------------------------------------------------------------------------
def non_finite(doc: Any, where: str = "") -> str | None:
    """The key path of the first NaN or infinity in `doc` (`strategies.job.first_loss`), or None."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return where or "the value"
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list | tuple) else ()
    for key, value in items:
        found = non_finite(value, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def dumps(doc: Any, what: str = "", **kw: Any) -> str:
    """`doc` as strict JSON (json.dumps's keywords apply); ValueError naming the key of a NaN or an
    infinity (`what`: the file, for the message). A missing figure must be None, written null."""
    try:
        return json.dumps(doc, allow_nan=False, **kw)
    except ValueError as exc:
        where = non_finite(doc)
        if where is None:
            raise
        raise ValueError(f"{what or 'JSON'}: {where} is not a number (NaN or infinite); not written") from exc


def finite_or_none(x: float | None) -> float | None:
    """x, or None when it is NaN or infinite: how a record says a number is missing."""
    return x if x is None or math.isfinite(x) else None


def write_json(path: Path, doc: Any) -> None:
    """Write strict JSON atomically (a temporary file renamed over the target)."""
    text = dumps(doc, path.name, indent=1, default=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class JsonFile:
    """A document the runner hands a process as one JSON file (job.json, servers.json): write() it
    strictly and atomically, load() it back. The subclass is a dataclass; NESTED names its fields
    that hold a tuple of dataclasses (field -> the element's class), which from_dict() rebuilds."""

    NESTED: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        """The document: the dataclass's fields."""
        doc: Any = self
        return asdict(doc)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Self:
        """From the document (a NESTED field that is missing: an empty tuple)."""
        doc = dict(doc)
        for name, element in cls.NESTED.items():
            doc[name] = tuple(element(**x) for x in doc.get(name, ()))
        return cls(**doc)

    def write(self, path: Path) -> None:
        """Write the file."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> Self:
        """Read the file (OSError, ValueError as they come: the reader reports them)."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def read_json(path: Path, problems: list[str] | None = None) -> Any:
    """A JSON file's document; None when it is missing or unreadable (then noted in `problems`)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        if problems is not None:
            problems.append(f"{path.parent.name}/{path.name}: unreadable ({exc})")
        return None


def read_jsonl(path: Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file; bad lines (a torn last one after a crash) are skipped."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    rows: list[dict[str, Any]] = []
    lines = text.split("\n")
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if problems is not None:
                what = "truncated last line" if i == last else f"unreadable line {i + 1}"
                problems.append(f"{path.parent.name}/{path.name}: {what} skipped")
            continue
        if isinstance(obj, dict):
            rows.append(obj)
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as strict JSON lines (atomically)."""
    text = "".join(dumps(row, path.name) + "\n" for row in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class JsonlWriter:
    """An append-only JSON-lines file, flushed after every line."""

    def __init__(self, path: Path, truncate: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: IO[str] = path.open("w" if truncate else "a", encoding="utf-8")

    def write(self, record: Any) -> None:
        """One line: a record type (its to_dict) or a plain dict."""
        doc = record.to_dict() if hasattr(record, "to_dict") else record
        self._f.write(dumps(doc, self.path.name, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        """Close the file."""
        self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _known(cls: type[T], doc: dict[str, Any]) -> T:
    """An instance of a record dataclass from a dict, ignoring keys it does not know."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in doc.items() if k in names})


def _read_all(cls: type[T], path: Path, problems: list[str] | None) -> list[T]:
    """Every line of a JSON-lines file of one record type, in file order; lines lacking a field skipped."""
    out = []
    for row in read_jsonl(path, problems):
        try:
            out.append(_known(cls, row))
        except TypeError:
            continue
    return out


# -- worker logs: <strategy>/worker-<rank>.jsonl ---------------------------------------------------
@dataclass(frozen=True)
class StepRecord:
    """One training step of one worker (times are wall-clock seconds, so they line up with pcaps)."""

    rank: int
    strategy: str
    step: int
    t_start: float
    t_end: float
    compute_s: float  # forward/backward, real CPU plus emulated accelerator time
    comm_s: float  # exchanging the gradient and getting the new weights back
    wait_s: float  # part of comm_s spent waiting for others (PS family: after the push was sent)
    bytes_sent: int  # gradient bytes this worker sent in the step (payload, not headers)
    bytes_recv: int  # weight/gradient bytes it received
    loss: float | None  # None: this worker reported none (a job's rank that prints no loss)
    samples: int

    @property
    def duration_s(self) -> float:
        """t_end - t_start."""
        return self.t_end - self.t_start

    def to_dict(self) -> dict[str, Any]:
        """The log line (a diverged, non-finite loss is written as none: JSON has no NaN)."""
        return dict(asdict(self), loss=finite_or_none(self.loss))


# One step line type per kind of rank (workloads.rankloop's `Record`): the StepRecord every summary
# reads, then the kind's own fields, in this order in the line.
@dataclass(frozen=True)
class StageStepRecord(StepRecord):
    """A pipeline stage's step (pp): compute_s is its forwards and backwards (busy), wait_s its idle."""

    stage: int
    micro: int
    schedule: str
    in_flight: int  # the most micro-batches whose activations it held at once
    bubble: float  # idle share of the step: 1 - compute_s / step time
    bubble_theory: float  # (S - 1)/(M + S - 1)


@dataclass(frozen=True)
class HybridStepRecord(StageStepRecord):
    """A stage of one of a hybrid's pipelines: pp's step line, with which pipeline of how many."""

    pipeline: int
    dp: int


@dataclass(frozen=True)
class TensorStepRecord(StepRecord):
    """A tp rank's step: compute_s is the step's time outside the all-reduces."""

    tp_size: int
    allreduces: int


@dataclass(frozen=True)
class MoeStepRecord(StepRecord):
    """A moe rank's step: all-to-all and ring bytes apart, its experts' load and dropped tokens."""

    a2a_bytes_sent: int
    a2a_bytes_recv: int
    a2a_calls: int
    ring_bytes_sent: int
    aux_loss: float
    expert_load: list[int]  # tokens of this rank's batch that chose each expert, before capacity
    tokens_dropped: int
    capacity: int


@dataclass(frozen=True)
class FsdpStepRecord(StepRecord):
    """An fsdp rank's step, with the bytes of the shards it holds."""

    shard_bytes: int


@dataclass(frozen=True)
class WorkerDone:
    """A worker's last line: it finished every step."""

    rank: int
    steps: int

    def to_dict(self) -> dict[str, Any]:
        """The log line."""
        return {"event": "done", "rank": self.rank, "steps": self.steps}


@dataclass
class WorkerLog:
    """What one worker log holds."""

    rank: int
    steps: list[StepRecord] = field(default_factory=list)
    done: bool = False


def read_worker_log(path: Path, rank: int, problems: list[str] | None = None) -> WorkerLog:
    """A worker log: its step records in step order and whether it ended with its done line."""
    log = WorkerLog(rank)
    for row in read_jsonl(path, problems):
        if row.get("event") == "done":
            log.done = True
        elif "step" in row and "event" not in row:
            try:
                rec = _known(StepRecord, row)
            except TypeError:
                if problems is not None:
                    problems.append(f"{path.parent.name}/{path.name}: a step record lacks fields")
                continue
            if isinstance(rec.loss, float) and not math.isfinite(rec.loss):  # NaN: an older run's "none"
                rec = replace(rec, loss=None)
            log.steps.append(rec)
    log.steps.sort(key=lambda r: (r.step, r.t_start))
    return log


# -- a job's step lines: <strategy>/worker-<rank>.step_lines.jsonl ------------------------------------
@dataclass(frozen=True)
class StepLine:
    """When the runner read a user's job's line `step K ...` from its stdout (wall clock, like the
    pcaps): the step had ended just before, so its exchange is the burst before this moment."""

    step: int
    t: float

    def to_dict(self) -> dict[str, Any]:
        """The log line."""
        return asdict(self)


def read_step_lines(path: Path, problems: list[str] | None = None) -> list[StepLine]:
    """Step lines in the order they were read."""
    return _read_all(StepLine, path, problems)


# -- parameter-server log: <strategy>/ps.jsonl ----------------------------------------------------
class _PsLine:
    """A line of the PS log: its fields under the name of its event (EVENT)."""

    EVENT: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The log line."""
        doc: Any = self
        return {"event": self.EVENT, **asdict(doc)}


@dataclass(frozen=True)
class PsUpdate(_PsLine):
    """A gradient arrived: applied, or dropped (late in a synchronous step, or a backup's)."""

    EVENT = "update"

    t: float
    worker: int
    worker_step: int
    version: int  # the PS's model version when it arrived
    staleness: int  # versions between the one the gradient was computed on and `version`
    applied: bool


@dataclass(frozen=True)
class PsStep(_PsLine):
    """A synchronous step completed: whose gradients were averaged, whose were discarded."""

    EVENT = "step"

    t: float
    step: int
    applied: list[int]
    discarded: list[int]


@dataclass(frozen=True)
class PsRelease(_PsLine):
    """SSP: a held worker was let go into its next step (gap = its lead over the slowest)."""

    EVENT = "release"

    t: float
    worker: int
    next_step: int
    slowest: int
    gap: int


@dataclass(frozen=True)
class PsWorkerLost(_PsLine):
    """async: the PS goes on without a dead or silent worker."""

    EVENT = "worker_lost"

    t: float
    worker: int
    worker_step: int
    reason: str


@dataclass(frozen=True)
class PsDone(_PsLine):
    """The PS's last line."""

    EVENT = "done"

    t: float
    version: int
    workers: int
    lost: list[int] = field(default_factory=list)


PsEvent = PsUpdate | PsStep | PsRelease | PsWorkerLost | PsDone
_PS_EVENTS: dict[str, type] = {c.EVENT: c for c in (PsUpdate, PsStep, PsRelease, PsWorkerLost, PsDone)}


def read_ps_log(path: Path, problems: list[str] | None = None) -> list[PsEvent]:
    """The PS log's events in file order (unknown or malformed lines skipped)."""
    out: list[PsEvent] = []
    for row in read_jsonl(path, problems):
        cls = _PS_EVENTS.get(str(row.get("event")))
        if cls is not None:
            try:
                out.append(_known(cls, row))
            except TypeError:
                continue
    return out


# -- status.json ----------------------------------------------------------------------------------
STATES = ("running", "complete", "incomplete", "failed")


@dataclass(frozen=True)
class Status:
    """How a strategy's run ended (or that it is still running)."""

    state: str
    error: str | None = None
    t_start: float | None = None
    t_end: float | None = None
    lost_workers: dict[str, str] = field(default_factory=dict)  # async: rank -> why it went on without
    tcp: dict[str, Any] = field(default_factory=dict)  # what the hosts' TCP ran with, read from the kernel

    def to_dict(self) -> dict[str, Any]:
        """status.json."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Any) -> Status:
        """From status.json (an unknown state reads as incomplete)."""
        if not isinstance(doc, dict):
            return cls("incomplete", "status.json unreadable")
        st = _known(cls, doc)
        return st if st.state in STATES else cls("incomplete", st.error, st.t_start, st.t_end)


# -- hosts.json -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostCounters:
    """One host's kernel counters over a strategy (after minus before)."""

    tcp_retransmits: int  # TcpRetransSegs: segments the host's TCP sent again
    tx_bytes: int  # bytes out of hX-eth0 (frames)
    rx_bytes: int
    kernel: dict[str, int] = field(default_factory=dict)  # every TCP counter that moved, nstat names

    def counter(self, name: str) -> int:
        """One nstat counter (TcpExtTCPTimeouts, ...), 0 when it did not move."""
        return int(self.kernel.get(name, 0))

    def to_dict(self) -> dict[str, Any]:
        """hosts.json entry."""
        return asdict(self)


def read_hosts(path: Path, problems: list[str] | None = None) -> dict[str, HostCounters] | None:
    """hosts.json, or None when the run did not get that far."""
    doc = read_json(path, problems)
    if not isinstance(doc, dict):
        return None
    out = {}
    for host, entry in doc.items():
        if isinstance(entry, dict):
            try:
                out[host] = _known(HostCounters, entry)
            except TypeError:
                continue
    return out


# -- queue_depth.jsonl ---------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueSample:
    """One reading of a switch port's qdisc class: backlog now, cumulative drops and packets sent."""

    t: float
    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_packets: int
    port: str = ""  # interface name (lf1-eth3); empty in runs that sampled the PS port only

    def to_dict(self) -> dict[str, Any]:
        """The log line."""
        return asdict(self)


def read_queue_samples(path: Path, problems: list[str] | None = None) -> list[QueueSample]:
    """Queue samples in time order."""
    return sorted(_read_all(QueueSample, path, problems), key=lambda s: s.t)


# -- capture.json ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CapturePointReport:
    """What one tcpdump saw and lost (its own counters; None where it printed none)."""

    name: str  # "ps-port" or a host name
    iface: str
    file: str  # relative to the strategy folder
    packets_captured: int | None
    packets_received: int | None
    packets_dropped_kernel: int | None
    complete: bool
    error: str | None
    packets_dropped_interface: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """capture.json entry (packets_dropped_interface only when tcpdump printed it)."""
        doc = asdict(self)
        if doc["packets_dropped_interface"] is None:
            doc.pop("packets_dropped_interface")
        return doc


@dataclass(frozen=True)
class CaptureReport:
    """capture.json: every point, complete only if every point is."""

    points: list[CapturePointReport]

    @property
    def complete(self) -> bool:
        """True when every point captured everything it received."""
        return bool(self.points) and all(p.complete for p in self.points)

    def point(self, name: str) -> CapturePointReport | None:
        """A point by name."""
        return next((p for p in self.points if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """capture.json."""
        return {"points": [p.to_dict() for p in self.points], "complete": self.complete}

    @classmethod
    def from_dict(cls, doc: Any) -> CaptureReport | None:
        """From capture.json (None when unreadable)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
            return None
        return cls([_known(CapturePointReport, p) for p in doc["points"] if isinstance(p, dict)])


# -- controller samples: controller.jsonl and <strategy>/timeseries.jsonl --------------------------
@dataclass(frozen=True)
class PortSample:
    """One poll of a switch port's counters (cumulative) and the rates since the previous poll."""

    t: float
    switch: str
    port: int
    name: str
    peer: str
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int
    tx_dropped: int = 0
    rx_dropped: int = 0
    tx_errors: int = 0
    rx_errors: int = 0
    tx_bps: float = 0.0
    rx_bps: float = 0.0
    util: float = 0.0


@dataclass(frozen=True)
class QueueStatSample:
    """One poll of a port queue: cumulative bytes, packets and drops (OpenFlow tx_errors)."""

    t: float
    switch: str
    port: int
    name: str
    peer: str
    queue_id: int
    tx_bytes: int
    tx_packets: int
    drops: int
    tx_bps: float = 0.0
    drops_per_s: float = 0.0


@dataclass(frozen=True)
class ControllerEvent:
    """A fabric event the controller saw: switch (dis)connect, port up/down, reroute."""

    t: float
    event: str
    detail: dict[str, Any] = field(default_factory=dict)  # switch, port, link, state, dead_links


@dataclass
class ControllerSeries:
    """The controller's samples and events of a window, split by kind, each in time order."""

    ports: list[PortSample] = field(default_factory=list)
    queues: list[QueueStatSample] = field(default_factory=list)
    events: list[ControllerEvent] = field(default_factory=list)

    def port_series(self) -> dict[str, list[PortSample]]:
        """Port samples by interface name."""
        out: dict[str, list[PortSample]] = {}
        for s in self.ports:
            out.setdefault(s.name, []).append(s)
        return out

    def queue_series(self) -> dict[str, list[QueueStatSample]]:
        """Queue samples by interface name."""
        out: dict[str, list[QueueStatSample]] = {}
        for s in self.queues:
            out.setdefault(s.name, []).append(s)
        return out


def parse_controller_rows(rows: list[dict[str, Any]]) -> ControllerSeries:
    """Split the controller's JSON lines (kind port / queue / event) into typed series."""
    out = ControllerSeries()
    for row in rows:
        kind = row.get("kind")
        try:
            if kind == "port":
                out.ports.append(_known(PortSample, row))
            elif kind == "queue":
                out.queues.append(_known(QueueStatSample, row))
            elif kind == "event":
                detail = {k: v for k, v in row.items() if k not in ("t", "kind", "event")}
                out.events.append(ControllerEvent(float(row["t"]), str(row.get("event")), detail))
        except (TypeError, KeyError, ValueError):
            continue
    for series in (out.ports, out.queues, out.events):
        series.sort(key=lambda s: s.t)
    return out


# -- faults.jsonl ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class FaultRecord:
    """A fault action as it happened."""

    t: float
    event: str  # fired | flap | restored | missed (kill-worker: the worker had already ended)
    kind: str
    target: str = ""
    state: str | None = None  # down | up | killed | restarted (none for kill-worker)

    def to_dict(self) -> dict[str, Any]:
        """The log line (no state key when there is none)."""
        doc = asdict(self)
        if doc["state"] is None:
            doc.pop("state")
        return doc


def read_faults(path: Path, problems: list[str] | None = None) -> list[FaultRecord]:
    """Fault records in time order."""
    return sorted(_read_all(FaultRecord, path, problems), key=lambda f: f.t)


# -- cpu.jsonl ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuSample:
    """One second of the machine: each core's busy share, and the software switch's share of a core."""

    t: float
    cores: list[float]  # 0..1 per core
    switch: float | None  # ovs-vswitchd's CPU time / wall time (None when it was not found)

    def to_dict(self) -> dict[str, Any]:
        """The log line."""
        return asdict(self)


def read_cpu_samples(path: Path, problems: list[str] | None = None) -> list[CpuSample]:
    """CPU samples in time order."""
    return sorted(_read_all(CpuSample, path, problems), key=lambda c: c.t)
