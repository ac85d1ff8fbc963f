"""The run folder: where every result of an experiment lands, written as it is produced.

JSON documents are replaced atomically (write to a temporary file, then rename), so a run killed
at any moment leaves either the old or the new version, never half a file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def write_json(path: Path, doc: Any) -> None:
    """Write JSON atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSON lines (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a torn last line (a crash mid-write) is skipped."""
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def read_steps(path: Path) -> list[dict[str, Any]]:
    """A worker log's step records (its `done` line and other events left out)."""
    return [r for r in read_jsonl(path) if "step" in r and "event" not in r]


class RunFolder:
    """results/<YYYYmmdd-HHMMSS>/ with a `latest` link beside it."""

    def __init__(self, root: Path, name: str | None = None, link_latest: bool = True) -> None:
        base = name or time.strftime("%Y%m%d-%H%M%S")
        path = root / base
        k = 1
        while path.exists():
            k += 1
            path = root / f"{base}-{k}"
        self.path = path
        self.path.mkdir(parents=True)
        if link_latest:
            self._link_latest(root)

    def _link_latest(self, root: Path) -> None:
        """results/latest -> this run (what `make report` reads by default)."""
        latest = root / "latest"
        try:
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(self.path.name)
        except OSError:
            pass

    def strategy_dir(self, strategy: str) -> Path:
        """The folder of one strategy's run."""
        d = self.path / strategy
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write(self, rel: str, doc: Any) -> Path:
        """Write a JSON document at a path relative to the run folder."""
        target = self.path / rel
        write_json(target, doc)
        return target
