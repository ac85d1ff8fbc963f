"""Containers as fabric hosts (--runtime docker), the user's own job, and their hygiene, for real.

The worker image is built once per session (`make image`'s code: seconds when it is there and
current, about 90 s from nothing). Every run here carries the guard's marker value, and the containers
carry it as their `incastlab.run` label, so `docker ps` tells this test's containers from anyone's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, guarded_host, have_network_tools, require, run_cli
from tests.running import Running, assert_exit_130_soon, interrupt_at
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

DDP = "/opt/incastlab/workloads/examples/ddp_cnn.py"


def build_image() -> str:
    """`make image`: seconds when the image is there and its inputs did not change."""
    from topologies.containers import ensure_dockerd
    from topologies.image import WORKER_IMAGE, image_current

    ensure_dockerd()
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "topologies.image"], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    print(f"make image: {time.monotonic() - t0:.1f} s\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    ok, why = image_current()
    assert ok, why
    return WORKER_IMAGE


@pytest.fixture
def worker_image() -> str:
    """The worker image of this checkout, as each test starts (the code may have changed since the last)."""
    require(have_network_tools())
    return build_image()


def docker_out(*args: str) -> str:
    from topologies.image import docker

    return docker(*args, timeout=30, check=False).stdout


def labelled(token: str) -> list[str]:
    """Names of the containers labelled with this run's marker value."""
    return sorted(
        docker_out("ps", "-a", "--filter", f"label=incastlab.run={token}", "--format", "{{.Names}}").split()
    )


def inspect(name: str) -> dict:
    out = docker_out("inspect", name)
    return json.loads(out)[0] if out.strip() else {}


def token() -> str:
    return os.environ["INCASTLAB_RUN"]


def docker_compare(results: Path, *options: str) -> Running:
    """`incastlab compare --runtime docker` with `options`, into `results`: started, not waited for."""
    return Running(["compare", "--runtime", "docker", *options, "--results", str(results)])


def run_folder(results: Path) -> Path:
    return (results / "latest").resolve()


# -- compare in containers ------------------------------------------------------------------------------
def test_compare_runs_every_worker_and_the_ps_in_containers(worker_image, clean_host, tmp_path):
    results = tmp_path / "results"
    run = docker_compare(results, "--steps", "3")
    with run.killed_on_error():
        run.wait_line(r"ps: step [1-3]/3", 300)  # progress may skip a step
        names = labelled(token())  # `docker ps` during the run lists the run's containers
        running = docker_out(
            "ps", "--filter", f"label=incastlab.run={token()}", "--format", "{{.Names}} {{.Image}}"
        )
        code, _ = run.wait_exit(guard=600)
    assert code == 0, run.tail(40)
    assert names == sorted(f"incastlab-h{k}" for k in range(1, 9)), names
    assert all(line.endswith(worker_image) for line in running.splitlines()), running
    assert re.search(r"runtime: docker \(--runtime docker", run.text("stderr")), run.tail()
    assert "hosts in 8 containers" in run.text("stderr")
    folder = run_folder(results)
    env = json.loads((folder / "config.json").read_text())["environment"]
    assert env["runtime"] == "docker" and env["image"] == worker_image, env
    summary = json.loads((folder / "summary.json").read_text())
    ps, ring = summary["strategies"]["ps"], summary["strategies"]["ring"]
    assert ps["state"] == ring["state"] == "complete" and ps["steps"] == ring["steps"] == 3
    assert ps["iter_time_s"] > 2 * ring["iter_time_s"], (ps["iter_time_s"], ring["iter_time_s"])
    assert ps["ps_port_drops"] > 0 and ps["first_loss"] == ring["first_loss"]
    assert labelled(token()) == [], "the run's containers outlived it"


def test_netns_runtime_still_works_and_starts_no_container(worker_image, clean_host, tmp_path):
    results = tmp_path / "results"
    run = Running(
        ["compare", "--runtime", "netns", "--strategies", "ring", "--steps", "2", "--results", str(results)]
    )
    with run.killed_on_error():
        run.wait_line(r"ring: step [12]/2", 300)  # progress may skip a step
        during = labelled(token())
        code, _ = run.wait_exit(guard=600)
    assert code == 0, run.tail(40)
    assert during == []
    assert "runtime: netns (--runtime netns)" in run.text("stderr")
    env = json.loads((run_folder(results) / "config.json").read_text())["environment"]
    assert env["runtime"] == "netns"


def test_without_dockerd_the_run_says_so_in_one_line_and_uses_netns(clean_host, tmp_path):
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")  # a dockerd that does not answer
    proc = run_cli(
        ["compare", "--strategies", "ring", "--steps", "1", "--capture", "none", "--results", str(tmp_path)],
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "runtime:" in ln]
    assert len(lines) == 1 and "runtime: netns (dockerd does not answer" in lines[0], lines
    env_doc = json.loads((run_folder(tmp_path) / "config.json").read_text())["environment"]
    assert env_doc["runtime"] == "netns" and "dockerd does not answer" in env_doc["runtime_why"]


# -- limits ----------------------------------------------------------------------------------------------
def test_straggler_limits_are_the_containers_and_a_cpu_fault_changes_them(worker_image, clean_host, tmp_path):
    cores = os.cpu_count() or 1
    run = docker_compare(
        tmp_path,
        *("--strategies", "ring", "--steps", "4", "--capture", "none"),
        *("--straggler", "h3:cpu=0.5,cpuset=1,mem_mb=700", "--fault", "cpu:h3=0.25@step1"),
    )
    with run.killed_on_error():
        run.wait_line(r"ring: starting", 300)
        before = inspect("incastlab-h3")["HostConfig"]
        run.wait_line(r"fault: fired cpu h3=0.25", 300)
        after = wait_for(
            lambda: (hc := inspect("incastlab-h3")["HostConfig"])["NanoCpus"] != before["NanoCpus"] and hc,
            20,
            "docker update to take",
        )
        other = inspect("incastlab-h4")["HostConfig"]
        code, _ = run.wait_exit(guard=600)
    assert code == 0, run.tail(40)
    assert before["NanoCpus"] == round(0.5 * cores * 1e9), before  # Mininet's share: of the machine
    assert before["CpusetCpus"] == "1" and before["Memory"] == 700 * 2**20
    assert after["NanoCpus"] == round(0.25 * cores * 1e9)
    assert other["NanoCpus"] == 0 and other["CpusetCpus"] == "" and other["Memory"] == 0
    lines = (run_folder(tmp_path) / "ring" / "faults.jsonl").read_text().splitlines()
    faults = [json.loads(ln) for ln in lines]
    assert [(f["event"], f["kind"], f.get("state")) for f in faults] == [
        ("fired", "cpu", "cpu=0.25"),
        ("restored", "cpu", "cpu=planned"),
    ], faults


# -- bad input, refused before anything is built -----------------------------------------------------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["job", "--image", "incastlab/no-such-image:0", "--", "python3", "train.py"], "does not exist here"),
        (["job", "--image", "incastlab/worker:0.1.0"], "give the command to run"),
        (["job", "--", "python3", "train.py"], "--image IMAGE"),
        (["compare", "--straggler", "h3:cpu=0"], "cpu share must be in (0, 1]"),
        (["compare", "--straggler", "h3:cpu=-1"], "cpu share must be in (0, 1]"),
        (["compare", "--fault", "cpu:h3=0@step2"], "the cpu limit must be a share in (0, 1]"),
        (["compare", "--runtime", "netns", "--straggler", "h3:mem_mb=512"], "need --runtime docker"),
        (["compare", "--runtime", "netns", "--fault", "cpu:h4=0.5@step1"], "without a CPU limit"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_built(
    worker_image, clean_host, tmp_path, args, needle
):
    proc = run_cli([*args[:1], "--results", str(tmp_path), *args[1:]], timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if not ln.startswith("[incastlab")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert not any(tmp_path.iterdir()), "a run folder was made"
    assert labelled(token()) == []


# -- your own job ------------------------------------------------------------------------------------------
def test_the_ddp_example_runs_as_a_job_with_a_report(worker_image, clean_host, tmp_path):
    run = Running(
        ["job", "--image", worker_image, "--results", str(tmp_path), "--", "python3", DDP, "--steps", "6"]
    )
    with run.killed_on_error():
        run.wait_line(r"job: 7 containers running", 300)
        jobs = labelled(token())
        code, _ = run.wait_exit(guard=900)
    assert code == 0, run.tail(40)
    assert [n for n in jobs if n.endswith("-job")] == sorted(f"incastlab-h{k}-job" for k in range(2, 9)), jobs
    folder = run_folder(tmp_path)
    job = json.loads((folder / "summary.json").read_text())["strategies"]["job"]
    assert job["state"] == "complete" and job["workers"] == 7 and job["steps"] == 6, job
    assert 1.0 < job["first_loss"] < 3.0 and 1.0 < job["final_loss"] < 3.0, job  # the losses it printed
    assert (folder / "report.html").stat().st_size > 10_000
    for rank in range(7):
        printed = [
            float(m)
            for m in re.findall(r"time ([0-9.]+)", (folder / "job" / f"worker-{rank}.stdout").read_text())
        ]
        assert len(printed) == 6
        rec = [json.loads(ln) for ln in (folder / "job" / f"worker-{rank}.jsonl").read_text().splitlines()]
        steps = [r for r in rec if "step" in r]
        assert len(steps) == 6 and rec[-1] == {"event": "done", "rank": rank, "steps": 6}
        rhythm = statistics.median(r["t_end"] - r["t_start"] for r in steps)
        # the traffic's rhythm against the script's own clock, the start-up step aside
        own = statistics.median(printed[1:])
        assert abs(rhythm - own) < 0.15 * own, (rank, rhythm, printed)
        assert all(r["bytes_sent"] > 0.3 * 2**20 for r in steps)  # DDP's gradient buckets, each step
        # cut where its `step K` lines were read: each step ends with the last packet before its line
        lines = [
            json.loads(ln)
            for ln in (folder / "job" / f"worker-{rank}.step_lines.jsonl").read_text().splitlines()
        ]
        assert [sl["step"] for sl in lines] == [1, 2, 3, 4, 5, 6], lines
        assert all(0 <= sl["t"] - st["t_end"] < 0.25 for sl, st in zip(lines, steps, strict=True)), (
            rank,
            [(sl["t"], st["t_end"]) for sl, st in zip(lines, steps, strict=True)],
        )
    env = json.loads((folder / "job" / "job.json").read_text())
    assert env["world"] == 7 and env["master_addr"] == "10.0.0.2"
    assert labelled(token()) == []


def test_a_failing_job_names_the_container_and_its_exit_code_and_keeps_the_results(
    worker_image, clean_host, tmp_path
):
    proc = run_cli(
        [
            "job",
            "--image",
            worker_image,
            "--results",
            str(tmp_path),
            "--",
            "python3",
            DDP,
            "--steps",
            "5",
            "--fail-at",
            "2",
        ],
        timeout=900,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "worker 1 (h3, container incastlab-h3-job) exited with code 3" in last, last
    assert "failing on purpose" in last
    folder = run_folder(tmp_path)
    status = json.loads((folder / "job" / "status.json").read_text())
    assert status["state"] == "failed" and "incastlab-h3-job" in status["error"]
    assert (folder / "summary.json").exists() and (folder / "report.html").exists()
    assert (folder / "job" / "pcap" / "h3.pcap").stat().st_size > 24
    assert labelled(token()) == []


# -- hygiene -----------------------------------------------------------------------------------------------
def test_ctrl_c_while_containers_train_leaves_a_readable_run_and_a_clean_host(
    worker_image, clean_host, tmp_path, rng
):
    from incastlab.cleanup import find_leftovers

    run = docker_compare(tmp_path, "--steps", "20")
    code, secs = interrupt_at(run, rng, r"ps: step ([1-9]|1[0-9])/20", r"ps: done", 2.0)
    assert_exit_130_soon(code, secs, run)
    assert labelled(token()) == [] and find_leftovers().empty(), find_leftovers().describe()
    folder = run_folder(tmp_path)
    assert json.loads((folder / "ps" / "status.json").read_text())["state"] == "incomplete"
    assert json.loads((folder / "config.json").read_text())["environment"]["runtime"] == "docker"


def test_after_sigkill_the_leftover_check_names_the_containers_and_clean_removes_only_incastlabs(
    worker_image, tmp_path
):
    from incastlab.cleanup import find_leftovers
    from topologies.image import BASE_IMAGE, docker

    bystander = f"not-incastlab-{os.getpid()}"  # someone else's container: never touched
    docker(
        "run",
        "-d",
        "--rm",
        "--network",
        "none",
        "--name",
        bystander,
        "--label",
        "incastlab.host=h1",
        BASE_IMAGE,
        "sleep",
        "600",
        timeout=60,
    )
    try:
        with guarded_host("the SIGKILLed run"):
            run = docker_compare(tmp_path, "--steps", "20")
            with run.killed_on_error():
                run.wait_line(r"ps: step ([1-9]|1[0-9])/20", 300)  # progress may skip a step
            run.send(signal.SIGKILL, group=False)
            run.wait_exit(guard=60)
            left = find_leftovers()
            assert sorted(left.containers) == sorted(f"incastlab-h{k}" for k in range(1, 9)), left.describe()
            refused = run_cli(["compare", "--results", str(tmp_path)], timeout=120)
            assert refused.returncode == 2 and "containers incastlab-h" in refused.stderr, refused.stderr
            assert "incastlab clean" in refused.stderr
            cleaned = run_cli(["clean"], timeout=180)
            assert cleaned.returncode == 0, cleaned.stderr
            assert "containers incastlab-h1" in cleaned.stdout
            assert find_leftovers().empty(), find_leftovers().describe()
        assert inspect(bystander).get("State", {}).get("Running"), "clean removed a container not incastlab's"
        assert (run_folder(tmp_path) / "config.json").exists()
    finally:
        docker("rm", "-f", bystander, timeout=60, check=False)


def test_a_killed_dockerd_ends_the_run_naming_it_and_leaves_a_clean_host(worker_image, clean_host, tmp_path):
    from incastlab.cleanup import find_leftovers
    from topologies.containers import ensure_dockerd

    run = docker_compare(tmp_path, "--strategies", "ring", "--steps", "20")
    try:
        with run.killed_on_error():
            run.wait_line(r"ring: step ([1-9]|1[0-9])/20", 300)  # progress may skip a step
            daemons = subprocess.run(
                ["pgrep", "-x", "dockerd"], capture_output=True, text=True
            ).stdout.split()
            assert len(daemons) == 1, daemons
            os.kill(int(daemons[0]), signal.SIGKILL)
            code, _ = run.wait_exit(guard=300)
    finally:
        ensure_dockerd()  # the machine's dockerd back, as make deps starts it
    assert code == 1, run.tail(40)
    last = run.text("stderr").strip().splitlines()[-1]
    assert re.search(
        r"ring: worker \d \(h\d, container incastlab-h\d\) exited with code \d+: "
        r"dockerd stopped answering",
        last,
    ), last
    folder = run_folder(tmp_path)
    assert json.loads((folder / "ring" / "status.json").read_text())["state"] == "failed"
    assert (folder / "summary.json").exists() and (folder / "report.html").exists()
    wait_for(lambda: find_leftovers().empty(), 60, "the run's containers to be gone once dockerd is back")
    assert labelled(token()) == []
