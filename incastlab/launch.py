"""Launching one strategy's training processes in their Mininet hosts, and stopping them.

Every process reads the strategy's job.json (runmodel.job) and gets only its rank on the command
line; stdout goes nowhere (results are in the logs), stderr to <strategy>/<name>.stderr. Where the
hosts are containers, each process runs in its host's container (Fabric.workload_popen).
"""

from __future__ import annotations

import subprocess
from typing import Any

from incastlab.follow import Tracked
from runmodel.folder import StrategyFolder
from runmodel.job import JobSpec
from topologies.processes import stop_processes


class Launcher:
    """The PS (PS family) and the workers of one job, each in its own host."""

    def __init__(self, fabric: Any, folder: StrategyFolder, job: JobSpec) -> None:
        self.fabric = fabric
        self.folder = folder
        self.job = job
        self.procs: list[Tracked] = []
        self.popens: list[subprocess.Popen[bytes]] = []  # aligned with procs

    def _start(self, role: str, rank: int, host: str, module: str, extra: list[str]) -> None:
        err = self.folder.shard_stderr(rank) if role == "ps" else self.folder.worker_stderr(rank)
        args = ["-u", "-m", module, "--job", str(self.folder.job_file), *extra]
        with open(err, "wb") as ferr:
            popen = self.fabric.workload_popen(host, args, stdout=subprocess.DEVNULL, stderr=ferr)
        box = self.fabric.container(host)
        self.procs.append(Tracked(role, rank, host, popen, err, container=box.name if box else None))
        self.popens.append(popen)

    def start(self) -> list[Tracked]:
        """Write job.json, start the PS (if any), then every worker."""
        self.job.write(self.folder.job_file)
        for shard in self.job.shards:
            self._start("ps", shard.index, shard.host, "workloads.ps", ["--shard", str(shard.index)])
        for rj in self.job.ranks:
            self._start("worker", rj.rank, rj.host, self.job.spec.module, ["--rank", str(rj.rank)])
        return self.procs

    def kill_worker(self, rank: int) -> bool:
        """SIGKILL one worker, as a crash would; False if it was not running."""
        for p, popen in zip(self.procs, self.popens, strict=True):
            if p.role == "worker" and p.rank == rank and popen.poll() is None:
                popen.kill()
                return True
        return False

    def stop(self) -> None:
        """Terminate whatever still runs (after a failure or an interrupt); SIGKILL after a grace."""
        stop_processes(self.popens)

    def steps_done(self) -> dict[int, int]:
        """Steps each worker has logged so far."""
        from runmodel.records import read_worker_log

        return {
            rj.rank: len(read_worker_log(self.folder.worker_log(rj.rank), rj.rank).steps)
            for rj in self.job.ranks
        }
