"""`incastlab paths SRC DST`: which spine each flow from SRC to DST takes, read back from the switches.

scapy crafts the probes inside SRC's network namespace (nsenter, the project's venv Python): one
flow per probe, each its own source port, TCP SYNs or UDP datagrams to --dport, a few packets each,
sent as Ethernet frames to DST's MAC (the fabric forwards on it, so no ARP is needed). Probes go one
at a time; between two, every spine's OpenFlow port counter toward DST's leaf is read with
`ovs-ofctl dump-ports` (spine port j leads to leaf j, runmodel.fabric.Plan), and the spine whose
counter moved by the probe's packets is the one the flow took. Each flow's first frame goes alone,
uncounted, 0.2 s ahead: a pinning policy pins at a flow's first packet, and frames sent before its
entry is installed follow the hash. Whatever the controller's routing
policy (the leaves' ECMP select groups, or a pinning policy), this is what the switches did.

Arguments the fabric cannot answer (an unknown host, SRC = DST, both on one leaf so no spine is
chosen, a count out of range) are refused in one line before anything is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runmodel.fabric import FabricSpec, Plan
from runmodel.params import ParamError, whole

PROTOS = ("tcp", "udp")
MAX_PROBES = 256
SPORT_BASE = 40000  # probe k's source port is SPORT_BASE + k: chosen, so a run can be repeated
PACKETS = 3  # frames per probe: a spine whose counter moved by at least this many took the flow
SETTLE_S = 2.0  # how long a probe's frames may take to reach the spine's counter
OPEN_WAIT_S = 0.2  # after a flow's first frame, before the counted ones: a pinning policy's entry is in


@dataclass(frozen=True)
class ProbeSpec:
    """What to probe: SRC -> DST, `count` flows of `proto` to `dport`, source ports from `sport_base`."""

    src: str
    dst: str
    count: int = 16
    proto: str = "tcp"
    dport: int = 5201
    sport_base: int = SPORT_BASE
    packets: int = PACKETS

    def validate(self, spec: FabricSpec) -> None:
        """Refuse what the fabric cannot answer (ParamError, one line, naming the argument)."""
        spec.check_host("SRC", self.src)
        spec.check_host("DST", self.dst)
        if self.src == self.dst:
            raise ParamError(f"SRC and DST are both {self.src}: a probe needs two hosts")
        if spec.leaf_of(self.src) == spec.leaf_of(self.dst):
            raise ParamError(
                f"{self.src} and {self.dst} are both under {spec.leaf_of(self.src)}: their traffic "
                "crosses no spine, so there is no path to choose (pick hosts on two leaves)"
            )
        whole("count", self.count, 1, MAX_PROBES)
        if self.proto not in PROTOS:
            raise ParamError(f"proto must be one of {', '.join(PROTOS)}, got {self.proto!r}")
        whole("dport", self.dport, 1, 65535)
        whole("packets", self.packets, 1, 100)
        if not 1024 <= self.sport_base <= 65535 - self.count:
            raise ParamError(f"sport_base must leave room for {self.count} ports below 65536")

    @property
    def sports(self) -> list[int]:
        """The probes' source ports, in sending order."""
        return [self.sport_base + k for k in range(self.count)]


@dataclass(frozen=True)
class Probe:
    """One probe's outcome: its source port, the spine that carried it (None: no single spine's
    counter moved by its packets) and every spine's counter delta toward DST's leaf."""

    sport: int
    spine: str | None
    deltas: dict[str, int]
    pinned: str | None = None  # the spine the controller's last flow_pinned/flow_moved event named


PLACING_EVENTS = ("flow_pinned", "flow_moved")  # a pinning policy's decisions (controller/app.py)


def controller_choices(events: list[dict[str, Any]], plan: Plan, probe: ProbeSpec) -> dict[int, str]:
    """Source port -> the spine the controller last placed that probe's flow on, from its events
    (flows are named 'tcp 10.0.0.1:40000>10.0.0.3:5201'); empty under the hash."""
    src, dst = plan.host(probe.src).ip, plan.host(probe.dst).ip
    names = {f"{probe.proto} {src}:{sp}>{dst}:{probe.dport}": sp for sp in probe.sports}
    out: dict[int, str] = {}
    for e in events:
        if e.get("event") in PLACING_EVENTS and e.get("flow") in names and e.get("new_path"):
            out[names[e["flow"]]] = e["new_path"]
    return out


# -- the switches' counters ---------------------------------------------------------------------------
_TX = re.compile(r"port\s+(\d+):.*?tx pkts=(\d+)", re.S)


def tx_packets(switch: str, port: int) -> int:
    """The OpenFlow tx packet counter of one switch port (`ovs-ofctl dump-ports`)."""
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", switch, str(port)],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    found = {int(p): int(n) for p, n in _TX.findall(out)}
    if port not in found:
        raise RuntimeError(f"ovs-ofctl dump-ports {switch} {port}: no tx counter in {out!r}")
    return found[port]


def spine_ports(plan: Plan, dst: str) -> dict[str, int]:
    """Each spine's port toward DST's leaf (spine port j leads to leaf j)."""
    leaf = plan.host(dst).leaf
    return {ln.b: ln.b_port for ln in plan.links if ln.kind == "uplink" and ln.a == leaf}


def read_spines(ports: dict[str, int]) -> dict[str, int]:
    """Every spine's tx packets toward the destination leaf, now."""
    return {sp: tx_packets(sp, port) for sp, port in ports.items()}


def carrier(deltas: dict[str, int], packets: int) -> str | None:
    """The one spine whose counter moved by at least the probe's packets, else None."""
    moved = [sp for sp, d in deltas.items() if d >= packets]
    return moved[0] if len(moved) == 1 else None


# -- the sender, in SRC's namespace -------------------------------------------------------------------
class Sender:
    """A scapy process in SRC's namespace that sends one probe per source port written to its stdin
    and answers `ok` when its frames are out (one process for all probes: scapy loads once)."""

    def __init__(self, pid: int, nic: str, plan: Plan, probe: ProbeSpec) -> None:
        src, dst = plan.host(probe.src), plan.host(probe.dst)
        argv = [
            "nsenter",
            f"--net=/proc/{pid}/ns/net",
            sys.executable,
            "-m",
            "incastlab.paths",
            "--send",
            nic,
            src.mac,
            dst.mac,
            src.ip,
            dst.ip,
            probe.proto,
            str(probe.dport),
            str(probe.packets),
        ]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._expect("ready")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != word:
            err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""
            raise RuntimeError(f"probe sender: expected {word!r}, got {line!r} {err.strip()[-300:]}")

    def send(self, sport: int, opener: bool = False) -> None:
        """Send one probe's frames from source port `sport` (opener: one frame only, the flow's
        first, which a pinning policy answers with the flow's entry); returns when they are out."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{'o' if opener else ''}{sport}\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def close(self) -> None:
        """End the sender (its stdin closed; killed if it lingers)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sender_main(argv: list[str]) -> int:
    """`python -m incastlab.paths --send NIC SMAC DMAC SIP DIP PROTO DPORT PACKETS`, run in SRC's
    namespace: for each source port on stdin, PACKETS frames of one flow, then `ok`."""
    from scapy.all import IP, TCP, UDP, Ether, conf, sendp  # noqa: PLC0415 - only in the sender

    nic, smac, dmac, sip, dip, proto, dport, packets = argv
    conf.verb = 0
    sock = conf.L2socket(iface=nic)
    print("ready", flush=True)
    for line in sys.stdin:
        opener = line.startswith("o")
        sport = int(line.lstrip("o"))
        l4 = (
            TCP(sport=sport, dport=int(dport), flags="S")
            if proto == "tcp"
            else UDP(sport=sport, dport=int(dport))
        )
        frame = Ether(src=smac, dst=dmac) / IP(src=sip, dst=dip) / l4
        sendp(frame, count=1 if opener else int(packets), socket=sock, verbose=False)
        print("ok", flush=True)
    sock.close()
    return 0


# -- probing ------------------------------------------------------------------------------------------
def probe_paths(sess: Any, probe: ProbeSpec, say: Callable[[str], None] | None = None) -> list[Probe]:
    """Every probe of `probe` on a running session, one at a time, each mapped to the spine whose
    counter toward DST's leaf moved by its packets."""
    plan: Plan = sess.plan
    ports = spine_ports(plan, probe.dst)
    pid = sess.fabric.host(probe.src).shell.pid
    sender = Sender(pid, plan.host(probe.src).nic, plan, probe)
    out: list[Probe] = []
    try:
        for sport in probe.sports:
            # the flow's first frame alone: under a pinning policy it goes to the controller, and
            # frames that come before the pinned entry exists follow the hash; the counted ones after
            sender.send(sport, opener=True)
            time.sleep(OPEN_WAIT_S)
            before = read_spines(ports)
            sender.send(sport)
            deadline = time.monotonic() + SETTLE_S
            while True:
                after = read_spines(ports)
                deltas = {sp: after[sp] - before[sp] for sp in ports}
                if sum(deltas.values()) >= probe.packets or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            out.append(Probe(sport, carrier(deltas, probe.packets), deltas))
            if say is not None:
                say(f"sport {sport}: {out[-1].spine or 'no single spine'} ({deltas})")
    finally:
        sender.close()
    try:
        events = sess.controller.get("/api/events", timeout=10)["events"]
    except Exception as exc:  # noqa: BLE001 - the switches' answer stands without the controller's
        if say is not None:
            say(f"controller events unavailable ({exc}); its choices are not shown")
        return out
    chosen = controller_choices(events, plan, probe)
    return [dataclasses.replace(p, pinned=chosen.get(p.sport)) for p in out]


def paths_table(probe: ProbeSpec, probes: list[Probe]) -> Any:
    """The probes as the project's table: source port -> spine, each spine's counter delta; the
    footer says how many flows each spine carried."""
    from report.console import Col, Table

    spines = sorted({sp for p in probes for sp in p.deltas}, key=lambda s: int(s[2:]))
    cols = [
        Col("sport", "", "sport"),
        Col("spine", "", "spine", align="<"),
        *(Col(sp, "pkts", (lambda p, s=sp: p.deltas.get(s)), name=f"pkts_{sp}") for sp in spines),
    ]
    if any(p.pinned for p in probes):  # a pinning policy: its choice beside what the switches did
        cols.insert(2, Col("pinned", "controller", "pinned", align="<"))
    counts = {sp: sum(p.spine == sp for p in probes) for sp in spines}
    unclear = sum(p.spine is None for p in probes)
    footer = [
        f"{probe.src} -> {probe.dst}, {probe.proto} dport {probe.dport}, {probe.packets} packets per probe",
        "flows per spine: " + ", ".join(f"{sp} {n}" for sp, n in counts.items()),
    ]
    disagree = [p.sport for p in probes if p.pinned and p.pinned != p.spine]
    if disagree:
        footer.append(f"the switches did not follow the controller's pin for sport {disagree}")
    if unclear:
        footer.append(f"{unclear} probe(s) moved no single spine's counter by {probe.packets} packets")
    return Table(cols, probes, footer=footer)


def cmd_paths(args: argparse.Namespace) -> int:
    """The `paths` subcommand: checks, a fabric of its own (hosts as namespaces unless --runtime
    says otherwise), the probes, the table."""
    from incastlab.cliflags import fabric_and_controller, require_root, say
    from incastlab.session import fabric_session
    from runmodel.fabric import build_plan

    spec, options = fabric_and_controller(args)
    if spec.runtime == "auto":  # the probes need the namespace only: no container to start
        spec = dataclasses.replace(spec, runtime="netns")
    probe = ProbeSpec(args.src, args.dst, args.count, args.proto, args.dport)
    probe.validate(spec)
    require_root()
    workdir = Path(args.workdir)
    with fabric_session(build_plan(spec), options, workdir, progress=say, ping=False) as sess:
        say(f"probing {probe.count} {probe.proto} flows {probe.src} -> {probe.dst}")
        probes = probe_paths(sess, probe)
    table = paths_table(probe, probes)
    print(table.render_json(src=probe.src, dst=probe.dst) if args.json else table.render(), flush=True)
    return 0 if all(p.spine for p in probes) else 1


def add_paths_parser(sub: Any) -> None:
    """The `paths` subcommand's flags: SRC DST, the probes', the fabric's and the controller's."""
    from incastlab.cliflags import add_json_flag, add_param_flags
    from runmodel.config import ControllerOptions

    p = sub.add_parser(
        "paths",
        help="which spine each flow SRC -> DST takes, probed with scapy, read from the switches",
        description="Sends --count flows (one source port each) from SRC to DST with scapy inside "
        "SRC's namespace, one at a time, and names the spine that carried each from the spines' "
        "port counters toward DST's leaf. Exit 1 if a probe moved no single spine's counter.",
    )
    p.add_argument("src", metavar="SRC", help="source host, e.g. h1")
    p.add_argument("dst", metavar="DST", help="destination host on another leaf, e.g. h3")
    p.add_argument("--count", type=int, default=16, help=f"flows to probe, 1..{MAX_PROBES} (default: 16)")
    p.add_argument("--proto", choices=PROTOS, default="tcp", help="probe protocol (default: tcp)")
    p.add_argument("--dport", type=int, default=5201, help="destination port (default: 5201)")
    p.add_argument(
        "--workdir", default="results/paths", help="where plan and logs go (default: results/paths)"
    )
    add_param_flags(p, FabricSpec, "fabric")
    add_param_flags(p, ControllerOptions, "controller")
    add_json_flag(p)
    p.set_defaults(func=cmd_paths)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--send":
        sys.exit(sender_main(sys.argv[2:]))
    sys.exit("usage: python -m incastlab.paths --send NIC SMAC DMAC SIP DIP PROTO DPORT PACKETS")
