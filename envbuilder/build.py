"""build: turn a cell's lock into an environment that runs — a uv venv (``runner = "venv"``) or a Docker
image (``runner = "docker"``).

The venv is installed with ``uv pip sync pylock.toml`` (hash-checked, no resolver at install time),
sharing uv's cache so repeats are cheap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from envbuilder import lock
from envbuilder.errors import StageFailure
from envbuilder.matrix import Cell
from envbuilder.pipeline import RunContext
from envbuilder.results import CellResult, Reason, StageResult, Status
from envbuilder.uvbin import uv_bin


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def build_venv(cell: Cell, lock_path: Path, venv: Path, log_path: Path, index_args: list[str] | None = None,
               timeout_s: float = 3600) -> dict[str, Any]:  # fmt: skip
    """Create ``venv`` for the cell's Python and sync it to the lock; raises StageFailure when it cannot.

    The lock is installed as pinned, hash-checked requirements from the indexes it was resolved
    against (exactly its artifacts, no resolver), so uv's cache of built wheels is reused.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = venv.with_name(venv.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with log_path.open("w") as log:
        mk = subprocess.run([uv_bin(), "venv", "--quiet", "--no-python-downloads", "--python", cell.python, str(tmp)],
                            stdout=log, stderr=subprocess.STDOUT, check=False, timeout=120)  # fmt: skip
        if mk.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StageFailure(Status.SKIP, Reason.NOT_APPLICABLE,
                               f"Python {cell.python} is not installed on this machine (the venv runner needs it; "
                               f"use the docker runner or a machine with Python {cell.python})")  # fmt: skip
        reqs = tmp / "envbuilder-lock.txt"
        reqs.write_text(lock.requirements_with_hashes(lock.read(lock_path)))
        sync = subprocess.run([uv_bin(), "pip", "sync", "--require-hashes", "--python", str(venv_python(tmp)),
                               *(index_args or []), str(reqs)],
                              stdout=log, stderr=subprocess.STDOUT, check=False, timeout=timeout_s,
                              env={**os.environ})  # fmt: skip
    if sync.returncode != 0:
        tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        shutil.rmtree(tmp, ignore_errors=True)
        raise StageFailure(Status.FAIL, Reason.BUILD_FAILED,
                           f"uv pip sync failed: {tail[0] if tail else 'no output'} (log: {log_path})")  # fmt: skip
    shutil.rmtree(venv, ignore_errors=True)
    tmp.rename(venv)  # a venv is only ever complete or absent
    # uv writes absolute paths into the venv: fix the ones that named the .partial folder
    for f in (venv / "bin").iterdir():
        if f.is_file() and not f.is_symlink():
            try:
                text = f.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            if str(tmp) in text:
                f.write_text(text.replace(str(tmp), str(venv)))
    cfg = venv / "pyvenv.cfg"
    if cfg.exists():
        cfg.write_text(cfg.read_text().replace(str(tmp), str(venv)))
    return {"venv": str(venv), "python": str(venv_python(venv)), "log": str(log_path)}


class BuildStage:
    """``build``: the cell's environment (venv here; Docker images in :mod:`envbuilder.images`)."""

    name = "build"
    requires: tuple[str, ...] = ("resolve",)
    max_workers = 1

    def __init__(self, runner: str | None = None) -> None:
        self.runner = runner

    def _runner(self, ctx: RunContext) -> str:
        return self.runner or ctx.matrix.build.runner

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        r = prior.stage("resolve")
        return {"runner": self._runner(ctx), "lock": r.details.get("lock_sha256") if r else None,
                "python": cell.python}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        if old.status is not Status.PASS:
            return True
        py = old.details.get("python")
        return bool(py) and Path(str(py)).exists()

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        if ctx.matrix.server.command is not None:
            return StageResult(name=self.name, status=Status.SKIP, reason=Reason.NOT_APPLICABLE,
                               message="custom [server] command: no environment to build")  # fmt: skip
        lock_path = ctx.workspace.locks(cell.id) / "pylock.toml"
        if not lock_path.exists():
            raise StageFailure(Status.ERROR, Reason.PREREQUISITE_FAILED, f"no lock at {lock_path}: run resolve first")
        runner = self._runner(ctx)
        if runner == "venv":
            resolved = prior.stage("resolve")
            index_args = list(resolved.details.get("index_args", [])) if resolved else []
            details = build_venv(cell, lock_path, ctx.workspace.venvs(cell.id), ctx.workspace.logs(cell.id) / "build.log",
                                 index_args)  # fmt: skip
            n = len(lock.read(lock_path).packages)
            return StageResult(name=self.name, status=Status.PASS,
                               message=f"venv with {n} packages at {details['venv']}", details={**details, "runner": "venv"})  # fmt: skip
        from envbuilder.images import build_image_stage

        return build_image_stage(ctx, cell, lock_path)
