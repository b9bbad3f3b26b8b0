"""Runners: where a cell's server runs — a local process (the cell's venv or a custom command), a
Docker container of the cell's image, or an external server someone else started.

Every runner is a context manager: teardown (SIGTERM to the process group / container stop, then
SIGKILL after a grace period) runs on every path — success, exception, Ctrl-C — and even when the
start itself fails. Each start leaves a pid file (or a container label) so ``envbuilder gc`` can
remove what a killed orchestrator left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from envbuilder.monitor import Event, Exited, LogLine

GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1


class ServerHandle(Protocol):
    """A started server: its events (log lines, exit) and where it answers."""

    @property
    def events(self) -> queue.Queue[Event]: ...

    @property
    def base_url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when envbuilder dies, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ProcessHandle:
    proc: subprocess.Popen[bytes]
    base_url: str
    events: queue.Queue[Event] = field(default_factory=queue.Queue)

    @property
    def pid(self) -> int | None:
        return self.proc.pid


def _pump(stream: IO[bytes], events: queue.Queue[Event]) -> None:
    for raw in iter(stream.readline, b""):
        # progress bars redraw with \r: each redraw is a line of its own for the monitor
        for part in raw.decode(errors="replace").rstrip("\n").split("\r"):
            if part.strip():
                events.put(LogLine(text=part.rstrip(), t=time.monotonic()))
    stream.close()


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = GRACE_S) -> int | None:
    """SIGTERM the whole process group, SIGKILL it after ``grace_s``; returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # children that outlived the leader (engine workers) go too
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


class LocalRunner:
    """Runs the server as a local process group (the cell's venv, or a custom command)."""

    def __init__(self, run_dir: Path, grace_s: float = GRACE_S) -> None:
        self.run_dir = run_dir
        self.grace_s = grace_s

    @contextmanager
    def start(self, argv: Sequence[str], *, env: Mapping[str, str], base_url: str, name: str) -> Iterator[ProcessHandle]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pidfile = self.run_dir / f"{name}.pid"
        proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env), start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        handle = ProcessHandle(proc=proc, base_url=base_url)
        try:
            write_pidfile(pidfile, proc.pid, argv)
            assert proc.stdout is not None
            reader = threading.Thread(target=_pump, args=(proc.stdout, handle.events), daemon=True)
            reader.start()

            def waiter() -> None:
                code = proc.wait()
                reader.join(5)
                handle.events.put(Exited(code=code, t=time.monotonic()))

            threading.Thread(target=waiter, daemon=True).start()
            yield handle
        finally:
            stop_process_group(proc, self.grace_s)
            with contextlib.suppress(FileNotFoundError):
                pidfile.unlink()


@dataclass
class ExternalHandle:
    base_url: str
    events: queue.Queue[Event] = field(default_factory=queue.Queue)
    pid: int | None = None


class ExternalRunner:
    """A server someone else started (``--base-url``): nothing to start or stop."""

    @contextmanager
    def start(self, argv: Sequence[str], *, env: Mapping[str, str], base_url: str, name: str) -> Iterator[ExternalHandle]:
        yield ExternalHandle(base_url=base_url)


def run_group(argv: Sequence[str], *, run_dir: Path, name: str, log: IO[str], env: Mapping[str, str],
              timeout_s: float) -> int:  # fmt: skip
    """Run ``argv`` to completion as its own process group with a pid file (a build's uv and the compilers
    it starts): the group is stopped on every path here, and by :func:`gc` after a SIGKILL of envbuilder.
    A group a killed run left under the same name is stopped first. Returns the exit status (124: timeout)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    gc(run_dir, only=name)
    pidfile = run_dir / f"{name}.pid"
    proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(env), start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
    try:
        write_pidfile(pidfile, proc.pid, argv)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return 124
    finally:
        stop_process_group(proc)
        pidfile.unlink(missing_ok=True)


def proc_start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after "(comm)", which may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def write_pidfile(pidfile: Path, pid: int, argv: Sequence[str]) -> None:
    """Record a started group: its pid, command line and start time (what :func:`gc` checks before signalling)."""
    pidfile.write_text(json.dumps({"pid": pid, "argv": list(argv), "started": time.time(),
                                   "start_ticks": proc_start_ticks(pid)}))  # fmt: skip


def is_ours(pid: int, argv: Sequence[str], start_ticks: int | None) -> bool:
    """Whether process ``pid`` is still the one envbuilder started: same start time (and command line), or,
    its leader gone, a process of its session started no earlier (a compiler the leader left behind)."""
    ticks = proc_start_ticks(pid)
    if ticks is not None:
        if start_ticks is None or ticks != start_ticks:
            return False
        cmd = _proc_cmdline(pid)
        tail = list(argv)[1:]
        # a zombie leader (its children still running) has an empty command line; its start time still matches
        return cmd is not None and (not tail or not cmd or cmd[-len(tail):] == tail)
    if start_ticks is None:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
            if int(fields[2]) == pid and int(fields[3]) == pid and int(fields[19]) >= start_ticks:
                return True
        except (OSError, IndexError, ValueError):
            continue
    return False


def gc(run_dir: Path, grace_s: float = 2.0, only: str | None = None) -> list[str]:
    """Stop servers and builds whose orchestrator died (pid files left in ``run_dir``; ``only``: that name).

    A pid file's group is signalled only while it is still the one envbuilder started (:func:`is_ours`):
    a stale file whose pid now belongs to someone else is removed without a signal."""
    removed: list[str] = []
    if not run_dir.is_dir():
        return removed
    for pidfile in sorted(run_dir.glob(f"{only}.pid" if only else "*.pid")):
        try:
            info = json.loads(pidfile.read_text())
            pid = int(info["pid"])
            argv = [str(a) for a in info.get("argv", [])]
            ticks = info.get("start_ticks")
            ticks = int(ticks) if isinstance(ticks, int) and not isinstance(ticks, bool) else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            pidfile.unlink(missing_ok=True)
            continue
        if pid <= 1 or not is_ours(pid, argv, ticks):
            pidfile.unlink(missing_ok=True)
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            removed.append(f"process group {pid} ({pidfile.stem})")
        pidfile.unlink(missing_ok=True)
    return removed
