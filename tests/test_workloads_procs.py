"""End-to-end tests of the workload processes on 127.0.0.1: real `python -m workloads.*` subprocesses."""

from __future__ import annotations

import dataclasses
import re
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from runmodel.config import ExperimentConfig
from runmodel.folder import RunFolder
from runmodel.job import JobSpec, job_for
from runmodel.records import read_jsonl
from tests.conftest import one_line
from tests.procs import free_port
from tests.waiting import wait_for
from workloads.model import ModelSpec, init_weights, loss_and_grad, make_batch, shard_bounds
from workloads.psproto import HEADER, Header, Kind, recv_f32, recv_header, send_msg

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[1]
WORLD = 3
GRAD_MB = 0.05
SEED = 3
LR = 2.0
BATCH = 32
STEP_KEYS = {
    "rank",
    "strategy",
    "step",
    "t_start",
    "t_end",
    "compute_s",
    "comm_s",
    "wait_s",
    "bytes_sent",
    "bytes_recv",
    "loss",
    "samples",
}
PS_FAMILY = ("ps", "async", "ssp", "backup")
GUARD_S = 180  # only a hang guard; nothing asserts on durations
# Job's figures that are ExperimentConfig fields of the same name (the job is the config's job_for)
CONFIG_FIGURES = ("steps", "grad_mb", "batch", "lr", "compute_ms", "staleness", "backup")


def spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", *args], cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@dataclass
class Job:
    """A PS (PS family only) plus WORLD workers on 127.0.0.1, logging into one folder.

    Each process reads a job.json as the runner writes it; `worker_timeout` gives some workers a
    job file of their own with a longer timeout than the PS's (to see who names a failure).
    """

    strategy: str
    folder: Path
    steps: int
    timeout: float = 30.0
    batch: int = BATCH
    lr: float = LR
    compute_ms: float = 0.0
    staleness: int = 2
    backup: int = 1
    slow: dict[int, tuple[int, float]] = field(default_factory=dict)  # rank -> (slow_every, factor)
    worker_timeout: dict[int, float] = field(default_factory=dict)
    shards: int = 1
    grad_mb: float = GRAD_MB
    pull: str = "all"
    ps_flags: dict[int, list[str]] = field(default_factory=dict)  # shard -> extra flags
    worker_flags: dict[int, list[str]] = field(default_factory=dict)
    servers: list[subprocess.Popen[str]] = field(default_factory=list)
    workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def worker_log(self, rank: int) -> Path:
        return self.folder / f"worker-{rank}.jsonl"

    @property
    def ps_log(self) -> Path:
        return self.folder / "ps.jsonl"

    @property
    def ps(self) -> subprocess.Popen[str] | None:
        return self.servers[0] if self.servers else None

    @property
    def variant(self) -> str:
        """The strategy's name with this job's options, as --strategies would take it."""
        opts = [f"shards={self.shards}"] * (self.shards > 1) + [f"pull={self.pull}"] * (self.pull != "all")
        return ":".join([self.strategy, *opts])

    def spec(self, ports: list[int], timeout: float) -> JobSpec:
        """The job the runner would hand out for these figures (the config's own job_for), moved
        onto loopback: ranks on lo with their logs in `folder` and the test's slow ranks, the PS
        shards at 127.0.0.1 on `ports` (ports[0] also gloo's meeting point)."""
        figures = {name: getattr(self, name) for name in CONFIG_FIGURES}
        cfg = ExperimentConfig(
            strategies=(self.variant,), workers=WORLD, seed=SEED, timeout=timeout, **figures
        )
        cfg.validate()
        strategy = cfg.strategy_specs[0]
        job = job_for(cfg, cfg.plan(), strategy, 0, RunFolder(self.folder).strategy(strategy.name))
        ranks = []
        for r in job.ranks:
            every, factor = self.slow.get(r.rank, (0, 1.0))
            log = str(self.worker_log(r.rank))
            ranks.append(dataclasses.replace(r, ifname="lo", slow_every=every, slow_factor=factor, log=log))
        logs = [self.ps_log] + [self.folder / f"ps-{k}.jsonl" for k in range(1, len(job.shards))]
        shards = tuple(
            dataclasses.replace(sh, addr="127.0.0.1", port=ports[k], log=str(logs[k]))
            for k, sh in enumerate(job.shards)
        )
        return dataclasses.replace(
            job,
            master_addr="127.0.0.1",
            master_port=ports[0],
            ps_bind="127.0.0.1",
            ranks=tuple(ranks),
            shards=shards,
        )

    def start(self) -> Job:
        self.folder.mkdir(parents=True, exist_ok=True)
        ports = [free_port() for _ in range(self.shards)]
        files = {}
        for t in {self.timeout, *self.worker_timeout.values()}:
            files[t] = self.folder / f"job-{t:g}.json"
            self.spec(ports, t).write(files[t])
        main = files[self.timeout]
        if self.strategy in PS_FAMILY:
            self.servers = [
                spawn(["workloads.ps", "--job", str(main), "--shard", str(k), *self.ps_flags.get(k, [])])
                for k in range(self.shards)
            ]
        for r in range(WORLD):
            job_file = files[self.worker_timeout.get(r, self.timeout)]
            self.workers.append(
                spawn(
                    [
                        "workloads.worker",
                        "--job",
                        str(job_file),
                        "--rank",
                        str(r),
                        *self.worker_flags.get(r, []),
                    ]
                )
            )
        return self

    def procs(self) -> list[subprocess.Popen[str]]:
        return self.servers + self.workers

    def finish(self) -> list[tuple[int, str, str]]:
        """(exit code, stdout, stderr) of every process, PS first."""
        out = []
        for p in self.procs():
            try:
                o, e = p.communicate(timeout=GUARD_S)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
            out.append((p.returncode, o, e))
        return out

    def kill(self) -> None:
        for p in self.procs():
            if p.poll() is None:
                p.kill()
                p.communicate()

    def losses(self) -> np.ndarray:
        """[rank, step] training loss from the worker logs."""
        logs = [read_jsonl(self.worker_log(k)) for k in range(WORLD)]
        return np.array([[r["loss"] for r in log if "loss" in r] for log in logs])


def run_ok(job: Job) -> Job:
    results = job.start().finish()
    for code, out, err in results:
        assert (code, out, err) == (0, "", ""), f"{job.strategy}: exit {code}, stderr {err!r}"
    return job


def local_step0_average() -> torch.Tensor:
    spec = ModelSpec.from_grad_mb(GRAD_MB)
    w = init_weights(spec, SEED)
    grads = [loss_and_grad(spec, w, *make_batch(spec, SEED, r, 0, BATCH))[1] for r in range(WORLD)]
    return torch.stack(grads).mean(dim=0)


@pytest.fixture(scope="module")
def sync_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Job]:
    """One short run of each synchronous strategy, with step 0's averaged gradient dumped."""
    base = tmp_path_factory.mktemp("sync")
    jobs = {}
    for strategy, shards in (("ps", 1), ("ring", 1), ("allreduce", 1), ("ps", 3)):
        name = strategy if shards == 1 else f"{strategy}:shards={shards}"
        folder = base / name.replace(":", "_")
        job = Job(strategy, folder, steps=5, shards=shards)
        if strategy == "ps":
            job.ps_flags = {k: ["--dump-grad", str(folder / f"grad-ps-{k}.npy")] for k in range(shards)}
        else:
            job.worker_flags = {r: ["--dump-grad", str(folder / f"grad-{r}.npy")] for r in range(WORLD)}
        jobs[name] = run_ok(job)
    return jobs


@pytest.mark.parametrize("strategy", ["ps", "ring", "allreduce", "ps:shards=3"])
def test_exchange_produces_the_local_average_gradient(sync_jobs: dict[str, Job], strategy: str) -> None:
    job = sync_jobs[strategy]
    expected = local_step0_average()
    assert expected.abs().max() > 0
    if job.strategy == "ps":  # the shards' slices, in order, are the whole averaged gradient
        dumps = [job.folder / f"grad-ps-{k}.npy" for k in range(job.shards)]
        grads = [torch.cat([torch.from_numpy(np.load(d)) for d in dumps])]
        bounds = shard_bounds(expected.numel(), job.shards)
        assert [np.load(d).size for d in dumps] == [b - a for a, b in bounds]
    else:
        grads = [torch.from_numpy(np.load(job.folder / f"grad-{r}.npy")) for r in range(WORLD)]
    for got in grads:
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-7), f"{strategy} differs"


def test_ps_ring_allreduce_and_a_sharded_ps_reach_the_same_losses(sync_jobs: dict[str, Job]) -> None:
    ps, ring, allreduce, sharded = (sync_jobs[s].losses() for s in ("ps", "ring", "allreduce", "ps:shards=3"))
    assert ps.shape == (WORLD, 5)
    assert np.allclose(ps, ring, rtol=1e-4) and np.allclose(ps, allreduce, rtol=1e-4)
    assert np.allclose(ps, sharded, rtol=1e-5)
    assert ps[:, -1].mean() < ps[:, 0].mean()  # and they actually trained


@pytest.mark.parametrize("strategy", ["ps", "ring", "allreduce"])
def test_worker_log_has_design_fields_and_ends_with_done(sync_jobs: dict[str, Job], strategy: str) -> None:
    job = sync_jobs[strategy]
    grad_bytes = ModelSpec.from_grad_mb(GRAD_MB).grad_bytes
    for r in range(WORLD):
        recs = read_jsonl(job.worker_log(r))
        assert recs[-1] == {"event": "done", "rank": r, "steps": 5}
        steps = recs[:-1]
        assert [s["step"] for s in steps] == list(range(5))
        for s in steps:
            assert set(s) == STEP_KEYS
            assert s["rank"] == r and s["strategy"] == strategy and s["samples"] == BATCH
            assert s["t_start"] <= s["t_end"] and 0 <= s["wait_s"] <= s["comm_s"]
            if strategy == "ps":
                assert s["bytes_sent"] == s["bytes_recv"] == grad_bytes + HEADER.size
            else:
                assert s["bytes_sent"] > 0 and s["bytes_recv"] > 0


def test_sync_ps_log_applies_every_worker_every_step(sync_jobs: dict[str, Job]) -> None:
    recs = read_jsonl(sync_jobs["ps"].ps_log)
    assert recs[-1]["event"] == "done"
    steps = [r for r in recs if r["event"] == "step"]
    assert [s["step"] for s in steps] == list(range(5))
    assert all(sorted(s["applied"]) == list(range(WORLD)) and s["discarded"] == [] for s in steps)
    updates = [r for r in recs if r["event"] == "update"]
    assert len(updates) == 5 * WORLD and all(u["applied"] and u["staleness"] == 0 for u in updates)


# --- asynchronous family ------------------------------------------------------------------------
STRAGGLER = {2: (2, 20.0)}


def _loss_went_down(job: Job) -> None:
    losses = job.losses()
    assert losses.shape == (WORLD, job.steps)
    assert losses[:, -2:].mean() < losses[:, :2].mean()


def test_async_applies_every_gradient_and_loss_decreases(tmp_path: Path) -> None:
    steps = 8
    job = run_ok(Job("async", tmp_path, steps=steps, batch=64, slow=STRAGGLER))
    _loss_went_down(job)
    updates = [r for r in read_jsonl(job.ps_log) if r["event"] == "update"]
    assert len(updates) == WORLD * steps and all(u["applied"] for u in updates)
    assert [u["version"] for u in updates] == list(range(WORLD * steps))  # one version per gradient
    for r in range(WORLD):
        mine = [u for u in updates if u["worker"] == r]
        assert [u["worker_step"] for u in mine] == list(range(steps))
        assert all(0 <= u["staleness"] <= u["version"] for u in mine)


@pytest.mark.parametrize("bound", [0, 1])
def test_ssp_gap_never_exceeds_bound_and_loss_decreases(tmp_path: Path, bound: int) -> None:
    steps = 8
    job = run_ok(Job("ssp", tmp_path, steps=steps, batch=64, staleness=bound, slow=STRAGGLER))
    _loss_went_down(job)
    recs = read_jsonl(job.ps_log)
    releases = [r for r in recs if r["event"] == "release"]
    assert len(releases) == WORLD * (steps - 1)  # every reply that starts a new step is accounted for
    assert all(r["gap"] == r["next_step"] - r["slowest"] <= bound for r in releases)
    # Cross-check from the workers' own clocks: before a worker starts step c, every other worker
    # must have pushed step c-bound-1, so it started that step earlier.
    starts = {r: [s["t_start"] for s in read_jsonl(job.worker_log(r)) if "step" in s] for r in range(WORLD)}
    for r in range(WORLD):
        for c in range(bound + 1, steps):
            for other in range(WORLD):
                assert starts[other][c - bound - 1] <= starts[r][c]


def test_backup_drops_exactly_b_per_step_and_loss_decreases(tmp_path: Path) -> None:
    steps, b = 8, 1
    job = run_ok(Job("backup", tmp_path, steps=steps, batch=64, backup=b, slow=STRAGGLER))
    _loss_went_down(job)
    recs = read_jsonl(job.ps_log)
    step_ev = [r for r in recs if r["event"] == "step"]
    assert [s["step"] for s in step_ev] == list(range(steps))
    for s in step_ev:
        assert len(s["applied"]) == WORLD - b and len(s["discarded"]) == b
        assert sorted(s["applied"] + s["discarded"]) == list(range(WORLD))
    updates = [r for r in recs if r["event"] == "update"]
    assert len(updates) == WORLD * steps  # every worker pushed every step, each one logged
    applied = [u for u in updates if u["applied"]]
    assert len(applied) == (WORLD - b) * steps
    by_step = {s["step"]: s for s in step_ev}
    for u in applied:  # applied gradients are exactly the ones the step names, in arrival order
        assert u["worker"] in by_step[u["version"]]["applied"]
    for s in step_ev:
        order = [u["worker"] for u in applied if u["version"] == s["step"]]
        assert order == s["applied"]


# --- failures -----------------------------------------------------------------------------------
def _wait_for_lines(path: Path, n: int, procs: list[subprocess.Popen[str]]) -> None:
    def logged() -> bool:
        assert all(p.poll() is None for p in procs), "a process exited before the failure was injected"
        return path.exists() and len(read_jsonl(path)) >= n

    wait_for(logged, GUARD_S, f"{path} to reach {n} lines")


@pytest.mark.parametrize("strategy", ["ps", "ring", "ssp", "backup"])
def test_killed_worker_makes_the_others_fail_with_one_line(tmp_path: Path, strategy: str) -> None:
    job = Job(strategy, tmp_path, steps=10**6, timeout=10).start()
    try:
        _wait_for_lines(job.worker_log(1), 3, job.procs())
        job.workers[1].send_signal(signal.SIGKILL)
        results = job.finish()
    finally:
        job.kill()
    offset = 1 if job.ps else 0
    if job.ps:
        code, out, err = results[0]
        assert code != 0 and out == ""
        line = one_line(err)
        assert line.startswith("parameter server") and "worker 1" in line
    for r in (0, 2):
        code, out, err = results[offset + r]
        assert code != 0 and out == ""
        line = one_line(err)
        assert line.startswith(f"worker {r}: ")
        assert ("parameter server" in line) if job.ps else ("ring all-reduce" in line)
    # what was logged before the failure is intact
    assert len(read_jsonl(job.worker_log(0))) >= 3


def test_hung_worker_is_named_by_the_ps_after_timeout(tmp_path: Path) -> None:
    # synchronous: the step cannot complete, so the PS fails; the others wait longer than it does
    patient = {r: 60.0 for r in (0, 2)}
    job = Job("ps", tmp_path, steps=10**6, timeout=4, worker_timeout=patient).start()
    try:
        _wait_for_lines(job.worker_log(1), 3, job.procs())
        job.workers[1].send_signal(signal.SIGSTOP)
        assert job.ps is not None
        job.ps.wait(timeout=GUARD_S)
        _, err = job.ps.communicate()
        assert job.ps.returncode != 0
        line = one_line(err)
        assert "worker 1" in line and "sent nothing" in line
        for r in (0, 2):
            job.workers[r].wait(timeout=GUARD_S)
            assert job.workers[r].returncode != 0
    finally:
        job.workers[1].send_signal(signal.SIGKILL)
        job.kill()


# --- async goes on without a lost worker --------------------------------------------------------
LOST = 2
PACED_MS = 150.0  # a sleep per step: slow enough to act mid-run, costs no CPU
LOST_LINE = re.compile(
    rf"parameter server: worker {LOST} lost at step (\d+) \(([^()]+)\); "
    rf"async training goes on with {WORLD - 1} workers"
)


Result = tuple[int, str, str]


def _check_async_went_on(job: Job, ps_result: Result, others: list[Result]) -> dict:
    """The others finished every step, the PS exited 0 and logged and said exactly one loss."""
    code, out, err = ps_result
    assert (code, out) == (0, ""), f"PS exit {code}, stderr {err!r}"
    m = LOST_LINE.fullmatch(one_line(err))
    assert m, err
    last_step_end = []
    for r, (code, out, err) in zip((r for r in range(WORLD) if r != LOST), others, strict=True):
        assert (code, out, err) == (0, "", ""), f"worker {r}: exit {code}, stderr {err!r}"
        recs = read_jsonl(job.worker_log(r))
        assert recs[-1] == {"event": "done", "rank": r, "steps": job.steps}
        assert [x["step"] for x in recs[:-1]] == list(range(job.steps))
        last_step_end.append(recs[-2]["t_end"])
    recs = read_jsonl(job.ps_log)
    lost = [x for x in recs if x["event"] == "worker_lost"]
    assert len(lost) == 1 and lost[0]["worker"] == LOST
    ev = lost[0]
    assert set(ev) == {"event", "t", "worker", "worker_step", "reason"} and ev["reason"] == m.group(2)
    assert int(m.group(1)) == ev["worker_step"] + 1  # stderr: the step it was in; log: the last it pushed
    assert ev["worker_step"] >= 1  # it had logged two steps, so it had pushed them
    assert min(last_step_end) > ev["t"]  # the others were still training when it was dropped
    assert recs[-1]["event"] == "done" and recs[-1]["lost"] == [LOST] and recs[-1]["workers"] == WORLD
    updates = [x for x in recs if x["event"] == "update"]
    assert [u["worker_step"] for u in updates if u["worker"] == LOST] == list(range(ev["worker_step"] + 1))
    for r in range(WORLD):
        if r != LOST:
            assert [u["worker_step"] for u in updates if u["worker"] == r] == list(range(job.steps))
    return ev


def test_async_trains_on_without_a_killed_worker(tmp_path: Path) -> None:
    job = Job("async", tmp_path, steps=12, compute_ms=PACED_MS).start()
    try:
        _wait_for_lines(job.worker_log(LOST), 2, job.procs())
        job.workers[LOST].send_signal(signal.SIGKILL)
        results = job.finish()
    finally:
        job.kill()
    assert results[1 + LOST][0] == -signal.SIGKILL
    ev = _check_async_went_on(job, results[0], [x for r, x in enumerate(results[1:]) if r != LOST])
    assert ev["reason"] in ("connection closed", "connection reset", "broken pipe")


def test_async_drops_a_hung_worker_after_timeout_and_trains_on(tmp_path: Path) -> None:
    # the PS gives up on it after 3 s, while the others (patient themselves) have ~6 s of steps to go
    patient = {r: 60.0 for r in range(WORLD) if r != LOST}
    job = Job("async", tmp_path, steps=40, timeout=3, compute_ms=PACED_MS, worker_timeout=patient).start()
    hung = job.workers[LOST]
    try:
        _wait_for_lines(job.worker_log(LOST), 2, job.procs())
        hung.send_signal(signal.SIGSTOP)
        assert job.ps is not None
        others = [p for r, p in enumerate(job.workers) if r != LOST]
        results = []
        for p in [job.ps, *others]:
            o, e = p.communicate(timeout=GUARD_S)
            results.append((p.returncode, o, e))
        hung.send_signal(signal.SIGCONT)  # it finds its connection gone and fails with one line
        _, err = hung.communicate(timeout=GUARD_S)
    finally:
        hung.send_signal(signal.SIGKILL)
        job.kill()
    ev = _check_async_went_on(job, results[0], results[1:])
    assert ev["reason"] == "sent nothing for 3 s"
    assert hung.returncode not in (None, 0)
    assert one_line(err).startswith(f"worker {LOST}: ") and "parameter server" in err


def test_serial_replies_blame_only_the_worker_that_stops_reading(tmp_path: Path) -> None:
    """async:pull=serial: worker 0 pushes and then reads nothing, so the PS's one sender blocks on its
    model (16 MB, more than the sockets hold) while the models of workers 1 and 2 wait behind it. After
    the timeout the PS must drop worker 0 only, and 1 and 2 must still get their models: their wait
    was the PS's, not a hang of theirs. Workers 1 and 2 read at once, as real workers do: the PS
    answers them in the order their pushes reached it, which is not always the order they were sent
    (under CI load 2's came first, and a test reading 1 first left 2 unread until the PS dropped it)."""
    job = Job("async", tmp_path, steps=1, timeout=10, grad_mb=16, pull="serial")
    job.folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    job.spec([port], job.timeout).write(tmp_path / "job.json")
    nparams = ModelSpec.from_grad_mb(job.grad_mb).nparams
    job.servers = [spawn(["workloads.ps", "--job", str(tmp_path / "job.json"), "--shard", "0"])]
    socks: list[socket.socket] = []
    try:

        def connect(rank: int) -> socket.socket:
            s = socket.socket()
            if rank == 0:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
            wait_for(lambda: s.connect_ex(("127.0.0.1", port)) == 0, 30, "the PS listening")
            s.settimeout(60)
            send_msg(s, Header(Kind.HELLO, rank=rank, arg=nparams))
            return s

        socks = [connect(r) for r in range(WORLD)]
        welcome = [recv_header(s) for s in socks]
        assert [h.kind for h in welcome] == [Kind.WELCOME] * WORLD
        grad = np.zeros(nparams, dtype=np.float32)

        def push(rank: int) -> None:
            send_msg(
                socks[rank],
                Header(Kind.PUSH, rank=rank, step=0, version=welcome[rank].version),
                memoryview(grad).cast("B"),
            )

        push(0)

        def reply_to_0_started() -> bool:
            try:
                return len(socks[0].recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)) > 0
            except BlockingIOError:
                return False

        wait_for(reply_to_0_started, 30, "the PS's reply to worker 0 to begin")
        push(1)
        push(2)

        def read_model_and_leave(rank: int) -> int:
            h = recv_header(socks[rank])
            assert h.kind == Kind.WEIGHTS and h.rank == rank, h
            size = recv_f32(socks[rank], h).size
            send_msg(socks[rank], Header(Kind.BYE, rank=rank, version=h.version))
            return size

        with ThreadPoolExecutor(2) as pool:
            sizes = list(pool.map(read_model_and_leave, (1, 2)))
        assert sizes == [nparams, nparams]
        _, err = job.servers[0].communicate(timeout=GUARD_S)
    finally:
        for s in socks:
            s.close()
        job.kill()
    assert job.servers[0].returncode == 0, err
    lost = [x for x in read_jsonl(job.ps_log) if x["event"] == "worker_lost"]
    assert [(x["worker"], x["reason"]) for x in lost] == [(0, "sent nothing for 10 s")], err
