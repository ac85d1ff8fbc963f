"""The incast sweep as plain data: its parameters (IncastConfig), its curves (IncastLine), what its
processes are told (ServerSet, ClientJob), what they log (RoundRecord) and what the sweep yields
(IncastRow, IncastResult: results/<run>/incast.json).

The workload is the barrier-synchronised read of Phanishayee et al. (FAST 2008) and Vasudevan et
al. (SIGCOMM 2009): one client asks each of N servers for one block (the SRU) at once, waits until
all N have arrived, and asks again, R rounds; goodput is the bytes delivered over the time taken.
The sweep runs N over `senders` for every curve in `lines`; a curve is the base settings with some
of them changed (`rto_min_ms=1`, `buffer_pkts=512`, `cc=reno`, `quickack=1`, `max_concurrent=2`).

Nothing here touches the network or the kernel; whether the kernel can do what a curve asks
(a congestion control, a minimum RTO, ECN marking) is checked by the command before it builds
anything (incastlab/incast.py).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from runmodel.config import (
    CONGESTION_CONTROLS,
    ControllerOptions,
    RunConfig,
    parse_run_fields,
    read_scenario_object,
    run_fields_doc,
    split_commas,
)
from runmodel.fabric import FabricSpec, Plan, build_plan
from runmodel.folder import RunFolder, StrategyFolder
from runmodel.options import OptionGrammar, Variant
from runmodel.params import ParamError, number, param, whole
from runmodel.records import JsonFile, _known, read_jsonl

INCAST_SCHEMA = "incastlab.incast/1"
SERVER_PORT = 5001
MAX_SRU = 64 * 2**20
CAPTURES = ("all", "none")


def parse_size(text: str) -> int:
    """'32768', '32k', '32KiB', '1m' -> bytes (k and m are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)(i?[bB])?\s*", str(text))
    if not m:
        raise ParamError(f"--sru: not a size: {text!r} (e.g. 32768 or 32k)")
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 2**20}[m.group(2).lower()]


def parse_senders(text: str) -> tuple[int, ...]:
    """'1,2,4,8,15' or '1-15' or '1-4,8,15' -> (1, 2, ...): sorted, each once."""
    out: set[int] = set()
    for part in split_commas(str(text)):
        lo, sep, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError as exc:
            raise ParamError(f"senders: not a whole number: {part!r} (e.g. 1,2,4,8,15 or 1-15)") from exc
        if b < a:  # outside the try: ParamError is a ValueError, and this message must not be replaced
            raise ParamError(f"senders: range {part!r} runs backwards")
        out.update(range(a, b + 1))
    if not out:
        raise ParamError("senders: name at least one sender count")
    return tuple(sorted(out))


def incast_fabric() -> FabricSpec:
    """The incast fabric: 16 hosts (15 senders), 2 spines; the client's port the one bottleneck."""
    return FabricSpec(spines=2, leaves=4, hosts_per_leaf=4, host_mbit=20.0, uplink_mbit=100.0, buffer_pkts=3)


DEEP_BUFFER_PKTS = 1000
DEFAULT_LINES = (
    "base",
    "rto_min_ms=1",
    f"buffer_pkts={DEEP_BUFFER_PKTS}",
    "cc=reno",
    "cc=bbr",
    "quickack=1",
    "max_concurrent=2",
    "cc=dctcp",
)
OPTIONAL_LINES = ("cc=dctcp",)  # in the default sweep only where the kernel has what they need


@dataclass(frozen=True)
class LineSettings:
    """What one curve runs with: the base's values with the curve's options over them."""

    rto_min_ms: float
    cc: str
    buffer_pkts: int
    quickack: int
    max_concurrent: int  # servers asked at once (0: all of them: the incast)

    @property
    def ecn(self) -> bool:
        """DCTCP needs the switch ports to mark ECN instead of only dropping."""
        return self.cc == "dctcp"


@dataclass(frozen=True)
class IncastLine(Variant):
    """One curve of the figure: `base`, or options over the base such as `rto_min_ms=1:cc=reno`
    (each field a LineSettings field; None: the base's value; `name`, `folder`: Variant's)."""

    GRAMMAR = OptionGrammar(what="lines", example="rto_min_ms=1 or cc=reno", empty="base")  # not a field

    rto_min_ms: float | None = None
    cc: str | None = None
    buffer_pkts: int | None = None
    quickack: int | None = None
    max_concurrent: int | None = None

    @classmethod
    def parse(cls, text: str) -> IncastLine:
        """`base` or `OPTION=V[:OPTION=V...]`; unknown options and bad values refused by name."""
        return cls.GRAMMAR.parse(cls, text)

    def settings(self, base: LineSettings) -> LineSettings:
        """The base with this curve's options over it."""
        return replace(base, **dict(self.options))


def check_settings(where: str, s: LineSettings) -> None:
    """Refuse settings no kernel can run (what this kernel can is checked by the command)."""
    number(f"{where}rto_min_ms", s.rto_min_ms, 0, 2000, lo_open=True)
    if round(s.rto_min_ms * 1000) < 1:
        raise ParamError(
            f"{where}rto_min_ms: {s.rto_min_ms:g} ms is below the kernel's 1 us "
            "(net.ipv4.tcp_rto_min_us takes whole microseconds >= 1)"
        )
    if s.cc not in CONGESTION_CONTROLS:
        raise ParamError(f"{where}cc must be one of {', '.join(CONGESTION_CONTROLS)}, got {s.cc!r}")
    whole(f"{where}buffer_pkts", s.buffer_pkts, 1, 100000)
    if s.quickack not in (0, 1):
        raise ParamError(f"{where}quickack must be 0 or 1, got {s.quickack!r}")
    whole(f"{where}max_concurrent", s.max_concurrent, 0)


@dataclass(frozen=True)
class IncastConfig(RunConfig):
    """Every parameter of an incast sweep (config.json of its run). One field, one flag."""

    fabric: FabricSpec = param(factory=incast_fabric, cli=False)
    controller: ControllerOptions = param(factory=ControllerOptions, cli=False)
    client: str = param("h1", "the receiver: the host that asks every server for its block")
    senders: tuple[int, ...] = param(
        (1, 2, 3, 4, 6, 8, 11, 15),
        "sender counts N to sweep, e.g. 1,2,4,8,15 or 1-15 (at most the hosts but the client)",
        parse=parse_senders,
        metavar="N1,N2",
    )
    sru_bytes: int = param(
        49152,
        "server request unit: bytes each server sends per round (32k = 32768)",
        flag="--sru",
        parse=parse_size,
        metavar="BYTES",
    )
    rounds: int = param(20, "rounds per point: ask all N, wait for all N, repeat")
    lines: tuple[str, ...] = param(
        DEFAULT_LINES,
        "curves, comma-separated: base, or OPTION=V[:OPTION=V] "
        "over the base (" + ", ".join(f.name for f in fields(IncastLine)) + "); cc=dctcp runs where the "
        "kernel has tcp_dctcp and sch_red",
        parse=split_commas,
        metavar="L1,L2",
    )
    rto_min_ms: float = param(200.0, "the base's minimum RTO, ms (Linux's default: 200)")
    cc: str = param("cubic", "the base's TCP congestion control", choices=CONGESTION_CONTROLS)
    quickack: int = param(
        0,
        "the base's delayed ACKs at the client: 0 delayed (Linux default), 1 off (ip route ... quickack 1)",
        parse=int,
    )
    max_concurrent: int = param(0, "the base's servers asked at once (0: all N at once: the incast)")
    fabric_buffer_pkts: int = param(
        1000,
        "every switch port's buffer but the client's, packets: deep, so "
        "the client's port (--buffer) is the one shallow buffer, as in the "
        "papers' single switch",
    )
    capture: str = param(
        "all",
        "packet capture per point: the client's leaf port and every sender and the client (all), or none",
        choices=CAPTURES,
    )
    snaplen: int = param(96, "bytes kept per captured packet (headers only)")
    queue_sample_ms: float = param(10.0, "switch-port backlog sampling interval, ms")
    timeout: float = param(60.0, "seconds a round may take before the point fails")
    name: str = param("", cli=False)
    description: str = param("", cli=False)

    # -- derived ------------------------------------------------------------------------------
    @property
    def base(self) -> LineSettings:
        """The settings every curve starts from."""
        return LineSettings(
            rto_min_ms=self.rto_min_ms,
            cc=self.cc,
            buffer_pkts=self.fabric.buffer_pkts,
            quickack=self.quickack,
            max_concurrent=self.max_concurrent,
        )

    @property
    def curves(self) -> list[IncastLine]:
        """The curves in run order."""
        return [IncastLine.parse(t) for t in self.lines]

    def settings(self, line: IncastLine) -> LineSettings:
        """What one curve runs with."""
        return line.settings(self.base)

    @property
    def spec(self) -> FabricSpec:
        """The fabric with the client as its `ps_host` (plan.json names the receiver there); the
        client's port is client_port(), never the plan's `ps_port`."""
        return replace(self.fabric, ps_host=self.client)

    def plan(self) -> Plan:
        """The wiring plan."""
        return build_plan(self.spec)

    def client_port(self, plan: Plan) -> str:
        """The client's leaf port in `plan`: the bottleneck's egress, the one shallow buffer, a
        capture point and the port whose queue the analysis reads."""
        return plan.host(self.client).leaf_port

    @property
    def server_order(self) -> list[str]:
        """Every host but the client, in the order the sweep adds them: one from each other leaf in
        turn (so the flows cross the spines), the client's own leaf last."""
        per, leaves = self.fabric.hosts_per_leaf, self.fabric.leaves
        try:
            leaf0 = (int(self.client[1:]) - 1) // per
        except ValueError:
            return []
        others = [(leaf0 + j) % leaves for j in range(1, leaves)]
        order = [f"h{leaf * per + k + 1}" for k in range(per) for leaf in others]
        order += [f"h{leaf0 * per + k + 1}" for k in range(per)]
        return [h for h in order if h != self.client]

    def servers(self, n: int) -> list[str]:
        """The first n servers."""
        return self.server_order[:n]

    @property
    def max_senders(self) -> int:
        """The largest sender count of the sweep."""
        return max(self.senders)

    # -- checks ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse a sweep that cannot happen, naming the field, before anything is built."""
        self.controller.validate()
        self.fabric.check_host("client", self.client)
        if not self.senders:
            raise ParamError("senders: name at least one sender count")
        hosts = self.fabric.n_hosts
        for n in self.senders:
            whole("senders", n, 1)
            if n > hosts - 1:
                raise ParamError(
                    f"senders: {n} senders need {n + 1} hosts, the fabric has {hosts} "
                    f"(at most {hosts - 1} senders besides the client {self.client})"
                )
        whole("sru_bytes (--sru)", self.sru_bytes, 1, MAX_SRU)
        whole("rounds", self.rounds, 1, 100000)
        if not self.lines:
            raise ParamError("lines: name at least one curve (e.g. base)")
        names = [c.name for c in self.curves]
        if len(set(names)) != len(names):
            raise ParamError(
                f"lines: each curve may appear once (twice: {next(n for n in names if names.count(n) > 1)})"
            )
        whole("fabric_buffer_pkts", self.fabric_buffer_pkts, 1, 100000)
        check_settings("", self.base)
        for line in self.curves:
            check_settings(f"lines: {line.name}: ", self.settings(line))
        if self.capture not in CAPTURES:
            raise ParamError(f"capture must be all or none, got {self.capture!r}")
        whole("snaplen", self.snaplen, 64, 65535)
        number("queue_sample_ms", self.queue_sample_ms, 1, 1000)
        number("timeout", self.timeout, 0, lo_open=True)
        self.refuse_non_finite()

    def without(self, names: set[str]) -> IncastConfig:
        """This sweep without the curves named (those the kernel cannot run)."""
        return replace(self, lines=tuple(t for t in self.lines if IncastLine.parse(t).name not in names))

    # -- files ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """config.json of the run."""
        return run_fields_doc(self, {"schema": INCAST_SCHEMA, "kind": "incast"})

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "config") -> IncastConfig:
        """From config.json or a scenario file (unknown fields refused by name)."""
        doc = parse_run_fields(
            doc,
            cls,
            where,
            lists=("lines",),
            comma=("lines",),
            derived=("schema", "kind", "environment", "scenario", "not_run", "provenance"),
        )
        if isinstance(doc.get("senders"), str):
            doc["senders"] = parse_senders(doc["senders"])
        if "senders" in doc:
            if not isinstance(doc["senders"], list | tuple):
                raise ParamError(f"{where}: senders must be a list")
            doc["senders"] = tuple(doc["senders"])
        if isinstance(doc.get("sru_bytes"), str):
            doc["sru_bytes"] = parse_size(doc["sru_bytes"])
        try:
            return cls(**doc)
        except TypeError as exc:
            raise ParamError(f"{where}: {exc}") from exc


def load_incast_scenario(path: Path) -> IncastConfig:
    """An incast scenario file (JSON: IncastConfig's fields); unknown fields refused by name."""
    return IncastConfig.from_dict(read_scenario_object(path), where=f"scenario {Path(path).name}")


# -- what the processes are told -------------------------------------------------------------------
@dataclass(frozen=True)
class ServerAddr:
    """One server: its host, address and port."""

    host: str
    ip: str
    port: int


@dataclass(frozen=True)
class ServerSet(JsonFile):
    """<run>/<curve>/servers.json: every server process of one curve (started after its TCP settings,
    so its sockets take them: a socket reads the minimum RTO when it is created)."""

    NESTED: ClassVar[dict[str, type]] = {"servers": ServerAddr}

    sru_bytes: int
    servers: tuple[ServerAddr, ...]
    log_dir: str

    def server(self, host: str) -> ServerAddr:
        """The server on `host` (ValueError if there is none)."""
        for s in self.servers:
            if s.host == host:
                return s
        raise ValueError(f"no server on {host}")

    def log(self, host: str) -> Path:
        """The server's log: one line when it listens, one per connection when it closes."""
        return Path(self.log_dir) / f"server-{host}.jsonl"


@dataclass(frozen=True)
class ClientJob(JsonFile):
    """<point>/job.json: what the client of one point does."""

    NESTED: ClassVar[dict[str, type]] = {"servers": ServerAddr}

    client: str
    servers: tuple[ServerAddr, ...]
    sru_bytes: int
    rounds: int
    max_concurrent: int  # 0: all at once
    timeout: float
    log: str


# -- what the client logs: <point>/client.jsonl ------------------------------------------------------
@dataclass(frozen=True)
class RoundRecord:
    """One round: when the first request went out, when the last byte came in, the bytes received,
    and per server (in job order) when its block was asked for and when it was complete (s after
    t_start)."""

    round: int
    t_start: float
    t_end: float
    bytes: int
    asked_s: list[float]
    done_s: list[float]

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClientDone:
    """The client's last line: every round done."""

    rounds: int
    bytes: int
    connect_s: float  # time to open every connection (before round 1, not in the goodput)

    def to_dict(self) -> dict[str, Any]:
        return {"event": "done", **asdict(self)}


@dataclass
class ClientLog:
    """What a client log holds."""

    rounds: list[RoundRecord] = field(default_factory=list)
    done: ClientDone | None = None
    error: str | None = None


def read_client_log(path: Path, problems: list[str] | None = None) -> ClientLog:
    """client.jsonl: its rounds in order, its done line, or the error it ended with."""
    log = ClientLog()
    for row in read_jsonl(path, problems):
        event = row.get("event")
        try:
            if event == "done":
                log.done = ClientDone(int(row["rounds"]), int(row["bytes"]), float(row.get("connect_s", 0.0)))
            elif event == "error":
                log.error = str(row.get("error"))
            elif "round" in row:
                log.rounds.append(_known(RoundRecord, row))
        except (TypeError, KeyError, ValueError):
            if problems is not None:
                problems.append(f"{path.parent.name}/{path.name}: a malformed line skipped")
    log.rounds.sort(key=lambda r: r.round)
    return log


# -- the sweep's result: results/<run>/incast.json ---------------------------------------------------
def point_folder(n: int) -> str:
    """The folder of one point of a curve: n01, n02, ... n15."""
    return f"n{n:02d}"


@dataclass
class IncastRow:
    """One point of the sweep: one curve at one sender count (None where nothing was measured)."""

    line: str
    senders: int
    config: dict[str, Any]  # rto_min_ms, cc, buffer_pkts, sru_bytes, link_mbit, quickack, max_concurrent
    state: str = "missing"  # complete, failed, missing
    error: str | None = None
    rounds: int = 0
    app_bytes: int = 0  # bytes the client received (its log)
    goodput_mbit: float | None = None
    goodput_frac: float | None = None  # of the client's link rate
    round_s_median: float | None = None
    round_s_max: float | None = None
    timeouts_kernel: int | None = None  # TcpExtTCPTimeouts over the senders' namespaces
    timeouts_by_host: dict[str, int] = field(default_factory=dict)
    loss_probes_kernel: int | None = None  # TcpExtTCPLossProbes over the senders
    retransmits_kernel: int | None = None  # TcpRetransSegs over the senders
    spurious_rtos_kernel: int | None = None
    timeouts_client_kernel: int | None = None  # the client's own (its requests)
    timeouts_pcap: int | None = None  # the senders' timeouts in their own captures (analysis.rto)
    timeouts_pcap_by_host: dict[str, int] = field(default_factory=dict)
    timeout_waves: int | None = None  # concurrent timeouts counted once (the RTO stalls a round waited)
    rounds_with_timeout: int | None = None
    timer_waits: int | None = None  # per round the timer waits of the sender that waited most, summed
    delivered_bytes_pcap: int | None = None  # unique payload bytes into the client (its capture)
    queue_drops: int | None = None  # every switch qdisc's drops over the point
    client_port_drops: int | None = None
    timeout_idle_s: float | None = None  # the client's link idle while a sender waited for its RTO
    duration_s: float | None = None
    ideal_s: float | None = None  # the bytes at the link's payload rate
    lost_s: float | None = None  # duration_s - ideal_s
    explained_s: float | None = None  # timer_waits x the minimum RTO
    explained_frac: float | None = None  # min(explained_s, lost_s) / lost_s
    idle_frac: float | None = None  # timeout_idle_s / lost_s: measured, not modelled
    fidelity: dict[str, Any] = field(default_factory=dict)  # checks, verdict, reasons

    @property
    def verdict(self) -> str | None:
        return self.fidelity.get("verdict")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> IncastRow:
        return _known(cls, doc)


@dataclass
class IncastResult:
    """incast.json: {"schema", "rows", ...}: one row per point, and what the sweep was run with."""

    rows: list[IncastRow]
    config: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    not_run: list[dict[str, str]] = field(default_factory=list)  # {"line", "reason"}
    fidelity: dict[str, Any] = field(default_factory=dict)  # the sweep's verdict
    goals: list[dict[str, Any]] = field(default_factory=list)  # {"goal", "value", "met"}
    timeline: dict[str, Any] = field(default_factory=dict)  # which point and round timeline.json shows
    complete: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": INCAST_SCHEMA,
            "rows": [r.to_dict() for r in self.rows],
            "config": self.config,
            "environment": self.environment,
            "not_run": self.not_run,
            "fidelity": self.fidelity,
            "goals": self.goals,
            "timeline": self.timeline,
            "complete": self.complete,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> IncastResult:
        if not isinstance(doc, dict) or doc.get("schema") != INCAST_SCHEMA:
            schema = doc.get("schema") if isinstance(doc, dict) else doc
            raise ParamError(f"not an incast result (schema {schema!r})")
        return cls(
            rows=[IncastRow.from_dict(r) for r in doc.get("rows", [])],
            config=doc.get("config", {}),
            environment=doc.get("environment", {}),
            not_run=doc.get("not_run", []),
            fidelity=doc.get("fidelity", {}),
            goals=doc.get("goals", []),
            timeline=doc.get("timeline", {}),
            complete=bool(doc.get("complete")),
        )

    def row(self, line: str, senders: int) -> IncastRow | None:
        return next((r for r in self.rows if r.line == line and r.senders == senders), None)

    def lines(self) -> list[str]:
        """The curves in the order they ran."""
        out: list[str] = []
        for r in self.rows:
            if r.line not in out:
                out.append(r.line)
        return out


# -- the run folder of a sweep ------------------------------------------------------------------------
class PointFolder(StrategyFolder):
    """<run>/<curve>/n05/: one point's client log, job, kernel counters, captures, queue and CPU
    samples and status (the StrategyFolder layout, so the same readers apply)."""

    client_log = property(lambda self: self.path / "client.jsonl", doc="one RoundRecord line per round")
    client_stderr = property(lambda self: self.path / "client.stderr", doc="the client's stderr")

    def rounds(self, problems: list[str] | None = None) -> ClientLog:
        """client.jsonl."""
        return read_client_log(self.client_log, problems)


class LineFolder:
    """<run>/<curve>/: the curve's servers, what the kernel was set to, and one folder per point."""

    def __init__(self, path: Path, line: IncastLine) -> None:
        self.path = path
        self.line = line

    servers_file = property(lambda self: self.path / "servers.json", doc="the servers' job")
    settings_file = property(
        lambda self: self.path / "settings.json",
        doc="what the curve asked for and what the kernel reported back",
    )

    def point(self, n: int) -> PointFolder:
        return PointFolder(self.path / point_folder(n), f"{self.line.name}/{point_folder(n)}")

    def server_stderr(self, host: str) -> Path:
        return self.path / f"server-{host}.stderr"


class IncastFolder(RunFolder):
    """results/<run>/ of `incastlab incast`: config.json, plan.json, incast.json, timeline.json, the
    report, and one LineFolder per curve."""

    incast_file = property(lambda self: self.path / "incast.json", doc="the sweep's rows")
    timeline_file = property(
        lambda self: self.path / "timeline.json", doc="one collapsed round, packet by packet"
    )

    def line(self, line: IncastLine | str) -> LineFolder:
        if isinstance(line, str):
            line = IncastLine.parse(line)
        return LineFolder(self.path / line.folder, line)

    def incast_config(self) -> IncastConfig:
        """The sweep's parameters (ParamError if config.json is not an incast config)."""
        doc = self.config_doc()
        if doc is None or doc.get("kind") != "incast":
            raise ParamError(f"not an incast run folder (no incast config.json): {self.path}")
        return IncastConfig.from_dict(doc)

    def result(self) -> IncastResult | None:
        """incast.json (None when missing or unreadable)."""
        from runmodel.records import read_json

        doc = read_json(self.incast_file, self.problems)
        try:
            return IncastResult.from_dict(doc) if isinstance(doc, dict) else None
        except ParamError:
            return None
