"""Containers as hosts, the worker image, the cpu fault and steps read off traffic: the pure parts."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from analysis import rhythm
from incastlab.follow import Follower, Tracked
from incastlab.userjob import job_container, torchrun_env
from runmodel.config import ExperimentConfig, Straggler
from runmodel.fabric import FabricSpec, build_plan
from runmodel.faults import parse_fault
from runmodel.params import ParamError
from tests.test_follow_unit import Polled
from topologies import containers, image
from topologies.containers import Container, HostRuntime, Limits, choose_runtime, cpus_for_share


# -- limits and the docker command lines ---------------------------------------------------------------------
def test_limits_become_docker_flags():
    assert Limits().docker_args() == []
    assert Limits(cpus=0.5, cpuset="1", memory_mb=512).docker_args() == [
        "--cpus",
        "0.500",
        "--cpuset-cpus",
        "1",
        "--memory",
        "512m",
        "--memory-swap",
        "512m",
    ]


def test_a_cpu_share_is_mininets_share_of_the_whole_machine(monkeypatch):
    monkeypatch.setattr(containers.os, "cpu_count", lambda: 2)
    assert cpus_for_share(0.25) == 0.5


def test_a_host_container_has_no_network_of_its_own_and_carries_the_run():
    c = Container("h3", "incastlab/worker:0.1.0", "run-7", Limits(cpus=0.5), mounts=("/r/x",))
    args = c.run_args()
    assert c.name == "incastlab-h3"
    assert args[args.index("--network") + 1] == "none"
    assert "incastlab.run=run-7" in args and "incastlab.host=h3" in args and "INCASTLAB_RUN=run-7" in args
    assert args[args.index("-v") + 1] == "/r/x:/r/x" and "--rm" in args
    assert args[args.index("--entrypoint") + 1 :] == ["sleep", "incastlab/worker:0.1.0", "infinity"]


def test_host_runtime_names_container_hosts_only():
    assert not HostRuntime().docker and not HostRuntime("docker").docker
    rt = HostRuntime("docker", images={"h1": "img"}).mounting("/tmp")
    assert rt.docker and rt.mounts == ("/tmp",)


# -- the choice of runtime -----------------------------------------------------------------------------------
def test_the_default_runtime_is_docker_only_when_dockerd_answers_and_the_image_is_current(monkeypatch):
    monkeypatch.setattr(containers, "docker_bin", lambda: None)
    assert choose_runtime("auto") == ("netns", "Docker is not installed (make deps installs it)")
    monkeypatch.setattr(containers, "docker_bin", lambda: "/usr/bin/docker")
    monkeypatch.setattr(containers, "daemon_answers", lambda timeout=5: False)
    assert choose_runtime("auto")[0] == "netns" and "dockerd does not answer" in choose_runtime("auto")[1]
    monkeypatch.setattr(containers, "daemon_answers", lambda timeout=5: True)
    monkeypatch.setattr(containers, "image_current", lambda ref=None: (False, "no image x (make image)"))
    assert choose_runtime("auto") == ("netns", "no image x (make image)")
    monkeypatch.setattr(containers, "image_current", lambda ref=None: (True, ""))
    assert choose_runtime("auto")[0] == "docker"
    assert choose_runtime("netns") == ("netns", "--runtime netns")


def test_asking_for_docker_where_it_cannot_be_is_refused(monkeypatch):
    monkeypatch.setattr(containers, "ensure_dockerd", lambda timeout=30: None)
    monkeypatch.setattr(containers, "image_current", lambda ref=None: (False, "no image x (make image)"))
    with pytest.raises(containers.ContainerError, match=r"--runtime docker: no image x"):
        choose_runtime("docker")


def test_the_runtime_is_a_fabric_parameter_with_its_flag():
    assert FabricSpec().runtime == "auto"
    with pytest.raises(ParamError, match="runtime must be one of"):
        FabricSpec(runtime="lxc")


# -- the image's inputs --------------------------------------------------------------------------------------
def test_the_code_hash_covers_the_dockerfile_and_the_workload_code():
    h = image.code_hash()
    assert len(h) == 16 and h == image.code_hash()
    assert image.DOCKERFILE.exists() and "FROM ${BASE}" in image.DOCKERFILE.read_text()


def test_the_image_pins_torch_as_the_project_does():
    reqs = image.pinned_requirements()
    assert reqs[0].startswith("torch==") and reqs[1].startswith("numpy==")
    assert image.WORKER_IMAGE.startswith("incastlab/worker:")


# -- stragglers and the cpu fault ----------------------------------------------------------------------------
def test_straggler_container_knobs_are_checked():
    st = Straggler.parse("h3:cpu=0.25,cpuset=0-1,mem_mb=512")
    st.validate()
    assert st.docker_only == ["cpuset", "mem_mb"]
    for bad, needle in (
        ("h3:cpuset=a", "cpuset must be"),
        ("h3:mem_mb=1", "mem_mb must be"),
        ("h3:cpu=0", "cpu share must be"),
        ("h3:cpu=-0.5", "cpu share must be"),
    ):
        with pytest.raises(ParamError, match=needle):
            Straggler.parse(bad).validate()


@pytest.mark.parametrize(
    "text, needle",
    [
        ("cpu:h3=0@step1", "must be a share in (0, 1]"),
        ("cpu:h3=-1@2s", "must be a share in (0, 1]"),
        ("cpu:h3=x@2s", "must be a share in (0, 1]"),
        ("cpu:h99=0.5@2s", "HOST=SHARE"),
        ("cpu@2s", "HOST=SHARE"),
    ],
)
def test_a_bad_cpu_fault_is_one_line(text, needle):
    with pytest.raises(ParamError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_fault(text, build_plan(FabricSpec()), 7)


def test_a_cpu_fault_names_its_host_and_share():
    f = parse_fault("cpu:h3=0.25@step4", build_plan(FabricSpec()), 7)
    assert (f.kind, f.host, f.value, f.at_step, f.duration_s) == ("cpu", "h3", 0.25, 4, 0.0)


# -- the job -------------------------------------------------------------------------------------------------
def test_a_job_needs_a_command_and_an_image():
    with pytest.raises(ParamError, match="give the command"):
        ExperimentConfig(strategies=("job",), job_image="x").validate()
    with pytest.raises(ParamError, match="--image IMAGE"):
        ExperimentConfig(strategies=("job",), job_command=("python3", "t.py")).validate()
    ExperimentConfig(strategies=("ring", "job"), job_image="x", job_command=("python3", "t.py")).validate()


def test_the_job_gets_torchruns_environment():
    from runmodel.folder import RunFolder
    from runmodel.job import job_for
    from runmodel.strategy import StrategySpec

    cfg = ExperimentConfig(strategies=("job",), job_image="x", job_command=("python3", "t.py"))
    folder = RunFolder(__import__("pathlib").Path("/tmp/nowhere")).strategy("job")
    job = job_for(cfg, cfg.plan(), StrategySpec.parse("job"), 0, folder)
    env = torchrun_env(job, 3, "rid")
    assert env["RANK"] == "3" and env["WORLD_SIZE"] == "7" and env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == "10.0.0.2" and env["MASTER_PORT"] == str(job.master_port)
    assert env["GLOO_SOCKET_IFNAME"] == "h5-eth0" and env["LOCAL_WORLD_SIZE"] == "1"
    assert job_container("h5") == "incastlab-h5-job"


def test_a_failed_job_container_is_named_with_its_exit_code(tmp_path, monkeypatch):
    monkeypatch.setattr(Tracked, "dockerd_answers", lambda self: True)  # the job's own failure
    err = tmp_path / "worker-1.stderr"
    err.write_text("Traceback ...\nRuntimeError: out of patience\n")
    procs = [
        Tracked("worker", 0, "h2", Polled(None), tmp_path / "x", container="incastlab-h2-job"),
        Tracked("worker", 1, "h3", Polled(3), err, container="incastlab-h3-job"),
    ]
    with pytest.raises(
        Exception,
        match=r"^job: worker 1 \(h3, container incastlab-h3-job\) exited with "
        r"code 3: RuntimeError: out of patience$",
    ):
        Follower("job", procs, lambda: {}).check()


def test_a_lost_dockerd_is_named_as_such(tmp_path):
    err = tmp_path / "e"
    err.write_text(
        'error during connect: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.41/exec/1/json": read: '
        "connection reset by peer\n"
    )
    t = Tracked("worker", 0, "h2", Polled(1), err, container="incastlab-h2")
    assert t.last_error() == "dockerd stopped answering (connection reset by peer)"


def test_a_process_that_died_with_its_dockerd_is_blamed_on_the_daemon(tmp_path, monkeypatch):
    err = tmp_path / "e"
    err.write_text("[W1203 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved\n")
    t = Tracked("worker", 0, "h2", Polled(255), err, container="incastlab-h2")
    monkeypatch.setattr(Tracked, "dockerd_answers", lambda self: False)
    assert t.last_error().startswith("dockerd stopped answering (the process's last line: [W1203")
    monkeypatch.setattr(Tracked, "dockerd_answers", lambda self: True)
    assert t.last_error().startswith("[W1203")
    netns = Tracked("worker", 0, "h2", Polled(255), err)  # no container: no daemon to ask
    assert netns.last_error().startswith("[W1203")


# -- steps read off traffic ----------------------------------------------------------------------------------
def synthetic(steps: int, compute: float, rng: np.random.Generator, t0: float = 100.0):
    """Packet times of a worker: a startup exchange, then per step a pause and a ~0.5 s exchange whose
    packets come every ~0.6 ms with a few waits of up to 40 ms inside."""
    ts, t = [], t0
    for k in range(steps + 1):
        t += compute if k else 0.0
        for i in range(600):
            t += rng.exponential(0.0006) + (rng.uniform(0.01, 0.04) if i % 100 == 99 else 0.0)
            ts.append(t)
    return np.array(ts)


def test_steps_come_from_the_pauses_between_exchanges():
    rng = np.random.default_rng(3)
    ts = synthetic(8, 0.3, rng)
    plen = np.full(len(ts), 1448)
    steps = rhythm.steps_from_bursts(rhythm.find_bursts(ts, plen, np.arange(len(ts)) % 2 == 0))
    assert len(steps) == 8
    assert all(0.25 < s.compute_s < 0.35 for s in steps)
    assert all(abs(s.bytes_sent - 300 * 1448) <= 1448 for s in steps)


def test_a_long_startup_pause_and_a_tiny_closing_burst_are_no_steps():
    rng = np.random.default_rng(4)
    ts = np.concatenate([[90.0, 90.001], synthetic(5, 0.3, rng), [200.0, 200.0005]])
    plen = np.concatenate([[50, 50], np.full(len(ts) - 4, 1448), [40, 40]])
    steps = rhythm.steps_from_bursts(rhythm.find_bursts(ts, plen, np.ones(len(ts), bool)))
    assert len(steps) == 5


def test_one_unclear_worker_is_read_with_the_others_count(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    clear = [synthetic(6, 0.3, rng) for _ in range(2)]
    unclear = synthetic(6, 0.03, rng)  # pauses no longer than the waits inside an exchange
    series = {f"h{k}": ts for k, ts in enumerate([*clear, unclear])}
    monkeypatch.setattr(
        rhythm,
        "data_packets",
        lambda path, ip: (series[path], np.full(len(series[path]), 1448), np.ones(len(series[path]), bool)),
    )
    assert len(rhythm.steps_from_bursts(rhythm.find_bursts(*rhythm.data_packets("h2", "")))) != 6
    every = rhythm.steps_of_job([(name, "") for name in series])
    assert [len(s) for s in every] == [6, 6, 6]


def test_a_worker_whose_boundaries_stray_from_the_others_is_cut_where_they_agree():
    """Its own reading cut inside a step's exchange and merged the last two steps (as one of 7 DDP
    workers did in CI); the others agree, so it is re-cut at its own pauses nearest theirs."""
    rng = np.random.default_rng(11)
    print("numpy seed 11")
    series = [synthetic(6, 0.3, rng) for _ in range(4)]
    packets = [(ts, np.full(len(ts), 1448), np.ones(len(ts), bool)) for ts in series]
    right = [rhythm.steps_from_bursts(rhythm.find_bursts(*pk)) for pk in packets]
    assert [len(s) for s in right] == [6] * 4
    ts = series[3]
    gaps = np.diff(ts)
    cuts = [int(i) + 1 for i in np.nonzero(gaps >= 0.2)[0]]
    in_step_2 = (ts[:-1] > ts[cuts[1]] + 0.1) & (ts[:-1] < ts[cuts[2]] - 0.2)
    inside = int(np.nonzero((gaps >= 0.01) & in_step_2)[0][0])
    wrong = rhythm.steps_from_bursts(rhythm.cut_bursts(ts, *packets[3][1:], sorted([*cuts[:-1], inside + 1])))
    assert len(wrong) == 6 and wrong[-1].bytes_sent > 1.5 * right[3][-1].bytes_sent
    got = rhythm.agreed_steps([*right[:3], wrong], packets, 6)
    assert got[:3] == right[:3]
    assert [(s.t_start, s.t_end, s.bytes_sent) for s in got[3]] == [
        (s.t_start, s.t_end, s.bytes_sent) for s in right[3]
    ]
    # cut at its own step lines instead: kept as it is, whatever the pauses say
    kept = rhythm.agreed_steps([*right[:3], wrong], packets, 6, keep=[False, False, False, True])
    assert kept[3] == wrong


def test_losses_are_read_from_what_the_script_printed():
    out = "world 7\nstep 1 loss 2.3100 time 1.0\nstep 2 loss=2.25\nepoch 1: Loss: 1e-1\n"
    losses = rhythm.losses_from_output(out)
    assert losses == [2.31, 2.25, 0.1]
    assert rhythm.loss_for(2, losses) == 2.25 and rhythm.loss_for(4, losses) is None


def test_a_script_that_prints_a_line_a_step_says_how_many_steps_it_took():
    from analysis.rhythm import steps_from_output

    ddp = "world 7, 105866 parameters\n" + "".join(f"step {k} loss 2.3 time 1.1\n" for k in range(1, 7))
    assert steps_from_output(ddp) == 6
    assert steps_from_output("".join(f"Step {k}: loss=1\n" for k in range(0, 4))) == 4
    assert steps_from_output("step 10 loss 1\nstep 20 loss 1\n") is None  # every 10th step: no count
    assert steps_from_output("step 1\nstep 3\n") is None
    assert steps_from_output("epoch 1 loss 2\n") is None


def test_the_job_takes_the_scripts_step_count_and_the_traffic_gives_the_times(tmp_path):
    """With the count known, a capture whose compute pauses blur into the exchange still gives that many."""
    from analysis import rhythm

    rng = np.random.default_rng(7)
    print("numpy seed 7")
    ts = synthetic(6, 0.03, rng)  # 30 ms of compute: about as long as the waits inside an exchange
    plen = np.full(len(ts), 1448)
    out = rng.random(len(ts)) < 0.5
    got = rhythm.steps_from_bursts(rhythm.periodic_bursts(ts, plen, out, 6))
    assert len(got) == 6


def test_where_the_traffic_misleads_the_step_lines_cut_each_step():
    """Two CI runs' DDP jobs: the first exchange paused inside longer than a compute pause, one compute
    pause was short, and the next step's first buckets left while backward still ran, so neither the
    pauses alone (step 1 cut in two) nor the longest pause near each line (cuts 0.3 s off) gave the
    steps; the last packet received before each line does."""
    rng = np.random.default_rng(13)
    print("numpy seed 13")
    ts, out, ends, t = [], [], [], 100.0
    for k, compute in enumerate([0.0, 0.3, 0.3, 0.3, 0.3, 0.06, 0.3]):  # k = 0: DDP's broadcast
        for i in range(600):
            early = k > 1 and i < 20  # the first bucket, sent half-way through backward
            t += compute / 2 if i in (0, 20) and k > 1 else compute if i == 0 else 0.0
            t += rng.exponential(0.0006) + (0.45 if k == 1 and i == 300 else 0.0)
            ts.append(t)
            out.append(early or i % 2 == 0)
        ends.append(t)
    ts_a, out_a = np.array(ts), np.array(out)
    plen = np.full(len(ts_a), 1448)
    wrong = rhythm.steps_from_bursts(rhythm.periodic_bursts(ts_a, plen, out_a, 6))
    assert len(wrong) == 6 and min(s.bytes_sent + s.bytes_recv for s in wrong) < 400 * 1448
    said = [(k, end + rng.uniform(0.0, 0.01)) for k, end in enumerate(ends[1:], start=1)]
    got = rhythm.steps_at_lines(ts_a, plen, out_a, rhythm.line_times(said, 6))
    assert got is not None and len(got) == 6
    assert [round(s.t_end, 6) for s in got] == [round(e, 6) for e in ends[1:]]
    assert all(s.bytes_sent + s.bytes_recv == 600 * 1448 for s in got)
    halves = [c / 2 for c in (0.3, 0.3, 0.3, 0.06, 0.3)]
    assert all(abs(s.compute_s - c) < 0.01 for s, c in zip(got[1:], halves, strict=True))


def test_step_lines_out_of_order_or_in_a_block_are_not_used():
    assert rhythm.line_times([(1, 1.0), (2, 2.0), (3, 3.0)], 3) == [1.0, 2.0, 3.0]
    assert rhythm.line_times([(1, 1.0), (2, 2.0)], 3) is None
    assert rhythm.line_times([(1, 1.0), (3, 2.0), (4, 3.0)], 3) is None
    assert rhythm.line_times([(1, 5.0), (2, 5.0), (3, 5.0)], 3) is None  # read in one block: no moments


def test_a_jobs_stdout_is_copied_and_its_step_lines_timed(tmp_path):
    from incastlab.userjob import copy_lines
    from runmodel.records import read_step_lines

    r, w = os.pipe()
    with os.fdopen(w, "wb") as fw:
        fw.write(b"world 7\nstep 1 loss 2.3 time 1.0\nstep 2 loss 2.2 time 1.0\nno newline at the end")
    before = time.time()
    with os.fdopen(r, "rb") as fr:
        copy_lines(fr, tmp_path / "w.stdout", tmp_path / "w.step_lines.jsonl")
    assert (tmp_path / "w.stdout").read_bytes().endswith(b"time 1.0\nno newline at the end")
    lines = read_step_lines(tmp_path / "w.step_lines.jsonl")
    assert [sl.step for sl in lines] == [1, 2] and all(before <= sl.t <= time.time() for sl in lines)


def test_a_stdout_copier_that_cannot_write_still_drains_the_job(tmp_path, capsys):
    """Its run folder gone: the copier says so once and reads on, so the job never blocks on a full pipe."""
    import threading

    from incastlab.userjob import copy_lines

    r, w = os.pipe()
    fr = os.fdopen(r, "rb")
    copier = threading.Thread(
        target=copy_lines, args=(fr, tmp_path / "gone" / "w.stdout", tmp_path / "gone" / "w.step_lines.jsonl")
    )
    copier.start()
    with os.fdopen(w, "wb") as fw:
        fw.write(b"step 1 loss 2.3\n" * 20000)  # 320 kB: several times what a pipe holds
    copier.join(timeout=30)
    assert not copier.is_alive()
    assert fr.closed
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "w.stdout" in err[0] and "not kept" in err[0], err
