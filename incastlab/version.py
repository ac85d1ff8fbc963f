"""What code ran: the package's version and, when it runs from a git checkout, the commit and
whether the checkout had changes (`incastlab --version`, and config.json's provenance).

Found once per process, never fatal: an installed copy (no checkout) or a machine without git
says so with None rather than failing a run.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from runmodel.config import Provenance

ROOT = Path(__file__).resolve().parent.parent  # the checkout, when the package runs from one
GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Checkout:
    """The git commit of the checkout the package runs from (None when it runs from none)."""

    commit: str | None = None
    dirty: bool | None = None  # tracked files differ from the commit (untracked files do not count)


def package_version() -> str:
    """The installed distribution's version ("unknown" when the package is not installed)."""
    try:
        return importlib.metadata.version("incastlab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _git(*args: str) -> str | None:
    """A git command's stdout in ROOT, or None when git is missing or fails. safe.directory: the
    commands run as root over a checkout another user may own."""
    try:
        proc = subprocess.run(
            ["git", "-c", f"safe.directory={ROOT}", "-C", str(ROOT), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@functools.cache
def checkout() -> Checkout:
    """The commit ROOT is at, if ROOT is the top of a git work tree (not merely inside another one)."""
    out = _git("rev-parse", "--show-toplevel", "HEAD")
    lines = out.split() if out else []
    if len(lines) != 2 or Path(lines[0]).resolve() != ROOT:
        return Checkout()
    status = _git("status", "--porcelain", "--untracked-files=no")
    return Checkout(lines[1], None if status is None else bool(status.strip()))


def version_line() -> str:
    """`incastlab 0.1.0 (commit 2964b1a1b2c3, dirty)`, or `incastlab 0.1.0 (no git checkout)`."""
    co = checkout()
    if co.commit is None:
        return f"incastlab {package_version()} (no git checkout)"
    state = {True: ", dirty", False: "", None: ", state unknown"}[co.dirty]
    return f"incastlab {package_version()} (commit {co.commit[:12]}{state})"


def provenance(command: list[str]) -> Provenance:
    """What starts this run: this code's version and commit, and `command` (`incastlab` first)."""
    co = checkout()
    return Provenance(package_version(), co.commit, co.dirty, tuple(command), os.getcwd())
