"""The `job` strategy: a user's own distributed training command, one container per worker host.

Each worker host is a container of the worker image (the fabric's host, topologies.containers); the
job's container, `incastlab-<host>-job` of the user's image, joins that container's network namespace
(`docker run --network container:incastlab-<host>`), so the job's traffic crosses the fabric from the
host's own interface, under the host's CPU and memory limits. The command gets the environment
`torchrun` gives a one-process-per-node job (RANK, WORLD_SIZE, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1,
GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR = rank 0's host address, MASTER_PORT,
TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS) and GLOO_SOCKET_IFNAME =
the host's fabric interface (and PYTHONUNBUFFERED=1, so a line reaches us when it is printed). Its
stdout and stderr go to worker-<rank>.stdout / .stderr; the moment each `step K` line of its stdout is
read goes to worker-<rank>.step_lines.jsonl.

The folder the user runs `incastlab job` from is mounted read-only at its own path in each job
container and is the command's working directory, so `incastlab job --image IMAGE -- python3
train.py` runs the user's train.py without building an image (the run folder, mounted read-write
too, is where it may write).

The script logs nothing incastlab reads, so after the job its steps are read off each worker's own
capture (analysis.rhythm), cut where its step lines were read when it prints one a step, and written
as the strategy's worker-<rank>.jsonl, with the losses the script printed (lines with
`loss <number>`), so the summary and the report treat it like the built-in strategies.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from incastlab.follow import Tracked
from runmodel.config import ExperimentConfig
from runmodel.folder import StrategyFolder
from runmodel.job import JobSpec
from runmodel.records import JsonlWriter, StepLine, StepRecord, WorkerDone, read_step_lines
from topologies.containers import HOST_LABEL, MARKER, RUN_LABEL, docker_bin, remove_containers
from topologies.processes import stop_processes


def job_container(host: str) -> str:
    """The job's container on a host."""
    return f"incastlab-{host}-job"


def torchrun_env(job: JobSpec, rank: int, run_id: str) -> dict[str, str]:
    """What torchrun sets for a node with one process, plus the interface gloo must use."""
    rj = job.rank(rank)
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(job.world),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": str(job.world),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(job.world),
        "ROLE_NAME": "default",
        "MASTER_ADDR": job.master_addr,
        "MASTER_PORT": str(job.master_port),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "GLOO_SOCKET_IFNAME": rj.ifname,
    }


def copy_lines(pipe: IO[bytes], out: Path, step_lines: Path) -> None:
    """Copy a job's stdout into `out` line by line and note when each `step K` line was read: the
    moment its step ended, which the traffic alone cannot always tell (a DDP step's exchange can
    pause longer inside than between steps)."""
    from analysis.rhythm import STEP_RE

    try:
        with open(out, "wb") as fout, JsonlWriter(step_lines) as said:
            for raw in iter(pipe.readline, b""):
                t = time.time()
                fout.write(raw)
                fout.flush()
                m = STEP_RE.search(raw.decode(errors="replace"))
                if m:
                    said.write(StepLine(int(m.group(1)), t))
    except OSError as exc:  # the run folder took no more: drain the pipe, or the job blocks on a full one
        print(
            f"incastlab: {out.name}: {exc.strerror or exc}; the rest of the job's output is not kept",
            file=sys.stderr,
            flush=True,
        )
        for _ in iter(pipe.readline, b""):
            pass
    finally:
        pipe.close()


class JobProc:
    """One job container's `docker run` (attached: it exits with the command's exit code), handled like
    a Popen; terminate and kill go to the container. Its stdout is copied by a thread (copy_lines)."""

    def __init__(self, argv: list[str], name: str, stdout: Path, step_lines: Path, stderr: Any) -> None:
        self.name = name
        self.client = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
        assert self.client.stdout is not None
        self.copier = threading.Thread(
            target=copy_lines,
            args=(self.client.stdout, stdout, step_lines),
            name=f"stdout-{name}",
            daemon=True,
        )
        self.copier.start()

    def poll(self) -> int | None:
        """The command's exit code, or None while it runs."""
        return self.client.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code (and, briefly, for the rest of its stdout)."""
        code = self.client.wait(timeout)
        self.copier.join(timeout=5)
        return code

    def _docker(self, *args: str) -> None:
        try:
            subprocess.run([docker_bin() or "docker", *args], capture_output=True, timeout=20, check=False)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        """SIGTERM to the command (the container's main process)."""
        self._docker("kill", "--signal", "TERM", self.name)

    def kill(self) -> None:
        """SIGKILL the container, as a crash would, and its client."""
        self._docker("kill", self.name)
        self.client.kill()


class JobLauncher:
    """The job's containers, one per worker host (the Launcher of the built-in strategies' role)."""

    def __init__(
        self,
        fabric: Any,
        folder: StrategyFolder,
        job: JobSpec,
        cfg: ExperimentConfig,
        source: Path | None = None,
    ) -> None:
        self.fabric = fabric
        self.folder = folder
        self.job = job
        self.cfg = cfg
        self.source = (source or Path.cwd()).resolve()  # the user's folder: read-only, the command's cwd
        self.procs: list[Tracked] = []
        self.popens: list[JobProc] = []

    def run_args(self, rank: int) -> list[str]:
        """`docker run` of rank `rank`'s container."""
        rj = self.job.rank(rank)
        host_box = self.fabric.container(rj.host)
        if host_box is None:
            raise RuntimeError(f"{rj.host} is no container: a job needs the docker runtime")
        run = host_box.run
        args = [
            docker_bin() or "docker",
            "run",
            "--rm",
            "--name",
            job_container(rj.host),
            "--network",
            f"container:{host_box.name}",
            "--label",
            f"{RUN_LABEL}={run}",
            "--label",
            f"{HOST_LABEL}={rj.host}",
            "-e",
            f"{MARKER}={run}",
            "-e",
            f"INCASTLAB_OUT={self.folder.path}",
            "-e",
            "PYTHONUNBUFFERED=1",
            *host_box.limits.docker_args(),
        ]
        for k, v in torchrun_env(self.job, rank, f"incastlab-{self.folder.name}").items():
            args += ["-e", f"{k}={v}"]
        for m in host_box.mounts:
            args += ["-v", f"{m}:{m}"]
        if self.source != Path("/"):  # never the container's own root
            args += ["-v", f"{self.source}:{self.source}:ro", "-w", str(self.source)]
        return args + [self.cfg.job_image, *self.cfg.job_command]

    def start(self) -> list[Tracked]:
        """job.json (for the record), then every rank's container."""
        self.job.write(self.folder.job_file)
        for rj in self.job.ranks:
            err = self.folder.worker_stderr(rj.rank)
            name = job_container(rj.host)
            with open(err, "wb") as ferr:
                proc = JobProc(
                    self.run_args(rj.rank),
                    name,
                    self.folder.worker_stdout(rj.rank),
                    self.folder.step_lines(rj.rank),
                    ferr,
                )
            self.popens.append(proc)
            self.procs.append(Tracked("worker", rj.rank, rj.host, proc, err, container=name))
        return self.procs

    def running(self) -> bool:
        """True once docker lists every rank's container (`docker run` returns before it exists)."""
        proc = subprocess.run(
            [docker_bin() or "docker", "ps", "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        listed = set(proc.stdout.split())
        return all(p.name in listed for p in self.popens)

    def kill_worker(self, rank: int) -> bool:
        """SIGKILL one rank's container (the kill-worker fault)."""
        for p, proc in zip(self.procs, self.popens, strict=True):
            if p.rank == rank and proc.poll() is None:
                proc.kill()
                return True
        return False

    def stop(self) -> None:
        """Stop the containers still running; then none of the job's containers is left."""
        stop_processes(self.popens, kill_wait=10)
        for proc in self.popens:  # those that ended by themselves: their last lines, before write_steps
            proc.copier.join(timeout=5)
        remove_containers([proc.name for proc in self.popens])

    def steps_done(self) -> dict[int, int]:
        """Steps are known only after the job (from its traffic): none while it runs."""
        return {}

    def write_steps(self, plan: Any) -> dict[int, int]:
        """Each rank's steps read off its host's capture, as worker-<rank>.jsonl; returns steps per rank."""
        from analysis.rhythm import loss_for, losses_from_output, steps_from_output, steps_of_job

        found = {}
        outs = []
        for rj in self.job.ranks:
            try:
                outs.append(self.folder.worker_stdout(rj.rank).read_text(errors="replace"))
            except OSError:
                outs.append("")
        said = [n for n in map(steps_from_output, outs) if n]  # a script that prints a line a step
        lines = [
            [(sl.step, sl.t) for sl in read_step_lines(self.folder.step_lines(rj.rank))]
            for rj in self.job.ranks
        ]
        every = steps_of_job(
            [(self.folder.pcap(rj.host), plan.host(rj.host).ip) for rj in self.job.ranks],
            n_steps=max(said, key=said.count) if said else None,
            step_lines=lines,
        )
        for rj, steps, out in zip(self.job.ranks, every, outs, strict=True):
            losses = losses_from_output(out)
            with JsonlWriter(self.folder.worker_log(rj.rank)) as log:
                for st in steps:
                    log.write(
                        StepRecord(
                            rj.rank,
                            self.job.strategy,
                            st.step,
                            st.t_start,
                            st.t_end,
                            st.compute_s,
                            st.comm_s,
                            0.0,
                            st.bytes_sent,
                            st.bytes_recv,
                            loss_for(st.step, losses),
                            0,
                        )
                    )
                log.write(WorkerDone(rj.rank, len(steps)))
            found[rj.rank] = len(steps)
        return found
