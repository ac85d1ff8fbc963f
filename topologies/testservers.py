"""Container servers: N containers on this machine that stand in for the machines of a cluster.

Each is a container of `incastlab/server:<version>` (scripts/server/: sshd with root key login and
PermitTunnel, a userspace Open vSwitch, Mininet, tcpdump), with the capabilities a Mininet server
needs (every capability this machine can give, no seccomp or AppArmor profile, /dev/net/tun), on a
Docker bridge network this module creates (no NAT, no route out: nothing is sent anywhere but between
the servers and this machine). The underlay's MTU is 1600, so a VXLAN tunnel (50 bytes of header)
carries the fabric's full 1500-byte frames unchanged (topologies.cluster).

The checkout and its venv are bind-mounted read-only at their own paths, so the same code and the
same interpreter run in every server; a throwaway ssh key (build/cluster/, never ~/.ssh) is the
servers' only authorised key, and an ssh config there names it (INCASTLAB_SSH_CONFIG points at it).

The containers are labelled incastlab.server and their owner's pid is in build/cluster/owner.pid:
while the owner lives they are in use, not leftovers; once it is gone `incastlab clean` removes
them and their network (test_server_leftovers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from topologies.image import (
    BASE_IMAGE,
    ROOT,
    ImageError,
    debootstrap_base,
    docker,
    inspect_image,
    labels,
    version,
)

SERVER_IMAGE = f"incastlab/server:{version()}"
SERVER_CONTEXT = ROOT / "scripts" / "server"
SERVER_LABEL = "incastlab.server"  # value: the server's name
NETWORK = "incastlab-servers"
BRIDGE = "ilsrv0"
SUBNET = "10.249.0.0/24"
GATEWAY = "10.249.0.1"  # this machine on the servers' network: where the controller listens
UNDERLAY_MTU = 1600
CACHE = ROOT / "build" / "cluster"
OWNER = CACHE / "owner.pid"
SSH_CONFIG_ENV = "INCASTLAB_SSH_CONFIG"
CAPS = [
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",  # not in this machine's bounding set: asking for it (as --privileged does) fails
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
    "--device",
    "/dev/net/tun",
]


@dataclass(frozen=True)
class TestServer:
    """One container server: its container's name and its address on the servers' network."""

    name: str
    ip: str


def server_name(k: int) -> str:
    """The container name of server k (1-based)."""
    return f"incastlab-srv{k}"


def server_ip(k: int) -> str:
    """Server k's address on the servers' network."""
    return f"10.249.0.{10 + k}"


# -- the image ----------------------------------------------------------------------------------------
def context_hash() -> str:
    """Hash of the server image's build context (Dockerfile, sshd config, entrypoint)."""
    h = hashlib.sha256()
    for path in sorted(p for p in SERVER_CONTEXT.iterdir() if p.is_file()):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_image(say: Callable[[str], None], force: bool = False) -> bool:
    """Build incastlab/server:<version> on the base image unless the one there has the same inputs
    (the context's hash and the base's id); Debian packages come from the Debian mirror. True if built."""
    base = inspect_image(BASE_IMAGE)
    if base is None:  # a fresh machine: the same minimal Debian `make image` builds the worker on
        debootstrap_base(say)
        base = inspect_image(BASE_IMAGE)
        assert base is not None
    inputs = hashlib.sha256(json.dumps([context_hash(), base["Id"]]).encode()).hexdigest()[:16]
    old = inspect_image(SERVER_IMAGE)
    if old is not None and labels(old).get("incastlab.inputs") == inputs and not force:
        say(f"server image: {SERVER_IMAGE} is up to date")
        return False
    say(f"server image: building {SERVER_IMAGE} on {BASE_IMAGE} (Debian packages from the mirror)")
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "INCASTLAB_RUN"}
    env["DOCKER_BUILDKIT"] = "0"
    docker(
        "build",
        "--force-rm",
        "--network",
        "host",  # apt reaches the mirror; dockerd here has no bridge of its own
        "--build-arg",
        f"BASE={BASE_IMAGE}",
        "--label",
        f"incastlab.inputs={inputs}",
        "-t",
        SERVER_IMAGE,
        str(SERVER_CONTEXT),
        timeout=1800,
        env=env,
    )
    if old is not None and old["Id"] != (inspect_image(SERVER_IMAGE) or {}).get("Id"):
        docker("image", "rm", old["Id"], check=False)
    say(f"server image: built in {time.monotonic() - t0:.0f} s")
    return True


# -- the ssh key and config -------------------------------------------------------------------------
def ssh_files() -> tuple[Path, Path]:
    """The throwaway key (made once, cached in build/cluster/) and an ssh config naming it, with a
    known-hosts file of its own (emptied at each start: the servers make new host keys each time)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    key = CACHE / "id_ed25519"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "incastlab-test-servers", "-f", str(key)],
            check=True,
            capture_output=True,
        )
    config = CACHE / "ssh_config"
    config.write_text(
        "Host 10.249.0.*\n"
        "  User root\n"
        f"  IdentityFile {key}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {CACHE / 'known_hosts'}\n"
        "  StrictHostKeyChecking accept-new\n"
        "  ConnectTimeout 5\n"
        "  LogLevel ERROR\n"
    )
    return key, config


def mounts() -> list[str]:
    """The checkout and the venv's checkout, read-only at their own paths."""
    paths = {ROOT, Path(sys.prefix).resolve().parent}
    out: list[str] = []
    for p in sorted(paths):
        out += ["-v", f"{p}:{p}:ro"]
    return out


# -- start and stop ---------------------------------------------------------------------------------
def owner_alive() -> bool:
    """True while the process that started the servers runs."""
    try:
        os.kill(int(OWNER.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def running_servers() -> list[str]:
    """Names of the server containers there (running or not)."""
    proc = docker("ps", "-a", "--filter", f"label={SERVER_LABEL}", "--format", "{{.Names}}", check=False)
    return sorted(proc.stdout.split()) if proc.returncode == 0 else []


def network_there() -> bool:
    """True when the servers' network exists."""
    return docker("network", "inspect", NETWORK, check=False).returncode == 0


def start(n: int, say: Callable[[str], None], mount: tuple[Path, ...] = ()) -> list[TestServer]:
    """Start n server containers on a new network, wait for their sshd and OVS; this process owns them.
    `mount`: more folders (a run's results) bind-mounted read-write at their own paths."""
    if running_servers() or network_there():
        raise ImageError(
            "container servers are already there (another cluster check runs, or "
            "`incastlab clean` removes a dead one's)"
        )
    key, config = ssh_files()
    (CACHE / "known_hosts").write_text("")
    OWNER.write_text(str(os.getpid()))
    os.environ[SSH_CONFIG_ENV] = str(config)
    docker(
        "network",
        "create",
        "--driver",
        "bridge",
        "--subnet",
        SUBNET,
        "--gateway",
        GATEWAY,
        "--opt",
        f"com.docker.network.bridge.name={BRIDGE}",
        "--opt",
        f"com.docker.network.driver.mtu={UNDERLAY_MTU}",
        "--opt",
        "com.docker.network.bridge.enable_ip_masquerade=false",
        "--label",
        f"{SERVER_LABEL}=network",
        NETWORK,
    )
    servers = [TestServer(server_name(k), server_ip(k)) for k in range(1, n + 1)]
    extra: list[str] = []
    for m in mount:
        extra += ["-v", f"{Path(m).resolve()}:{Path(m).resolve()}"]
    for s in servers:
        docker(
            "run",
            "-d",
            *CAPS,
            "--name",
            s.name,
            "--hostname",
            s.name,
            "--label",
            f"{SERVER_LABEL}={s.name}",
            "--network",
            NETWORK,
            "--ip",
            s.ip,
            "-v",
            f"{key}.pub:/etc/incastlab/authorized_keys:ro",
            *mounts(),
            *extra,
            SERVER_IMAGE,
        )
    for s in servers:
        wait_ready(s, config)
    say(f"container servers: {', '.join(f'{s.name} ({s.ip})' for s in servers)}")
    return servers


def wait_ready(server: TestServer, config: Path, timeout: float = 30) -> None:
    """Wait until the server answers ssh and its Open vSwitch answers."""
    deadline = time.monotonic() + timeout
    argv = ["ssh", "-F", str(config), "-o", "BatchMode=yes", server.ip, "ovs-vsctl --timeout=2 show"]
    while time.monotonic() < deadline:
        if subprocess.run(argv, capture_output=True, timeout=15).returncode == 0:
            return
        time.sleep(0.3)
    raise ImageError(f"{server.name}: no ssh or no Open vSwitch answer within {timeout:.0f} s")


def stop() -> None:
    """Remove every server container and the servers' network (whoever started them)."""
    names = running_servers()
    if names:
        docker("rm", "-f", "-v", *names, timeout=60, check=False)
    if network_there():
        docker("network", "rm", NETWORK, timeout=30, check=False)
    OWNER.unlink(missing_ok=True)


def test_server_leftovers() -> list[str]:
    """Server containers and network whose owner is gone (what `incastlab clean` removes), [] while
    the owner runs or where docker is not answering."""
    try:
        if owner_alive():
            return []
        found = running_servers()
        return found + ([NETWORK] if network_there() else [])
    except ImageError:
        return []


def main(argv: list[str] | None = None) -> int:
    """`python -m topologies.testservers image|up N|down`: the server image, servers by hand."""
    p = argparse.ArgumentParser(prog="python -m topologies.testservers")
    p.add_argument("action", choices=("image", "down"))
    p.add_argument("--force", action="store_true", help="image: build even when the inputs did not change")
    args = p.parse_args(argv)

    def say(msg: str) -> None:
        print(f"[incastlab servers] {msg}", file=sys.stderr, flush=True)

    try:
        if args.action == "image":
            build_image(say, force=args.force)
        else:
            stop()
    except ImageError as exc:
        print(f"testservers: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
