"""Short-lived tool processes (uv) that die with envbuilder, and the run-wide stop flag.

Each child runs as its own process group (a terminal's Ctrl-C reaches envbuilder only, which stops
the groups itself) with ``PR_SET_PDEATHSIG`` (a SIGKILLed envbuilder takes them along). On an
interrupt :func:`stop_all` kills every running group; :data:`STOPPING` tells the stages that what
they are computing now must not be stored. Temporary folders live under ``<workdir>/tmp`` and carry
the owner's pid, so a later run removes what a killed one left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

STOPPING = threading.Event()
_RUNNING: set[subprocess.Popen[str]] = set()
_LOCK = threading.Lock()


class Interrupted(BaseException):
    """The run is being stopped (Ctrl-C, SIGTERM): nothing computed now may be stored."""


def _die_with_parent() -> None:
    from envbuilder.runners import die_with_parent

    die_with_parent()


def run(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``argv`` to completion, capturing its output, as its own process group.

    The whole group is killed when ``timeout_s`` passes (:class:`subprocess.TimeoutExpired`), when
    the run is stopped (:class:`Interrupted`) and on any other way out.
    """
    if STOPPING.is_set():
        raise Interrupted
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", env=dict(env) if env is not None else None, cwd=cwd,
                            start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip
    with _LOCK:
        _RUNNING.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        raise
    finally:
        _kill(proc)
        with _LOCK:
            _RUNNING.discard(proc)
    if STOPPING.is_set():
        raise Interrupted
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def stop_all() -> None:
    """Mark the run as stopping and kill every running child group."""
    STOPPING.set()
    with _LOCK:
        procs = list(_RUNNING)
    for p in procs:
        _kill(p)


@contextlib.contextmanager
def temp_dir(workdir: Path, purpose: str) -> Iterator[Path]:
    """A temporary folder ``<workdir>/tmp/<purpose>-<pid>-…``, removed on every way out."""
    root = workdir / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{purpose}-{os.getpid()}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def clean_stale_temp(workdir: Path) -> list[Path]:
    """Remove temporary folders whose owner process is gone (a SIGKILLed run's); returns them."""
    root = workdir / "tmp"
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for p in root.iterdir():
        parts = p.name.split("-")
        pid = next((int(x) for x in parts[1:] if x.isdigit() and x.isascii()), None)
        if pid is None or pid == os.getpid() or not _alive(pid):
            if pid == os.getpid():
                continue
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
