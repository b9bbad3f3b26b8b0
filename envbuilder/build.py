"""build: turn a cell's lock into an environment that runs — a uv venv (``runner = "venv"``) or a Docker
image (``runner = "docker"``).

The venv is installed with ``uv pip sync pylock.toml`` (hash-checked, no resolver at install time),
sharing uv's cache so repeats are cheap.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from envbuilder import dockerapi, indexconfig, lock
from envbuilder.artifacts import BuiltEnvironment
from envbuilder.errors import StageFailure
from envbuilder.images import build_image_stage, image_exists
from envbuilder.matrix import Cell
from envbuilder.pipeline import RunContext, progress_sink
from envbuilder.redact import restore_urls
from envbuilder.results import CellResult, Reason, StageResult, Status
from envbuilder.runners import run_group
from envbuilder.uvbin import uv_bin
from envbuilder.wheelhouse import read_freeze


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def find_python(spec: str) -> str:
    """An interpreter's path from a path, a name (``python3``) or a version (``3.12``): PATH first, then uv."""
    if os.sep in spec:
        return spec
    # what the user runs: the first on PATH (a GPU box's python3 is often a venv, e.g. /opt/torch/.venv)
    found = shutil.which(spec) or (shutil.which(f"python{spec}") if re.fullmatch(r"\d+(\.\d+)*", spec) else None)
    if found:
        return found
    p = subprocess.run([uv_bin(), "python", "find", "--system", "--no-python-downloads", spec], capture_output=True,
                       text=True, check=False, timeout=60, env=clean_env())  # fmt: skip
    if p.returncode != 0:
        raise StageFailure(Status.SKIP, Reason.PYTHON_UNAVAILABLE, f"no Python {spec} on this machine")
    return p.stdout.strip()


def site_packages(python: str) -> list[str]:
    """The site-packages folders of an interpreter (a system Python's dist-packages, or a venv's)."""
    p = subprocess.run([find_python(python), "-c", "import json, site; print(json.dumps(site.getsitepackages() + "
                                         "([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])))"],
                       capture_output=True, text=True, check=False, timeout=60, env=clean_env())  # fmt: skip
    if p.returncode != 0:
        raise StageFailure(Status.ERROR, Reason.NOT_APPLICABLE, f"cannot run {python}: {p.stderr.strip()[-300:]}")
    return [str(x) for x in json.loads(p.stdout)]


def venv_base(spec: str, *, provides: bool) -> tuple[str, list[str]]:
    """The interpreter venvs are made from and, when its packages are provided to them, that exact
    interpreter (not any Python of the version) with its site-packages."""
    if not provides:
        return spec, []
    interpreter = find_python(spec)
    return interpreter, site_packages(interpreter)


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """The environment for a process that must see only ``venv`` (and what it was told to provide):
    no PYTHONPATH or PYTHONHOME of ours leaking in, the venv's ``bin`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def create_venv(python: str, dest: Path, log: IO[str], provided_from: Sequence[str] = ()) -> bool:
    """``uv venv`` for ``python`` at ``dest``. ``provided_from``: site-packages folders appended after the
    venv's own (a ``.pth``), so packages the runner already has are used and the venv's own win."""
    mk = subprocess.run([uv_bin(), "venv", "--quiet", "--no-python-downloads", "--python", python, str(dest)],
                        stdout=log, stderr=subprocess.STDOUT, check=False, timeout=120, env=clean_env())  # fmt: skip
    if mk.returncode != 0:
        return False
    if provided_from:  # addsitedir, not a bare path: the provider's own .pth files are processed too
        lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in provided_from)
        for sp in (dest / "lib").glob("python*/site-packages"):
            (sp / "_envbuilder_provided.pth").write_text(lines)
    return True


def sync_venv(venv: Path, requirements: Path, index_args: Sequence[str], log: IO[str], *, hashes: bool,
              timeout_s: float = 3600, env: Mapping[str, str] | None = None,
              run_dir: Path | None = None) -> int:  # fmt: skip
    """``uv pip sync`` the venv to exactly ``requirements``; returns uv's exit status.

    With ``run_dir``, uv (and any compiler it starts for an sdist) runs as a process group with a pid file:
    a killed run's build is stopped before the next one starts, never left holding uv's cache lock.
    """
    argv = [uv_bin(), "pip", "sync", "--python", str(venv_python(venv)), *index_args, str(requirements)]
    if hashes:
        argv.insert(3, "--require-hashes")
    full_env = {**clean_env(), **(env or {})}
    if run_dir is not None:
        return run_group(argv, run_dir=run_dir, name=f"build-{venv.name.split('.partial')[0]}", log=log,
                         env=full_env, timeout_s=timeout_s)  # fmt: skip
    return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False, timeout=timeout_s,
                          env=full_env).returncode  # fmt: skip


def offline_index_args(find_links: Sequence[str]) -> list[str]:
    """uv options that install from local wheel folders only (an air-gapped runner's wheelhouse)."""
    return ["--offline", "--no-index", *(a for d in find_links for a in ("--find-links", str(d)))]


@dataclass(frozen=True, kw_only=True)
class Provided:
    """Packages the runner's interpreter already has (``--provided FREEZE``): left out of the venv and
    taken from that interpreter's site-packages instead."""

    versions: dict[str, str]
    source: str

    def note(self, locked: dict[str, str]) -> list[str]:
        return [f"{n} {v} provided (lock: {locked[n]})" for n, v in sorted(self.versions.items())
                if n in locked and locked[n] != v]  # fmt: skip


def sync_failure(log_text: str) -> str:
    """One line for a failed ``uv pip sync``: uv's ``error:`` line, what the failing build itself said last
    (e.g. a placeholder sdist's "The installation of cuda-tile for version 1.6.0rc5 failed."), and whether
    a host could not be resolved; else the log's last line."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    if not lines:
        return "no output"
    err = next((ln for ln in lines if ln.startswith("error:")), None)
    said = next((ln for ln in reversed(lines) if re.search(r"(?:\bfailed|[A-Za-z]Error: .+)\.?$", ln)
                 and not ln.startswith(("hint:", "error:", "cause:", "raise "))), None)  # fmt: skip
    dns = any(re.search(r"Name or service not known|Temporary failure in name resolution", ln) for ln in lines)
    parts = [p for p in (err, said) if p]
    if dns:
        parts.append("(the build tried to reach a host it could not resolve)")
    return " ".join(parts) if parts else lines[-1]


def build_venv(cell: Cell, lock_path: Path, venv: Path, log_path: Path, index_args: list[str] | None = None,
               timeout_s: float = 3600, provided: Provided | None = None, python: str | None = None,
               env: Mapping[str, str] | None = None, run_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Create ``venv`` for the cell's Python and sync it to the lock; raises StageFailure when it cannot.

    The lock is installed as pinned, hash-checked requirements from the indexes it was resolved
    against (exactly its artifacts, no resolver), so uv's cache of built wheels is reused.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for old in venv.parent.glob(venv.name + ".partial*"):  # what a killed run left
        shutil.rmtree(old, ignore_errors=True)
    # a fresh name per attempt: a uv a killed run left behind cannot write into this one
    tmp = venv.with_name(f"{venv.name}.partial-{os.getpid()}")
    lk = lock.read(lock_path)
    interpreter, paths = venv_base(python or cell.python, provides=provided is not None)
    with log_path.open("w") as log:
        if not create_venv(interpreter, tmp, log, paths):
            shutil.rmtree(tmp, ignore_errors=True)
            raise StageFailure(Status.SKIP, Reason.PYTHON_UNAVAILABLE,
                               f"Python {interpreter} is not installed on this machine (the venv runner needs it; "
                               f"use the docker runner or a machine with Python {cell.python})")  # fmt: skip
        reqs = tmp / "envbuilder-lock.txt"
        reqs.write_text(lock.requirements_with_hashes(lk, exclude=set(provided.versions) if provided else set()))
        code = sync_venv(tmp, reqs, index_args or [], log, hashes=True, timeout_s=timeout_s, env=env, run_dir=run_dir)
    if code != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StageFailure(Status.FAIL, Reason.BUILD_FAILED,
                           f"uv pip sync failed: {sync_failure(log_path.read_text(errors='replace'))} (log: {log_path})")  # fmt: skip
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
    out: dict[str, Any] = {"venv": str(venv), "python": str(venv_python(venv)), "log": str(log_path)}
    if provided:
        out["provided"] = {"source": provided.source, "site_packages": paths, "notes": provided.note(lk.versions()),
                           "count": sum(1 for n in lk.versions() if n in provided.versions)}  # fmt: skip
    return out


@dataclass(frozen=True, kw_only=True)
class Runner:
    """The runner a cell builds with here; ``why`` says why it is not the one the matrix asked for."""

    name: str  # "docker" | "venv" | "none" (neither works here)
    why: str = ""


_DOCKER_HERE: dict[str, bool] = {}


def docker_here() -> bool:
    """Whether a Docker engine answers here (asked once per engine address and process)."""
    where = dockerapi.engine_address()
    if where not in _DOCKER_HERE:
        _DOCKER_HERE[where] = dockerapi.available()
    return _DOCKER_HERE[where]


def engine_address() -> str:
    return dockerapi.engine_address()


def provided_from(ctx: RunContext) -> Provided | None:
    """``--provided FREEZE`` of this run, read."""
    path = ctx.options.provided
    if not path:
        return None
    return Provided(versions=read_freeze(Path(path)), source=str(path))


class BuildStage:
    """``build``: the cell's environment (venv here; Docker images in :mod:`envbuilder.images`)."""

    name = "build"
    requires: tuple[str, ...] = ("resolve",)
    max_workers = 1

    def __init__(self, runner: str | None = None) -> None:
        self.runner = runner

    def _runner(self, ctx: RunContext, cell: Cell) -> str:
        return self.runner or ctx.matrix.build.runner_for(cell)

    def _effective(self, ctx: RunContext, cell: Cell) -> Runner:
        """The runner this cell builds with here: the asked one, or the venv runner when the matrix asks for
        Docker, no engine answers and the cell's Python exists here (``--runner docker`` never falls back)."""
        asked = self._runner(ctx, cell)
        if asked != "docker" or self.runner == "docker":
            return Runner(name=asked)
        if docker_here():
            return Runner(name="docker")
        python = ctx.options.python or cell.python
        try:
            find_python(python)
        except StageFailure:
            return Runner(name="none", why=f"no Docker engine answers at {engine_address()} and there is no "
                          f"Python {python} here for a venv: install Docker and start it, or build venvs with "
                          f"`--runner venv --python PATH` (a Python {cell.python})")  # fmt: skip
        return Runner(name="venv", why=f"no Docker engine answers at {engine_address()}: built a venv with "
                      f"Python {python} instead (install and start Docker for images)")  # fmt: skip

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        resolved = prior.lock()
        provided = provided_from(ctx)
        return {"custom_command": ctx.matrix.server.command is not None,
                "runner": self._effective(ctx, cell).name, "env": ctx.matrix.build.env, "lock": resolved.sha256 if resolved else None,
                "python": ctx.options.python or cell.python, "find_links": list(ctx.options.find_links) or None,
                "provided": provided.versions if provided else None,
                "base_image": ctx.options.base_image or ctx.matrix.build.base_image}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        if old.status is not Status.PASS:
            return True
        env = old.artifact
        return isinstance(env, BuiltEnvironment) and own_environment(ctx, cell, env) and PRESENT[env.kind](env)

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        if ctx.matrix.server.command is not None:
            return StageResult(name=self.name, status=Status.SKIP, reason=Reason.NOT_APPLICABLE,
                               message="custom [server] command: no environment to build")  # fmt: skip
        lock_path = ctx.workspace.locks(cell.id) / "pylock.toml"
        if not lock_path.exists():
            raise StageFailure(Status.ERROR, Reason.PREREQUISITE_FAILED, f"no lock at {lock_path}: run resolve first")
        chosen = self._effective(ctx, cell)
        if chosen.name == "none":
            raise StageFailure(Status.SKIP, Reason.DOCKER_UNAVAILABLE, chosen.why)
        result = BUILDERS[chosen.name](ctx, cell, prior, lock_path)
        if chosen.why:  # built with the venv runner because no Docker engine answers here
            result = replace(result, message=f"{result.message}; {chosen.why}",
                             details={**result.details, "fallback": chosen.why})
        return result


def build_venv_stage(ctx: RunContext, cell: Cell, prior: CellResult, lock_path: Path) -> StageResult:
    """The venv runner: a uv venv here, synced to the lock from the indexes it was resolved with."""
    resolved = prior.lock()
    if ctx.options.find_links:
        index_args = offline_index_args(ctx.options.find_links)
    else:
        # stored redacted: the credentials come back from the matrix, never from a result file
        stored = list(resolved.index_args) if resolved else []
        index_args = restore_urls(stored, [*indexconfig.configured(ctx.matrix.resolve.indexes), *ctx.matrix.resolve.find_links,
                                                *ctx.matrix.resolve.cuda_indexes.values()])
    provided = provided_from(ctx)
    details = build_venv(cell, lock_path, ctx.workspace.venvs(cell.id), ctx.workspace.logs(cell.id) / "build.log",
                         index_args, provided=provided, python=ctx.options.python,
                         env=ctx.matrix.build.env, run_dir=ctx.workspace.root / "run")  # fmt: skip
    n = len(lock.read(lock_path).packages)
    extra = ""
    if "provided" in details:
        pv = details["provided"]
        extra = f" ({pv['count']} provided by {ctx.options.python or cell.python}"
        extra += f"; {len(pv['notes'])} at another version than the lock's)" if pv["notes"] else ")"
    return StageResult(name="build", status=Status.PASS,
                       message=f"venv with {n} packages at {details['venv']}{extra}",
                       details={**details, "runner": "venv"},
                       artifact=BuiltEnvironment(kind="venv", python=str(details["python"]),
                                                 venv=str(details["venv"])))  # fmt: skip


# The runners' registry: how a cell's environment is built ([build] runner), and how to tell it still exists.
BUILDERS: dict[str, Callable[[RunContext, Cell, CellResult, Path], StageResult]] = {
    "venv": build_venv_stage,
    "docker": lambda ctx, cell, _prior, lock_path: build_image_stage(
        ctx, cell, lock_path, progress=progress_sink(ctx, cell.id, "build")),
}
def own_environment(ctx: RunContext, cell: Cell, env: BuiltEnvironment) -> bool:
    """Whether ``env`` is one this workdir builds for ``cell`` (a stored result may come from elsewhere, by
    merge): a venv under ``<workdir>/venvs/<cell>``, an image tagged ``envbuilder/<cell>:…``."""
    if env.kind == "image":
        return (env.image or "").startswith(f"envbuilder/{cell.id.lower()}:")
    return Path(env.python).parent.resolve().is_relative_to(ctx.workspace.venvs(cell.id).resolve())


PRESENT: dict[str, Callable[[BuiltEnvironment], bool]] = {
    "venv": lambda env: Path(env.python).exists(),
    "image": lambda env: image_exists(env.image or ""),
}
