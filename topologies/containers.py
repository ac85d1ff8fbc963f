"""Docker containers as the fabric's hosts, Containernet-style.

Each host that is a container is started first, `docker run --network none`, named after its host
(`incastlab-h3`) and labelled with the run (`incastlab.run=<the run's marker value>`). Its network
namespace then becomes the Mininet host's: the host's shell is started inside that namespace
(`nsenter --net=/proc/<container pid>/ns/net`, in the root mount namespace, so the host-side tools,
tc, tcpdump, iperf3, ping, keep working as for any Mininet host), and Mininet moves the host's veth end
into the shell's namespace, which is the container's. Everything the fabric does to a host (shaping,
TCP settings, captures, kernel counters through /proc/<shell pid>/net) therefore applies to the
container, and the training processes run in the container (`docker exec`), under its CPU and
memory limits (`--cpus`, `--cpuset-cpus`, `--memory`, changed at run time with `docker update`).

Nothing here runs a shell command through a host's shell: teardown is one `docker rm -f` of the run's
containers (and the sweep finds any left, by label only).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from topologies.image import (
    WORKER_IMAGE,
    ImageError,
    daemon_answers,
    docker,
    docker_bin,
    image_current,
    inspect_image,
)

MARKER = "INCASTLAB_RUN"
RUN_LABEL = "incastlab.run"  # value: the run's marker value
HOST_LABEL = "incastlab.host"
NAME_PREFIX = "incastlab-"
PROC_TAG = "INCASTLAB_PROC"  # names one process started in a container (found in /proc by it)
RUNTIMES = ("auto", "docker", "netns")
DOCKERD_LOG = Path("/var/log/incastlab-dockerd.log")


class ContainerError(RuntimeError):
    """A container cannot be started or used; one line naming it."""


def container_name(host: str) -> str:
    """The container of a fabric host."""
    return NAME_PREFIX + host


# -- the daemon and the choice of runtime -------------------------------------------------------------
def ensure_dockerd(timeout: float = 30) -> None:
    """Start dockerd when it does not answer (by systemd where it runs, else by hand), as `make deps` does."""
    if daemon_answers():
        return
    if docker_bin() is None or not any(Path(p, "dockerd").exists() for p in ("/usr/bin", "/usr/sbin")):
        raise ContainerError("Docker is not installed: run `make deps`")
    env = {k: v for k, v in os.environ.items() if k != MARKER}  # the daemon outlives the run
    if Path("/run/systemd/system").exists():
        subprocess.run(
            ["systemctl", "start", "docker"], capture_output=True, timeout=60, env=env, check=False
        )
    else:
        exe = next(str(Path(p, "dockerd")) for p in ("/usr/bin", "/usr/sbin") if Path(p, "dockerd").exists())
        with open(DOCKERD_LOG, "ab") as log:
            subprocess.Popen(
                [exe, *DOCKERD_FLAGS],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon_answers(timeout=3):
            return
        time.sleep(0.3)
    raise ContainerError(f"dockerd does not answer {timeout:g} s after starting it (see {DOCKERD_LOG})")


# dockerd started by hand: no bridge and no iptables rules of its own (the containers use --network none,
# and the machine's other networks are left as they were)
DOCKERD_FLAGS = ("--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false")


def choose_runtime(asked: str, image: str = WORKER_IMAGE) -> tuple[str, str]:
    """(runtime, why): docker when asked, or by default when dockerd answers and the image is this
    checkout's; netns otherwise. Asking for docker where it cannot be used is refused (ContainerError)."""
    if asked == "netns":
        return "netns", "--runtime netns"
    if asked == "docker":
        ensure_dockerd()
        ok, why = image_current(image)
        if not ok:
            raise ContainerError(f"--runtime docker: {why}")
        return "docker", f"--runtime docker, image {image}"
    if docker_bin() is None:
        return "netns", "Docker is not installed (make deps installs it)"
    if not daemon_answers():
        return "netns", "dockerd does not answer (make deps starts it)"
    try:
        ok, why = image_current(image)
    except ImageError as exc:
        return "netns", str(exc)
    if not ok:
        return "netns", why
    return "docker", f"dockerd answers and {image} is built from this checkout"


def check_image(image: str) -> None:
    """Refuse an image that is not on this machine (no registry is reachable to pull it from)."""
    if not daemon_answers():
        ensure_dockerd()
    if inspect_image(image) is None:
        raise ContainerError(
            f"image {image!r} does not exist here (build or load it first: "
            "`docker images` lists what there is)"
        )


# -- limits -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """A container's CPU and memory limits (None: unlimited)."""

    cpus: float | None = None  # CPUs (docker --cpus)
    cpuset: str | None = None  # cores it may run on (docker --cpuset-cpus), e.g. "1" or "0-1"
    memory_mb: float | None = None  # docker --memory

    def docker_args(self) -> list[str]:
        """The `docker run` / `docker update` flags."""
        out = []
        if self.cpus is not None:
            out += ["--cpus", f"{self.cpus:.3f}"]
        if self.cpuset is not None:
            out += ["--cpuset-cpus", self.cpuset]
        if self.memory_mb is not None:
            out += ["--memory", f"{int(self.memory_mb)}m", "--memory-swap", f"{int(self.memory_mb)}m"]
        return out


def cpus_for_share(share: float) -> float:
    """The CPUs a Mininet CPU-limited host with this `cpu` share gets (a share of the whole machine),
    so a straggler is as slow in a container as in a namespace."""
    return share * (os.cpu_count() or 1)


def oom_kills(pid: int) -> int | None:
    """How many processes the kernel's OOM killer has killed in the memory cgroup of process `pid` (a
    container's main process): the kernel's own count, `oom_kill` in memory.oom_control (cgroup v1)
    or memory.events (v2). None when it cannot be read."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            file = Path("/sys/fs/cgroup/memory" + path) / "memory.oom_control"
        elif controllers == "":
            file = Path("/sys/fs/cgroup" + path) / "memory.events"
        else:
            continue
        try:
            text = file.read_text()
        except OSError:
            continue
        for row in text.splitlines():
            key, _, value = row.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


# -- one container ------------------------------------------------------------------------------------
@dataclass
class Container:
    """One host's container."""

    host: str
    image: str
    run: str  # the run's marker value
    limits: Limits = field(default_factory=Limits)
    mounts: tuple[str, ...] = ()  # host paths, mounted at the same path
    python: str = "python3"  # the interpreter the image's processes use
    keepalive: tuple[str, ...] = ("sleep", "infinity")  # its main process
    id: str = ""
    pid: int = 0

    @property
    def name(self) -> str:
        """Its docker name."""
        return container_name(self.host)

    def run_args(self) -> list[str]:
        """`docker run` arguments."""
        # --rm: a container whose process was killed while dockerd was down is removed when it is back
        args = [
            "run",
            "-d",
            "--rm",
            "--init",
            "--network",
            "none",
            "--name",
            self.name,
            "--hostname",
            self.host,
            "--label",
            f"{RUN_LABEL}={self.run}",
            "--label",
            f"{HOST_LABEL}={self.host}",
            "-e",
            f"{MARKER}={self.run}",
            *self.limits.docker_args(),
        ]
        for m in self.mounts:
            args += ["-v", f"{m}:{m}"]
        return args + ["--entrypoint", self.keepalive[0], self.image, *self.keepalive[1:]]

    def start(self) -> None:
        """Start it and learn the host pid of its main process (its network namespace)."""
        proc = docker(*self.run_args(), timeout=120, check=False)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            raise ContainerError(
                f"container {self.name} ({self.image}) did not start: "
                f"{lines[-1] if lines else proc.returncode}"
            )
        self.id = proc.stdout.strip()
        out = docker(
            "inspect", "--format", "{{.State.Pid}} {{.State.Running}}", self.id, timeout=30, check=False
        ).stdout.split()
        if len(out) != 2 or out[1] != "true" or not out[0].isdigit() or out[0] == "0":
            logs = docker("logs", "--tail", "3", self.id, check=False, timeout=10)
            why = (logs.stderr or logs.stdout).strip().splitlines()
            raise ContainerError(
                f"container {self.name} ({self.image}) exited at once: {why[-1] if why else 'no message'}"
            )
        self.pid = int(out[0])

    def update(self, limits: Limits) -> None:
        """Change its limits while it runs (`docker update`)."""
        args = limits.docker_args()
        if not args:
            return
        docker("update", *args, self.name, timeout=30)
        self.limits = replace(self.limits, **{k: v for k, v in vars(limits).items() if v is not None})

    def exec(
        self,
        argv: list[str],
        stdout: IO[Any] | int | None,
        stderr: IO[Any] | int | None,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
    ) -> ContainerProc:
        """Start a process in the container (docker exec); Popen-like handle on it."""
        return ContainerProc(self, argv, stdout, stderr, env or {}, workdir)


class ContainerProc:
    """A process started in a container, handled like a Popen: poll, wait, terminate, kill.

    The docker client that started it exits with the process's exit code; terminate and kill go to
    the process itself, found in /proc by the tag it carries in its environment (killing the client
    would leave the process running in the container)."""

    def __init__(
        self,
        container: Container,
        argv: list[str],
        stdout: IO[Any] | int | None,
        stderr: IO[Any] | int | None,
        env: dict[str, str],
        workdir: str | None,
    ) -> None:
        self.container = container
        self.tag = f"{container.name}-{uuid.uuid4().hex[:12]}"
        exe = docker_bin() or "docker"
        args = [exe, "exec", "-i", "-e", f"{PROC_TAG}={self.tag}", "-e", f"{MARKER}={container.run}"]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        if workdir:
            args += ["-w", workdir]
        self.client = subprocess.Popen(
            args + [container.name, *argv], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
        )
        self.args = argv

    @property
    def returncode(self) -> int | None:
        """The exit code, once known."""
        return self.client.returncode

    @property
    def pid(self) -> int:
        """The docker client's pid."""
        return self.client.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.client.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code."""
        return self.client.wait(timeout)

    def host_pids(self) -> list[int]:
        """The process (and any child that kept the tag) as the host's /proc sees it."""
        return tagged_pids(self.tag)

    def send_signal(self, sig: int) -> None:
        """Signal the process in the container; the client too when the process cannot be found."""
        pids = self.host_pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if not pids or sig == signal.SIGKILL:
            try:
                self.client.send_signal(sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        """SIGTERM to the process."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the process (a crash, as a fault makes one) and its client."""
        self.send_signal(signal.SIGKILL)


def tagged_pids(tag: str) -> list[int]:
    """Processes whose environment holds INCASTLAB_PROC=<tag>."""
    needle = f"{PROC_TAG}={tag}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# -- the set of a fabric ------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostRuntime:
    """How a fabric's hosts run: as namespaces (netns) or containers (docker), which image each
    container host runs, their limits, and what is mounted in them."""

    runtime: str = "netns"
    why: str = ""
    images: dict[str, str] = field(default_factory=dict)  # host -> image; hosts not named are namespaces
    limits: dict[str, Limits] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()
    python: str = "python3"
    keepalive: tuple[str, ...] = ("sleep", "infinity")

    @property
    def docker(self) -> bool:
        """True when some host is a container."""
        return self.runtime == "docker" and bool(self.images)

    def mounting(self, *paths: Path | str) -> HostRuntime:
        """The same runtime with these host paths (and no others) mounted in every container."""
        return replace(self, mounts=tuple(str(Path(p).resolve()) for p in paths))


class ContainerSet:
    """The containers of one fabric: started together, removed together."""

    def __init__(self, runtime: HostRuntime, run: str) -> None:
        self.runtime = runtime
        self.run = run
        self.containers: dict[str, Container] = {
            host: Container(
                host,
                image,
                run,
                runtime.limits.get(host, Limits()),
                runtime.mounts,
                runtime.python,
                runtime.keepalive,
            )
            for host, image in runtime.images.items()
        }

    def __contains__(self, host: str) -> bool:
        return host in self.containers

    def __getitem__(self, host: str) -> Container:
        return self.containers[host]

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Start every container, a few at a time; the first failure is raised after all tried."""
        errors: list[BaseException] = []
        lock = threading.Lock()
        pending = list(self.containers.values())

        def worker() -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    c = pending.pop(0)
                try:
                    c.start()
                except BaseException as exc:  # noqa: BLE001 - reported below
                    with lock:
                        errors.append(exc)

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(4, len(pending)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        if progress is not None and self.containers:
            images = sorted(set(self.runtime.images.values()))
            progress(
                f"{len(self.containers)} containers up in {time.monotonic() - t0:.1f} s "
                f"({', '.join(images)}; `docker ps --filter label={RUN_LABEL}={self.run}`)"
            )

    def oom_killed(self) -> str | None:
        """One line naming the containers in which the kernel's OOM killer killed a process, with
        their memory limits and the kernel's counts (oom_kills), or None when it killed nothing."""
        hit = [(c, n) for c in self.containers.values() if c.pid and (n := oom_kills(c.pid))]
        if not hit:
            return None
        said = ", ".join(
            f"{c.name} (memory limit {c.limits.memory_mb:g} MiB, oom_kill {n})"
            if c.limits.memory_mb is not None
            else f"{c.name} (oom_kill {n})"
            for c, n in hit
        )
        return f"the kernel's OOM killer killed a process over its container's memory limit in {said}"

    def stop(self) -> None:
        """Remove the run's containers: those started here, and any other carrying the run's label."""
        names = [c.name for c in self.containers.values()]
        names += [c for c in run_containers(self.run) if c not in names]
        remove_containers(names)


def run_containers(run: str | None = None) -> list[str]:
    """Names of the containers (running or not) of a run, or of any incastlab run; [] without dockerd."""
    if docker_bin() is None:
        return []
    label = f"{RUN_LABEL}={run}" if run else RUN_LABEL
    try:
        proc = docker(
            "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}", timeout=10, check=False
        )
    except ImageError:
        return []
    return proc.stdout.split() if proc.returncode == 0 else []


def remove_containers(names: Iterable[str]) -> None:
    """`docker rm -f` in one command (bounded: a hung daemon does not hang the teardown)."""
    names = list(names)
    if not names:
        return
    try:
        docker("rm", "-f", "-v", *names, timeout=30, check=False)
    except ImageError:
        pass


def dangling_images() -> list[str]:
    """Untagged images that incastlab built (what a replaced or interrupted build leaves), by label."""
    if docker_bin() is None:
        return []
    try:
        proc = docker(
            "images",
            "-q",
            "--filter",
            "dangling=true",
            "--filter",
            "label=incastlab.image",
            timeout=10,
            check=False,
        )
    except ImageError:
        return []
    return sorted(set(proc.stdout.split())) if proc.returncode == 0 else []


def remove_images(ids: Iterable[str]) -> None:
    """Remove images by id (only ever called with incastlab's own dangling ones)."""
    ids = list(ids)
    if ids:
        try:
            docker("image", "rm", *ids, timeout=60, check=False)
        except ImageError:
            pass
