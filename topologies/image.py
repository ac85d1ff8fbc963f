"""The worker image `incastlab/worker:<version>`: built from workloads/Dockerfile, offline.

`make image` (python -m topologies.image) stages a build context of the host's wheelhouse (torch's
CPU build and what it needs, downloaded by the host's pip, `make deps` does it ahead) and the
workload code (runmodel/ and workloads/), on a base that is INCASTLAB_BASE_IMAGE when given, else a
minimal Debian that debootstrap makes (or INCASTLAB_BASE_ROOTFS, a tar of that tree made ahead: the
VM's box has one) and `docker import` turns into `incastlab/base:bookworm`.

Two labels say what an image was built from: `incastlab.code` (the hash of the Dockerfile and the
code the containers run: workloads/ and the run-model modules it imports) and `incastlab.inputs`
(that, the base image's id and the wheels). A build whose inputs are those of the image there is
skipped, so `make image` takes seconds when nothing changed; at run time an image whose code is not
this checkout's is not used (topologies.containers).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "workloads" / "Dockerfile"
CODE_DIRS = ("runmodel", "workloads")
BASE_IMAGE = "incastlab/base:bookworm"
BASE_ENV = "INCASTLAB_BASE_IMAGE"
BASE_ROOTFS_ENV = "INCASTLAB_BASE_ROOTFS"  # a tar of the base's tree, used instead of debootstrap
BASE_ROOTFS = Path("/opt/incastlab/base-bookworm.tar")  # where make vm-box puts one in the VM's box
WHEELHOUSE = ROOT / "build" / "wheelhouse"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
IMAGE_LABEL = "incastlab.image"  # every incastlab-built image carries it (value: worker or base)
# what the image's python needs from the wheelhouse, pinned as requirements.txt pins them
IMAGE_REQUIREMENTS = ("torch", "numpy")


class ImageError(RuntimeError):
    """The image cannot be built or used; one line saying why."""


def version() -> str:
    """The project's version (the image's tag)."""
    try:
        return importlib.metadata.version("incastlab")
    except importlib.metadata.PackageNotFoundError:
        for line in (ROOT / "pyproject.toml").read_text().splitlines():
            if line.startswith("version"):
                return line.split("=", 1)[1].strip().strip('"')
        return "0"


WORKER_IMAGE = f"incastlab/worker:{version()}"


def docker_bin() -> str | None:
    """The docker client that came with the daemon (the distribution's), else the first on PATH."""
    for path in ("/usr/bin/docker",):
        if os.access(path, os.X_OK):
            return path
    return shutil.which("docker")


def docker(
    *args: str,
    timeout: float = 60,
    check: bool = True,
    input: str | None = None,  # noqa: A002
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the docker client; ImageError with its last stderr line on failure."""
    exe = docker_bin()
    if exe is None:
        raise ImageError("docker is not installed: run `make deps`")
    try:
        proc = subprocess.run(
            [exe, *args], capture_output=True, text=True, timeout=timeout, input=input, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageError(
            f"`docker {args[0]}` did not answer within {timeout:g} s (is dockerd hung?)"
        ) from exc
    if check and proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise ImageError(f"docker {' '.join(args[:2])}: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc


def daemon_answers(timeout: float = 5) -> bool:
    """True when dockerd answers the client."""
    try:
        proc = docker("version", "--format", "{{.Server.Version}}", timeout=timeout, check=False)
        return proc.returncode == 0
    except ImageError:
        return False


def inspect_image(ref: str) -> dict | None:
    """`docker image inspect` of one image, or None when there is no such image."""
    proc = docker("image", "inspect", ref, check=False)
    if proc.returncode != 0:
        return None
    doc = json.loads(proc.stdout)
    return doc[0] if doc else None


def labels(info: dict | None) -> dict[str, str]:
    """An inspected image's labels."""
    return dict(((info or {}).get("Config") or {}).get("Labels") or {})


def container_code() -> list[Path]:
    """The files the containers run: every file under workloads/, and the run-model modules they import
    (at any depth), found by reading their imports; so a change elsewhere leaves the image current."""
    import ast

    todo = [p for p in sorted((ROOT / "workloads").rglob("*.py")) if "__pycache__" not in p.parts]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.exists():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else (
                    [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level
                    else []
                )
            )
            for name in names:
                if name.split(".")[0] in CODE_DIRS:
                    base = ROOT.joinpath(*name.split("."))
                    todo += [base.with_suffix(".py"), base / "__init__.py"]
                    if isinstance(node, ast.ImportFrom):
                        todo += [base / f"{a.name}.py" for a in node.names]
    for d in CODE_DIRS:  # the packages' own __init__ runs on any import of them
        seen.add(ROOT / d / "__init__.py")
    other = [
        p
        for p in (ROOT / "workloads").rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    return sorted({p for p in seen if p.exists()} | set(other))


def code_hash() -> str:
    """Hash of the Dockerfile and every file of the code the containers run (container_code)."""
    h = hashlib.sha256()
    for path in [DOCKERFILE] + [p for p in container_code() if p != DOCKERFILE]:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def image_current(ref: str = WORKER_IMAGE) -> tuple[bool, str]:
    """(usable, why not): the image exists and was built from this checkout's code."""
    info = inspect_image(ref)
    if info is None:
        return False, f"no image {ref} (build it with `make image`)"
    if labels(info).get("incastlab.code") != code_hash():
        return False, f"image {ref} was built from other workload code (rebuild it with `make image`)"
    return True, ""


# -- the parts of a build ---------------------------------------------------------------------------
def pinned_requirements() -> list[str]:
    """The image's requirements, pinned as the project's requirements.txt pins them."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            pins[line.split("==")[0].strip().lower()] = line
    return [pins.get(name, name) for name in IMAGE_REQUIREMENTS]


def wheelhouse_dir(py: str) -> Path:
    """Where the wheels for a Python version (e.g. "3.11") go."""
    return WHEELHOUSE / f"cp{py.replace('.', '')}"


def download_wheels(py: str, say: Callable[[str], None]) -> Path:
    """The host's pip downloads torch (CPU), numpy, their dependencies and pip itself for Python `py`
    of the image's platform; nothing is downloaded when the wheelhouse already has them."""
    dest = wheelhouse_dir(py)
    reqs = pinned_requirements()
    stamp = dest / "requirements.txt"
    if stamp.exists() and stamp.read_text().split() == reqs and list(dest.glob("pip-*.whl")):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    machine = platform.machine()
    plats = [f"manylinux_2_{k}_{machine}" for k in (28, 27, 17)]
    plats += [f"manylinux2014_{machine}", f"linux_{machine}"]
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        "--only-binary=:all:",
        "--python-version",
        py,
        "--implementation",
        "cp",
    ]
    for p in plats:
        argv += ["--platform", p]
    if os.environ.get("INCASTLAB_TORCH_INDEX"):
        argv += ["--extra-index-url", os.environ["INCASTLAB_TORCH_INDEX"]]
    say(f"wheelhouse: downloading {' '.join(reqs)} and pip for Python {py} into {dest}")
    t0 = time.monotonic()
    proc = subprocess.run(argv + reqs + ["pip"], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise ImageError(f"pip download failed: {lines[-1] if lines else proc.returncode}")
    stamp.write_text("\n".join(reqs) + "\n")
    size = sum(p.stat().st_size for p in dest.iterdir()) / 2**20
    n = len(list(dest.glob("*.whl")))
    say(f"wheelhouse: {n} wheels, {size:.0f} MiB, in {time.monotonic() - t0:.0f} s")
    return dest


def base_rootfs() -> Path | None:
    """A tar of the base's tree made ahead (make vm-box bakes one into the VM's box, whose
    provisioning has no network), or None: then debootstrap makes it from the mirror."""
    given = os.environ.get(BASE_ROOTFS_ENV)
    if given and not Path(given).is_file():
        raise ImageError(f"{BASE_ROOTFS_ENV}={given}: no such file")
    path = Path(given) if given else BASE_ROOTFS
    return path if path.is_file() else None


def debootstrap_base(say: Callable[[str], None]) -> None:
    """incastlab/base:bookworm: Debian's minbase with python3, from the Debian mirror, imported."""
    t0 = time.monotonic()
    tarball = base_rootfs()
    if tarball is not None:
        say(f"base: {tarball} (Debian's minbase with python3, debootstrapped ahead)")
        with tarball.open("rb") as f:
            _import_base(f)
        say(f"base: {BASE_IMAGE} in {time.monotonic() - t0:.0f} s ({size_of(BASE_IMAGE)})")
        return
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed: run `make deps`")
    with tempfile.TemporaryDirectory(prefix="incastlab-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        say(f"base: debootstrap --variant=minbase bookworm with python3 (from {DEBIAN_MIRROR})")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(root), DEBIAN_MIRROR],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise ImageError(f"debootstrap failed: {lines[-1] if lines else proc.returncode}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        try:
            _import_base(tar.stdout)
        finally:
            tar.stdout.close()
            tar.wait()
    say(f"base: {BASE_IMAGE} in {time.monotonic() - t0:.0f} s ({size_of(BASE_IMAGE)})")


def _import_base(tar: IO[bytes]) -> None:
    """`docker import` of a root tree's tar stream as the base image, labelled as incastlab's."""
    exe = docker_bin() or "docker"
    imp = subprocess.run(
        [
            exe,
            "import",
            "--change",
            f"LABEL {IMAGE_LABEL}=base",
            "--change",
            'CMD ["/bin/bash"]',
            "-",
            BASE_IMAGE,
        ],
        stdin=tar,
        capture_output=True,
        text=True,
    )
    if imp.returncode != 0:
        raise ImageError(f"docker import failed: {imp.stderr.strip()[-200:]}")


def size_of(ref: str) -> str:
    """An image's size, e.g. "1.52 GB"."""
    info = inspect_image(ref)
    return f"{(info or {}).get('Size', 0) / 1e9:.2f} GB"


def image_python(base: str) -> str:
    """The base image's python version ("3.11")."""
    proc = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "sh",
        base,
        "-c",
        "exec $(command -v python3 || command -v python) -c "
        "'import sys; print(\"%d.%d\" % sys.version_info[:2])'",
        timeout=120,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        said = (proc.stderr or "").strip().splitlines()
        raise ImageError(
            f"base image {base}: no python3 answers in it" + (f" ({said[-1][-200:]})" if said else "")
        )
    return proc.stdout.strip().splitlines()[-1]


def stage_context(ctx: Path, wheels: Path) -> None:
    """The build context: the wheels (hard links where possible) and the code."""
    (ctx / "wheels").mkdir(parents=True)
    for whl in wheels.iterdir():
        try:
            os.link(whl, ctx / "wheels" / whl.name)
        except OSError:
            shutil.copy2(whl, ctx / "wheels" / whl.name)
    for d in CODE_DIRS:
        shutil.copytree(
            ROOT / d,
            ctx / "incastlab" / d,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "Dockerfile"),
        )


def build(say: Callable[[str], None], force: bool = False) -> dict:
    """Build the worker image unless the one there has the same inputs; returns what was done."""
    if not daemon_answers():
        raise ImageError("dockerd does not answer (start it with `make deps`)")
    t0 = time.monotonic()
    base = os.environ.get(BASE_ENV, "").strip() or BASE_IMAGE
    base_info = inspect_image(base)
    if base_info is None:
        if base != BASE_IMAGE:
            raise ImageError(
                f"{BASE_ENV}={base}: no such image here (pull or load it first; no registry "
                "is reachable from this machine)"
            )
        debootstrap_base(say)
        base_info = inspect_image(base)
        assert base_info is not None
    py = image_python(base)
    wheels = download_wheels(py, say)
    code = code_hash()
    parts = [code, base, base_info["Id"], sorted(p.name for p in wheels.iterdir())]
    inputs = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    old = inspect_image(WORKER_IMAGE)
    if old is not None and labels(old).get("incastlab.inputs") == inputs and not force:
        secs = time.monotonic() - t0
        say(f"image: {WORKER_IMAGE} is up to date ({size_of(WORKER_IMAGE)}, checked in {secs:.1f} s)")
        return {"image": WORKER_IMAGE, "built": False, "seconds": secs, "size": size_of(WORKER_IMAGE)}
    say(f"image: building {WORKER_IMAGE} on {base} (Python {py})")
    with tempfile.TemporaryDirectory(prefix="incastlab-image-", dir=WHEELHOUSE.parent) as tmp:
        ctx = Path(tmp)
        stage_context(ctx, wheels)
        env = dict(os.environ, DOCKER_BUILDKIT="0")
        env.pop("INCASTLAB_RUN", None)
        t1 = time.monotonic()
        proc = docker(
            "build",
            "--force-rm",
            "-f",
            str(DOCKERFILE),
            "--build-arg",
            f"BASE={base}",
            "--label",
            f"incastlab.code={code}",
            "--label",
            f"incastlab.inputs={inputs}",
            "--label",
            f"incastlab.base={base}",
            "-t",
            WORKER_IMAGE,
            str(ctx),
            timeout=3600,
            check=False,
            env=env,
        )
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).strip().splitlines() if ln.strip()]
            raise ImageError(f"docker build failed: {lines[-1] if lines else proc.returncode}")
    if old is not None and old["Id"] != (inspect_image(WORKER_IMAGE) or {}).get("Id"):
        docker("image", "rm", old["Id"], check=False)  # the image it replaced, now untagged
    secs = time.monotonic() - t0
    say(
        f"image: {WORKER_IMAGE} built in {secs:.0f} s (docker build {time.monotonic() - t1:.0f} s), "
        f"{size_of(WORKER_IMAGE)}"
    )
    return {"image": WORKER_IMAGE, "built": True, "seconds": secs, "size": size_of(WORKER_IMAGE)}


def main(argv: list[str] | None = None) -> int:
    """`make image`: build (or confirm) the worker image; `--wheels` only fills the wheelhouse."""
    p = argparse.ArgumentParser(prog="make image", description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", action="store_true", help="only download the wheelhouse (make deps does)")
    p.add_argument("--python", default="3.11", help="with --wheels: the image's Python (default: 3.11)")
    p.add_argument("--force", action="store_true", help="build even when the inputs did not change")
    args = p.parse_args(argv)

    def say(msg: str) -> None:
        print(f"[incastlab image] {msg}", file=sys.stderr, flush=True)

    try:
        if args.wheels:
            download_wheels(args.python, say)
        else:
            build(say, force=args.force)
    except ImageError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
