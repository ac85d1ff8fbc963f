"""The Vagrant VM: make vm-check's refusals (cheap, every run) and, marked `vm`, the whole boot
(make vm-box && make vm-check: tens of minutes under QEMU's TCG; only with pytest -m vm)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, require
from topologies import hygiene

VM_DIR = ROOT / "build" / "vm"


def vm_check(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "scripts" / "vm-check.sh"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_vm_check_refuses_an_unknown_option_in_one_line() -> None:
    require(None if os.geteuid() == 0 else "needs root")
    proc = vm_check("--bogus")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "make vm-check: unknown option --bogus (known: --keep, --destroy)"]


def test_a_second_vm_check_is_refused_while_one_runs() -> None:
    """The lock make vm-check holds while its VM is up: a second one says so and touches nothing."""
    require(None if os.geteuid() == 0 else "needs root")
    VM_DIR.mkdir(parents=True, exist_ok=True)
    with open(VM_DIR / "vm-check.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pytest.fail("a real make vm-check is running on this machine: run the tests after it")
        pid_file = VM_DIR / "vm-check.pid"
        pid_file.write_text(str(os.getpid()))
        try:
            assert hygiene.vm_check_running()
            assert hygiene.vm_leftovers() == []  # a running vm-check's VM is not a leftover
            proc = vm_check()
        finally:
            pid_file.unlink(missing_ok=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"make vm-check: another vm-check is running (pid {os.getpid()})"]
    assert not hygiene.vm_check_running()


def _libvirt_state() -> dict[str, list[str]]:
    virsh = [*hygiene.VIRSH]
    def names(*args: str) -> list[str]:
        out = subprocess.run([*virsh, *args], capture_output=True, text=True, timeout=20).stdout
        return [ln.split()[0] for ln in out.splitlines() if ln.split()]
    return {"domains": [d for d in names("list", "--all", "--name") if d.startswith("incastlab")],
            "networks": [n for n in names("net-list", "--all", "--name") if n == hygiene.VM_NETWORK],
            "volumes": [v for v in names("vol-list", "default") if v.startswith("incastlab")]}


@pytest.mark.vm
@pytest.mark.timeout(7200)  # pytest's 600 s default stopped it mid-run under TCG (about 27 min)
def test_the_vm_boots_runs_the_experiments_and_leaves_the_host_clean(tmp_path: Path) -> None:
    """make vm-box && make vm-check: the run folders copied back say kernel datapath and the
    virtualisation; the DCTCP line is in incast.json; no domain, volume, network or qemu is left."""
    require(None if os.geteuid() == 0 else "needs root")
    box = subprocess.run(["make", "vm-box"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert box.returncode == 0, box.stderr[-2000:]
    before = {p.name for p in (ROOT / "results").glob("vm-*")}
    log = ROOT / "tests" / "artifacts" / "vm-check.log"  # its progress, to follow with tail -f
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        # its own session: on a timeout the whole vm-check gets the Ctrl-C its trap tears down on
        check = subprocess.Popen(["make", "vm-check"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            check.wait(timeout=4800)
        except subprocess.TimeoutExpired:
            os.killpg(check.pid, signal.SIGINT)
            check.wait(timeout=600)
            pytest.fail(f"make vm-check took over 80 min; interrupted: {log.read_text()[-2000:]}")
    assert check.returncode == 0, log.read_text()[-3000:]
    new = sorted(p for p in (ROOT / "results").glob("vm-*") if p.name not in before)
    assert len(new) == 1, new
    configs = [json.loads(p.read_text()) for p in new[0].glob("*/config.json")]
    assert configs, f"no run folder came back in {new[0]}"
    for cfg in configs:
        env = cfg["environment"]
        assert env["datapath"] == "kernel"
        assert env["virtualisation"] in {"tcg", "kvm"}
    incast = [json.loads(p.read_text()) for p in new[0].glob("*/incast.json")]
    dctcp = [r for doc in incast for r in doc["rows"] if r["line"] == "cc=dctcp" and r["state"] == "complete"]
    assert dctcp, [doc.get("not_run") for doc in incast]
    assert (new[0] / "phases.tsv").is_file()
    # the host afterwards
    assert shutil.which("virsh")
    assert _libvirt_state() == {"domains": [], "networks": [], "volumes": []}
    qemu = subprocess.run(["pgrep", "-f", "qemu-system-x86_64 -name guest=incastlab"], capture_output=True)
    assert qemu.returncode == 1, qemu.stdout
    assert hygiene.vm_leftovers() == []
    # the Vagrantfile: valid for libvirt; the other providers' blocks parse (no VirtualBox here to check)
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant.d"),
           "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot")}
    for extra, provider in ((["validate"], "libvirt"), (["validate", "--ignore-provider"], "virtualbox")):
        proc = subprocess.run(["vagrant", *extra], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**env, "VAGRANT_DEFAULT_PROVIDER": provider})
        assert proc.returncode == 0, (provider, proc.stdout[-500:], proc.stderr[-500:])
