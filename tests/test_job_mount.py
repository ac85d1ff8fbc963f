"""`incastlab job` runs the user's own script from where the user stands, without building an image:
the current folder is mounted read-only at its own path in each job container and is its working
directory."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import incastlab_cmd
from tests.test_containers_integration import labelled, token, worker_image  # noqa: F401 - a fixture

pytestmark = pytest.mark.integration

TRAIN = """\
import os, pathlib, sys
import torch, torch.distributed as dist

token = pathlib.Path("token.txt").read_text().strip()  # relative: found only in the user's folder
try:
    pathlib.Path("written-by-job").write_text("x")
    mode = "writable"
except OSError:
    mode = "read-only"
dist.init_process_group("gloo")
x = torch.ones(2**18)  # 1 MiB of float32 per all-reduce
for k in range(1, 4):
    dist.all_reduce(x)
    print(f"step {k} loss {1.0 / k:.3f}", flush=True)
print(f"{token} {mode} cwd={os.getcwd()} sum={x[0].item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("named", [False, True], ids=["where-it-runs", "job-dir"])
def test_a_job_runs_the_users_script_from_the_users_folder_read_only(
    worker_image,  # noqa: F811
    clean_host,
    tmp_path,
    rng,
    named,
):
    """From the folder incastlab runs in, or (named) the one --job-dir names, relative to where it runs."""
    user = tmp_path / "project"
    user.mkdir()
    (user / "train.py").write_text(TRAIN)
    secret = f"token-{rng.randrange(10**9)}"
    (user / "token.txt").write_text(secret)
    results = tmp_path / "results"
    proc = subprocess.run(
        incastlab_cmd()
        + ["job", "--image", worker_image, "--workers", "2", "--steps", "3", "--results", str(results)]
        + (["--job-dir", "project"] if named else [])
        + ["--", "python3", "train.py"],
        cwd=tmp_path if named else user,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (user / "written-by-job").exists() and labelled(token()) == []
    folder = (results / "latest").resolve()
    for rank in range(2):
        out = (folder / "job" / f"worker-{rank}.stdout").read_text()
        # what only this folder's token.txt could say; 2 ranks all-reducing ones 3 times: 2**3
        assert f"{secret} read-only cwd={user} sum=8" in out, out
        rows = [json.loads(ln) for ln in (folder / "job" / f"worker-{rank}.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "step" in r]
        print(rank, [(r["step"], r["bytes_sent"]) for r in steps])
        assert len(steps) == 3, rows
        # a ring all-reduce of 1 MiB over n = 2 ranks sends 2 (n - 1) / n of it, 1 MiB, each step (read
        # off the capture: the cuts between steps are the traffic's, so within a fifth)
        assert all(0.8 * 2**20 <= r["bytes_sent"] <= 1.3 * 2**20 for r in steps), steps
