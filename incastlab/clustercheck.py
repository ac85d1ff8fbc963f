"""`make cluster-check`: the default fabric over two container servers, checked end to end.

Builds (or finds) the server image, starts N container servers (topologies.testservers) with the
check's folder mounted in each, brings the default leaf-spine fabric up over them with `--servers`
(the session's all-pairs ping must lose nothing), measures ping RTT within a server and across the
tunnel, takes the fabric down, runs a short `incastlab compare --servers` (ps and ring, every host
captured on its server) into the same folder, ends a `fabric --hold` by Ctrl-C and another by SIGKILL and
`incastlab clean`, then asks every server directly (ovs-vsctl, ip link, pgrep: not the
leftover finder) whether anything is left, removes the servers and their network, and checks this
machine the same way. Writes check.json into --workdir; exits 1 if a step failed or anything was left.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from incastlab.cliflags import say
from runmodel.config import ControllerOptions
from runmodel.fabric import FabricSpec, build_plan
from topologies import testservers
from topologies.servers import run_on

REMOTE_LEFT = (
    "echo bridges=$(ovs-vsctl --timeout=3 list-br | tr '\\n' ' '); "
    "echo links=$(ip -o link show | grep -v ' lo:\\| eth0@' | cut -d: -f2 | tr -d ' ' | tr '\\n' ' '); "
    "echo qos=$(ovs-vsctl --timeout=3 --bare --columns=_uuid list qos | tr '\\n' ' '); "
    "echo procs=$(pgrep -f '[m]ininet:|[m]nexec|[t]cpdump|[i]perf3|[w]orkloads' | tr '\\n' ' ')"
)


def ping_rtt(fabric: Any, src: str, dst_ip: str, count: int = 50) -> dict[str, float | None]:
    """ping's own summary (loss %, avg and max RTT in ms) from host src to dst_ip; an RTT ping did
    not print (every packet lost) is None, strict JSON's null, as every missing figure."""
    out = fabric.host(src).cmd(f"ping -c {count} -i 0.02 -q {dst_ip}")
    loss = re.search(r"([\d.]+)% packet loss", out)
    rtt = re.search(r"= [\d.]+/([\d.]+)/([\d.]+)/", out)
    return {
        "loss_pct": float(loss.group(1)) if loss else 100.0,
        "avg_ms": float(rtt.group(1)) if rtt else None,
        "max_ms": float(rtt.group(2)) if rtt else None,
    }


def left_on(ip: str) -> dict[str, str]:
    """What a server holds that a fabric makes (bridges, links, QoS rows, its processes)."""
    out = run_on(ip, REMOTE_LEFT).stdout
    return {k: v.strip() for k, v in (ln.split("=", 1) for ln in out.splitlines() if "=" in ln)}


def left_here() -> dict[str, str]:
    """What this machine holds of the servers (containers, network, bridge) and of a fabric."""

    def out(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True).stdout.strip()

    return {
        "containers": out(["docker", "ps", "-a", "-q", "--filter", f"label={testservers.SERVER_LABEL}"]),
        "networks": out(["docker", "network", "ls", "-q", "--filter", f"name={testservers.NETWORK}"]),
        "bridge": out(["ip", "-o", "link", "show", "dev", testservers.BRIDGE])
        if Path(f"/sys/class/net/{testservers.BRIDGE}").exists()
        else "",
        "ovs_bridges": " ".join(
            b for b in out(["ovs-vsctl", "list-br"]).split() if re.match(r"^(sp|lf)\d+$", b)
        ),
    }


def run_check(n: int, workdir: Path, steps: int) -> dict[str, Any]:
    """The whole check; returns what check.json holds."""
    from incastlab.session import fabric_session

    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    testservers.build_image(say)
    doc: dict[str, Any] = {"servers": n}
    t0 = time.monotonic()
    servers = testservers.start(n, say, mount=(workdir,))
    try:
        ips = [s.ip for s in servers]
        plan = build_plan(FabricSpec())
        options = ControllerOptions(servers=tuple(ips))
        with fabric_session(plan, options, workdir, progress=say, cluster=True) as sess:
            fab = sess.fabric
            doc["pingall_loss_pct"] = 0.0  # the session refuses a fabric whose all-pairs ping lost any
            ip = {h.name: h.ip for h in plan.hosts}
            first = plan.host_names[0]
            same_leaf = next(h.name for h in plan.hosts[1:] if fab.where[h.name] == fab.where[first])
            other_leaf = next(
                h.name
                for h in plan.hosts
                if fab.where[h.name] == fab.where[first] and h.leaf != plan.host(first).leaf
            )
            across = next(h.name for h in plan.hosts if fab.where[h.name] != fab.where[first])
            doc["rtt"] = {
                f"{first}-{same_leaf} (same leaf)": ping_rtt(fab, first, ip[same_leaf]),
                f"{first}-{other_leaf} (same server, via a spine)": ping_rtt(fab, first, ip[other_leaf]),
                f"{first}-{across} (across servers)": ping_rtt(fab, first, ip[across]),
            }
            say(f"rtt: {json.dumps(doc['rtt'])}")
        doc["cluster"] = json.loads((workdir / "cluster.json").read_text())
        if steps:
            doc["compare"] = compare(ips, workdir, steps)
        doc["interrupted"] = interrupted(ips, workdir)
        doc["left_on_servers"] = {ip: left_on(ip) for ip in ips}
    finally:
        testservers.stop()
    doc["left_here"] = left_here()
    doc["seconds"] = round(time.monotonic() - t0, 1)
    (workdir / "check.json").write_text(json.dumps(doc, indent=1))
    return doc


def compare(ips: list[str], workdir: Path, steps: int) -> dict[str, Any]:
    """`incastlab compare --servers` (ps, ring; captures of every host and the PS port, each on its
    server) into workdir; its exit code and run folder."""
    argv = [sys.executable, "-m", "incastlab.cli", "compare", "--servers", ",".join(ips)]
    argv += ["--steps", str(steps), "--results", str(workdir), "--name", "cluster"]
    say(f"compare over the servers: {' '.join(argv[3:])}")
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=600)
    print(proc.stdout, end="", flush=True)
    runs = sorted(workdir.glob("*-cluster"))
    return {"exit": proc.returncode, "run": str(runs[-1]) if runs else None}


def interrupted(ips: list[str], workdir: Path) -> dict[str, Any]:
    """`incastlab fabric --servers --hold` ended by Ctrl-C (SIGINT), then again by SIGKILL followed by
    `incastlab clean`: its exit codes, and what each server held after each."""
    import signal

    out: dict[str, Any] = {}
    argv = [sys.executable, "-m", "incastlab.cli", "fabric", "--servers", ",".join(ips), "--hold"]
    argv += ["--no-calibrate", "--workdir", str(workdir / "held")]
    for sig in (signal.SIGINT, signal.SIGKILL):
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:  # until the fabric is up (or the command ended)
            if "fabric is up" in line:
                break
        proc.send_signal(sig)
        name = signal.Signals(sig).name
        out[f"{name}_exit"] = proc.wait(timeout=120)
        if sig == signal.SIGKILL:
            out["held_before_clean"] = {ip: left_on(ip)["bridges"] for ip in ips}
            cleaned = subprocess.run(
                [sys.executable, "-m", "incastlab.cli", "clean"], capture_output=True, text=True
            )
            out["clean_exit"] = cleaned.returncode
        out[f"left_after_{name}"] = {ip: left_on(ip) for ip in ips}
        say(f"fabric --hold ended by {name}: exit {out[f'{name}_exit']}")
    return out


def dirty(doc: dict[str, Any]) -> list[str]:
    """Lines naming what the check found left (none: clean)."""
    lines = [
        f"left on server {ip}: {k} {v}"
        for ip, left in doc["left_on_servers"].items()
        for k, v in left.items()
        if v
    ]
    lines += [f"left on this machine: {k} {v}" for k, v in doc["left_here"].items() if v]
    for key, held in doc.get("interrupted", {}).items():
        if key.startswith("left_after_"):
            lines += [
                f"{key}: server {ip}: {k} {v}" for ip, left in held.items() for k, v in left.items() if v
            ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the check; exit 1 when anything was left or the fabric failed."""
    p = argparse.ArgumentParser(prog="make cluster-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=2, help="container servers (default: 2)")
    p.add_argument("--workdir", default="results/cluster-check", help="where check.json and the run go")
    p.add_argument("--steps", type=int, default=4, help="training steps of the compare (0: no compare)")
    args = p.parse_args(argv)
    from incastlab.session import SessionError, mark_run

    mark_run()
    try:
        doc = run_check(args.servers, Path(args.workdir), args.steps)
    except (SessionError, RuntimeError) as exc:
        print(f"cluster-check: {exc}", file=sys.stderr)
        return 1
    lines = dirty(doc)
    if doc.get("compare", {}).get("exit", 0) != 0:
        lines.append(f"the compare over the servers failed (exit {doc['compare']['exit']})")
    for line in lines:
        print(f"cluster-check: {line}", file=sys.stderr)
    say(f"cluster-check: {'FAILED' if lines else 'ok'} in {doc['seconds']} s; {args.workdir}/check.json")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
