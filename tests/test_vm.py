"""The Vagrant VM: make vm-check's refusals (cheap, every run) and, marked `vm`, the whole boot
(make vm-box && make vm-check: tens of minutes under QEMU's TCG; only with pytest -m vm)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, require
from tests.waiting import wait_for
from topologies import hygiene

VM_DIR = ROOT / "build" / "vm"


def vm_check(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "vm-check.sh"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_vm_check_refuses_an_unknown_option_in_one_line() -> None:
    require(None if os.geteuid() == 0 else "needs root")
    proc = vm_check("--bogus")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "make vm-check: unknown option --bogus (known: --keep, --destroy)"
    ]


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
        f"make vm-check: another vm-check is running (pid {os.getpid()})"
    ]
    assert not hygiene.vm_check_running()


def _libvirt_state() -> dict[str, list[str]]:
    virsh = [*hygiene.VIRSH]

    def names(*args: str) -> list[str]:
        out = subprocess.run([*virsh, *args], capture_output=True, text=True, timeout=20).stdout
        return [ln.split()[0] for ln in out.splitlines() if ln.split()]

    return {
        "domains": [d for d in names("list", "--all", "--name") if d.startswith("incastlab")],
        "networks": [n for n in names("net-list", "--all", "--name") if n == hygiene.VM_NETWORK],
        "volumes": [v for v in names("vol-list", "default") if v.startswith("incastlab")],
    }


# -- make vm-check as the vm tests run it, and the host it must leave behind -------------------------
@contextlib.contextmanager
def _vm_check(log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """make vm-box, then make vm-check in its own session (so a Ctrl-C can go to its whole process
    group, as a terminal's does), its output in `log`; if the test fails while it still runs, it gets
    that Ctrl-C and its teardown runs before the failure is reported."""
    box = subprocess.run(["make", "vm-box"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert box.returncode == 0, box.stderr[-2000:]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        check = subprocess.Popen(
            ["make", "vm-check"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield check
    except BaseException:
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGINT)
            check.wait(timeout=600)
        raise


def _ended(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        raise AssertionError(f"make vm-check ended early (exit {proc.returncode})")


def _guest_running() -> bool:
    return (
        subprocess.run(
            ["pgrep", "-f", "qemu-system-x86_64 -name guest=incastlab"], capture_output=True
        ).returncode
        == 0
    )


def _assert_host_clean(daemons_before: set[str]) -> None:
    """No domain, network, volume or qemu of vm-check's; the daemons it started stopped again."""
    assert not (VM_DIR / "vm-check.pid").exists()
    assert not _guest_running()
    if hygiene.LIBVIRT_SOCKET.exists():
        assert _libvirt_state() == {"domains": [], "networks": [], "volumes": []}
    assert hygiene.vm_leftovers() == []
    for daemon in ("libvirtd", "virtlogd"):
        if daemon not in daemons_before:
            assert subprocess.run(["pgrep", "-x", daemon], capture_output=True).returncode == 1, daemon


def _daemons() -> set[str]:
    return {
        d
        for d in ("libvirtd", "virtlogd")
        if subprocess.run(["pgrep", "-x", d], capture_output=True).returncode == 0
    }


@pytest.mark.vm
@pytest.mark.timeout(7200)  # pytest's 600 s default stopped it mid-run under TCG (about 27 min)
def test_the_vm_boots_runs_the_experiments_and_leaves_the_host_clean(tmp_path: Path) -> None:
    """make vm-box && make vm-check: the run folders copied back say kernel datapath and the
    virtualisation; the DCTCP line is in incast.json; no domain, volume, network or qemu is left."""
    require(None if os.geteuid() == 0 else "needs root")
    before_daemons = _daemons()
    before = {p.name for p in (ROOT / "results").glob("vm-*")}
    log = ROOT / "tests" / "artifacts" / "vm-check.log"  # its progress, to follow with tail -f
    with _vm_check(log) as check:
        try:
            check.wait(timeout=4800)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make vm-check took over 80 min; interrupting it: {log.read_text()[-2000:]}")
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
    assert shutil.which("virsh")
    _assert_host_clean(before_daemons)
    # the Vagrantfile: valid for libvirt; the other providers' blocks parse (no VirtualBox here to check)
    env = {
        **os.environ,
        "VAGRANT_HOME": str(tmp_path / "vagrant.d"),
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"),
    }
    for extra, provider in ((["validate"], "libvirt"), (["validate", "--ignore-provider"], "virtualbox")):
        proc = subprocess.run(
            ["vagrant", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "VAGRANT_DEFAULT_PROVIDER": provider},
        )
        assert proc.returncode == 0, (provider, proc.stdout[-500:], proc.stderr[-500:])


# -- hygiene when vm-check does not finish: Ctrl-C while the VM boots, a provisioning that fails ------
def _cut_short(
    log_name: str,
    ready: Callable[[Path], bool],
    timeout: float,
    what: str,
    cut: Callable[[subprocess.Popen[bytes], Path], None],
    exit_code: int,
) -> str:
    """make vm-check, cut short by `cut` once `ready(log)` holds (it must not end before that): it
    tears down what it made, says it failed with `exit_code` and leaves the host as it found it.
    Returns its log's text."""
    require(None if os.geteuid() == 0 else "needs root")
    before = _daemons()
    log = ROOT / "tests" / "artifacts" / log_name
    with _vm_check(log) as check:

        def ready_yet() -> bool:
            _ended(check)
            return ready(log)

        wait_for(ready_yet, timeout, what, interval=1)
        cut(check, log)
    text = log.read_text()
    assert "[vm-check] teardown" in text and f"[vm-check] failed (exit {exit_code})" in text, text[-2000:]
    _assert_host_clean(before)
    return text


@pytest.mark.vm
@pytest.mark.timeout(3600)
def test_ctrl_c_while_the_vm_boots_leaves_the_host_clean() -> None:
    """Ctrl-C once the guest's qemu runs (vagrant up still waiting for sshd): exit 130, nothing left."""

    def ctrl_c(check: subprocess.Popen[bytes], log: Path) -> None:
        os.killpg(check.pid, signal.SIGINT)
        # make re-raises the Ctrl-C after its child (the script, exit 130) ended: a shell shows 130 for both
        assert check.wait(timeout=600) in (130, -signal.SIGINT), log.read_text()[-2000:]

    _cut_short(
        "vm-check-interrupt.log", lambda _: _guest_running(), 900, "the guest's qemu process", ctrl_c, 130
    )


def _ssh_guest(command: str) -> subprocess.CompletedProcess[str]:
    """A command in the guest over plain ssh: `vagrant ssh` would wait for the machine lock that
    the running `vagrant provision` holds."""
    out = subprocess.run(
        [*hygiene.VIRSH, "domifaddr", "incastlab_default", "--source", "lease"],
        capture_output=True,
        text=True,
        timeout=20,
    ).stdout
    ip = next(f.split("/")[0] for line in out.splitlines() for f in line.split() if "/" in f and "." in f)
    key = VM_DIR / "dot" / "machines" / "default" / "libvirt" / "private_key"
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"vagrant@{ip}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.vm
@pytest.mark.timeout(3600)
def test_a_failed_provisioning_ends_the_run_and_leaves_the_host_clean() -> None:
    """make deps killed inside the guest mid-provisioning: vm-check says which phase failed, exits 1
    (make: 2), and tears down what it made."""

    def making_deps(log: Path) -> bool:
        return "default: == openvswitch" in log.read_text()  # the guest's make deps has begun

    def kill_deps(check: subprocess.Popen[bytes], log: Path) -> None:
        killed = _ssh_guest("sudo pkill -f 'make [d]eps'")  # [d]: not this shell's own line
        assert killed.returncode == 0, (killed.stdout, killed.stderr)
        assert check.wait(timeout=900) == 2, log.read_text()[-2000:]  # make's "a recipe failed"

    text = _cut_short(
        "vm-check-failed-provision.log", making_deps, 1800, "make deps running in the guest", kill_deps, 1
    )
    assert "make vm-check: provisioning (make deps, make image) failed" in text, text[-2000:]
