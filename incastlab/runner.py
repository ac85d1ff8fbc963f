"""The experiment runner: the same workers, one strategy after the other, on one fabric.

For each strategy: start the measurements (record.py), launch the real PyTorch processes in their
Mininet hosts (launch.py), follow them until they finish or one fails (follow.py), fire the
faults (faults.py), stop everything and save what was measured. Everything lands in the run folder
as it is produced; the summary and the report are computed from those files afterwards, so they
can be rebuilt from a saved run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from incastlab.faults import FaultInjector
from incastlab.follow import ExperimentError, Follower
from incastlab.launch import Launcher
from incastlab.record import Recorder
from incastlab.session import Session
from runmodel.config import ExperimentConfig, StrategySpec
from runmodel.folder import RunFolder, StrategyFolder
from runmodel.job import job_for
from runmodel.records import Status, write_json
from runmodel.strategy import JOB

__all__ = ["ExperimentError", "StrategyRun", "run_experiment"]
POLL_S = 0.5


class StrategyRun:
    """One strategy's processes, measurements and records in <run>/<strategy>/."""

    def __init__(
        self,
        session: Session,
        cfg: ExperimentConfig,
        spec: StrategySpec,
        folder: StrategyFolder,
        index: int,
        say: Callable[[str], None],
    ) -> None:
        self.s = session
        self.cfg = cfg
        self.spec = spec
        self.strategy = spec.name
        self.folder = folder
        self.say = say
        self.job = job_for(cfg, session.plan, spec, index, folder)
        servers = [k.host for k in self.job.shards if k.host not in cfg.worker_hosts]
        self.recorder = Recorder.for_strategy(session, cfg, folder, servers + cfg.worker_hosts, say)
        if spec.kind == JOB:  # the user's own command in containers of the user's image
            from incastlab.userjob import JobLauncher

            self.launcher: Launcher | JobLauncher = JobLauncher(
                session.fabric, folder, self.job, cfg, Path(cfg.job_dir) if cfg.job_dir else None
            )
        else:
            self.launcher = Launcher(session.fabric, folder, self.job)
        self.follower: Follower | None = None
        self.injector: FaultInjector | None = None

    def _kill_worker(self, rank: int) -> bool:
        if self.follower is not None:
            self.follower.mark_killed(rank, f"kill-worker:{rank}")
        return self.launcher.kill_worker(rank)

    def _phase(self, **kw: object) -> None:
        self.s.controller.set_phase(strategy=self.strategy, steps=self.cfg.steps, **kw)

    def _follow(self) -> None:
        """Progress lines and phase until every process is done; ExperimentError on a failure."""
        assert self.follower is not None
        deadline = time.monotonic() + self.cfg.run_timeout
        shown = None
        while True:
            check = self.follower.check()
            if self.injector is not None:
                self.injector.tick(check.done)
            for loss in check.new_losses:
                self.say(
                    f"{self.strategy}: {loss.proc.label} {loss.why} at step {loss.step}; "
                    f"training goes on with {self.cfg.n_workers - len(self.follower.lost)} workers"
                )
            if self.spec.kind == JOB:
                if shown is None and self.launcher.running():  # type: ignore[union-attr]
                    # its steps are known only afterwards, from its traffic
                    shown = (0, 0)
                    self.say(
                        f"{self.strategy}: {self.cfg.n_workers} containers running `"
                        f"{' '.join(self.cfg.job_command)}`"
                    )
                    self._phase(state="running", step=0, fastest=0)
            elif check.done and (check.slowest, check.fastest) != shown:
                shown = (check.slowest, check.fastest)
                ahead = f" (fastest at {check.fastest})" if check.fastest != check.slowest else ""
                self.say(f"{self.strategy}: step {check.slowest}/{self.cfg.steps}{ahead}")
                self._phase(state="running", step=check.slowest, fastest=check.fastest)
            if check.finished:
                return
            if time.monotonic() > deadline:
                raise ExperimentError(
                    f"{self.strategy}: not finished after {self.cfg.run_timeout:.0f} s "
                    f"(workers at steps {check.done})"
                )
            time.sleep(POLL_S)

    def _job_steps(self) -> None:
        """The job's steps, read off its workers' captures once they are closed."""
        try:
            found = self.launcher.write_steps(self.s.plan)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - the run's other records stay
            self.say(f"{self.strategy}: could not read the steps off the captures: {exc}")
            return
        counts = sorted(set(found.values()))
        self.say(f"{self.strategy}: {'/'.join(map(str, counts))} steps per worker, read off their traffic")

    def _tcp(self) -> tuple[str, float | None]:
        """The congestion control and minimum RTO this variant runs with."""
        return self.spec.cc or self.cfg.cc, self.spec.rto_min_ms

    def run(self) -> Status:
        """Run the strategy; always leaves status.json saying how it ended."""
        self.folder.path.mkdir(parents=True, exist_ok=True)
        self.folder.write_status(Status("running"))
        special = self.spec.cc is not None or self.spec.rto_min_ms is not None
        if special:  # this variant's TCP in every host, for this strategy only
            self.s.set_tcp(*self._tcp())
        tcp = self.s.host_tcp()
        self._phase(state="starting", step=0)
        state, error, interrupted = "incomplete", None, False
        t_start = t_end = time.time()
        try:
            self.recorder.start()
            t_start = time.time()
            faults = self.cfg.parsed_faults()
            if faults:
                self.injector = FaultInjector(
                    faults,
                    self.folder.faults_file,
                    self._kill_worker,
                    self.s.controller,
                    self.say,
                    set_cpu=self.s.fabric.set_cpu,
                )
                self.injector.start()
            procs = self.launcher.start()
            self.follower = Follower(
                self.strategy,
                procs,
                self.launcher.steps_done,
                carry_on_without_workers=self.spec.kind == "async",
            )
            self._follow()
            state = "complete"
        except ExperimentError as exc:
            # cut short by the machine (OVS died, disk full, the OOM killer): incomplete, with the cause
            if (fault := self.s.host_cause(exc)) is not None:
                state, error = "incomplete", str(fault)
                if fault is not exc:
                    raise fault from exc
                raise
            state, error = "failed", str(exc)
            raise
        except KeyboardInterrupt:
            state, error, interrupted = "incomplete", "interrupted", True
            raise
        finally:
            t_end = time.time()
            self.launcher.stop()
            if self.injector is not None:
                self.injector.finish()
                # a controller fault must not outlive its strategy (after Ctrl-C, teardown follows)
                if not interrupted and not self.s.controller.alive():
                    self.s.controller.start()
            self.recorder.stop(t_start, t_end)
            if self.spec.kind == JOB:
                self._job_steps()
            if special:
                self.s.restore_tcp(rto_changed=self.spec.rto_min_ms is not None)
            lost = self.follower.lost if self.follower is not None else {}
            status = Status(state, error, t_start, t_end, {str(r): w for r, w in lost.items()}, tcp)
            self.folder.write_status(status)
            self._phase(state="done" if state == "complete" else state, step=None)
        return status


def run_experiment(
    session: Session, cfg: ExperimentConfig, folder: RunFolder, say: Callable[[str], None]
) -> dict[str, Status]:
    """Every strategy of the config, one after the other; returns how each ended.

    A failing strategy ends the experiment (its ExperimentError propagates) after its records are
    saved; the strategies before it keep theirs.
    """
    outcomes: dict[str, Status] = {}
    write_json(folder.topology_file, session.controller.get("/api/topology"))
    specs = cfg.strategy_specs
    for k, spec in enumerate(specs):
        say(f"{spec.name}: starting {spec.hosts or cfg.n_workers} workers ({k + 1}/{len(specs)} strategies)")
        status = StrategyRun(session, cfg, spec, folder.strategy(spec.name), k, say).run()
        outcomes[spec.name] = status
        say(f"{spec.name}: done in {(status.t_end or 0) - (status.t_start or 0):.1f} s")
    return outcomes
