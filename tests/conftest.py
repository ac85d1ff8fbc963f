"""Shared fixtures: root/tool checks, a clean host before and after every integration test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def incastlab_cmd() -> list[str]:
    """How to run the `incastlab` command of this checkout."""
    exe = VENV_BIN / "incastlab"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "incastlab.cli"]


def have_network_tools() -> str | None:
    """Why integration tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ovs-vsctl", "mnexec", "tc", "ip", "iperf3"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (make deps)"
    return None


@contextmanager
def guarded_host(what: str = "the test") -> Iterator[None]:
    """Skip without root and tools; start on a clean host; fail if `what` left anything behind."""
    reason = have_network_tools()
    if reason:
        pytest.skip(reason)
    from incastlab.cleanup import clean_all, find_leftovers

    clean_all()
    yield
    left = find_leftovers()
    clean_all()
    assert left.empty(), f"{what} left {left.describe()}"


@pytest.fixture
def clean_host():
    """Integration tests start on a clean host and must leave it clean."""
    with guarded_host():
        yield


def run_cli(args: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    """Run `incastlab ARGS` from the checkout, capturing its output."""
    return subprocess.run(incastlab_cmd() + args, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, **kw)
