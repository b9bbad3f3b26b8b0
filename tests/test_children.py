"""Interrupts and kills: SIGINT/SIGTERM/SIGKILL at several points of `resolve` and `run`, then a re-run. Nothing
stored is lost or corrupt, no uv outlives envbuilder, no temp folder is left; Ctrl-C at start-up is one line;
`gc` signals only the process envbuilder started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder import children
from envbuilder.results import load_result_file
from envbuilder.runners import gc, write_pidfile
from tests.conftest import ROOT, envbuilder, write
from tests.localindex import LocalIndex, serve


def _procs_naming(text: str) -> list[int]:
    """Live processes whose command line names ``text`` (the workdir: uv's scratch paths are under it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            raw = cmdline.read_bytes()
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if text.encode() in raw and state != "Z":
            found.append(int(cmdline.parent.name))
    return found


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    idx = LocalIndex(tmp_path_factory.mktemp("idx"))
    for v in ("1.0", "2.0", "3.0"):
        idx.add("engine-pkg", v, requires=["dep-a", "dep-b"])
    for dep in ("dep-a", "dep-b"):
        idx.add(dep, "1.0")
    with serve(idx):
        yield idx


def _matrix(tmp_path: Path, index: LocalIndex) -> Path:
    return write(tmp_path / "matrix.toml", '[matrix]\nengine_pkg = ["1.0", "2.0", "3.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\n'
                 f'python = ["3.11"]\n[model]\npath = "m"\n[server]\nengine = "llama-cpp"\n[resolve]\nindexes = ["{index.url}"]\nas_of = "fresh"\n'
                 '[build]\nrunner = "venv"\n')  # fmt: skip


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "envbuilder", *args], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"}, start_new_session=True)  # fmt: skip


def _signal(p: subprocess.Popen[str], sig: signal.Signals) -> None:
    """SIGINT as a terminal's Ctrl-C sends it: to the whole foreground process group (uv included, were it
    there); SIGTERM and SIGKILL as `kill` sends them: to envbuilder alone."""
    if sig is signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)


def _wait_for(pred: object, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("point", ["uv-started", "uv-running"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_kill_during_resolve_force_loses_nothing(tmp_path: Path, index: LocalIndex, sig: signal.Signals,
                                                 point: str) -> None:  # fmt: skip
    m = _matrix(tmp_path, index)
    wd = tmp_path / "wd"
    base = ["--matrix", str(m), "--workdir", str(wd)]
    assert envbuilder(*base, "resolve").code == 0
    before = {p.name: p.read_bytes() for p in (wd / "results").glob("*.json")}
    index.delay_s = 0.7  # every answer is slow: the forced re-resolution is still running when the signal comes
    try:
        p = _start([*base, "resolve", "--force", "--jobs", "3"])
        assert _wait_for(lambda: _procs_naming(str(wd / "tmp"))), "uv never started"
        time.sleep(0.05 if point == "uv-started" else 1.0)
        _signal(p, sig)
        _, err = p.communicate(timeout=30)
    finally:
        index.delay_s = 0.0
    assert "Traceback" not in err
    assert p.returncode == (-9 if sig is signal.SIGKILL else 130), err
    if sig is not signal.SIGKILL:
        assert err.strip().splitlines()[-1].startswith("interrupted"), err
    assert _wait_for(lambda: not _procs_naming(str(wd)), 5), "uv outlived envbuilder"
    for f in (wd / "results").glob("*.json"):  # nothing stored lost or half-written: every cell still passes
        r = load_result_file(f)
        stage = r.stage("resolve")
        assert stage is not None and stage.status.value == "pass", (f.name, stage)
    assert set(before) == {p.name for p in (wd / "results").glob("*.json")}
    if sig is not signal.SIGKILL:
        assert not list((wd / "tmp").iterdir())
    again = envbuilder(*base, "resolve")
    assert again.code == 0, again
    assert not list((wd / "tmp").iterdir()), "a killed run's temp folder survived the next run"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_kill_during_run_build_then_rerun(tmp_path: Path, index: LocalIndex, sig: signal.Signals) -> None:
    m = _matrix(tmp_path, index)
    wd = tmp_path / "wd"
    base = ["--matrix", str(m), "--workdir", str(wd)]
    index.delay_s = 0.5
    try:
        p = _start([*base, "run", "engine_pkg=1.0", "--checks", "none"])
        assert _wait_for(lambda: any(b"pip" in Path(f"/proc/{pid}/cmdline").read_bytes() and b"sync" in
                                     Path(f"/proc/{pid}/cmdline").read_bytes() for pid in _procs_naming(str(wd)))), \
            "the build never started"  # fmt: skip
        _signal(p, sig)
        _, err = p.communicate(timeout=30)
    finally:
        index.delay_s = 0.0
    assert "Traceback" not in err
    assert _wait_for(lambda: not _procs_naming(str(wd)), 5), "uv outlived envbuilder"
    (res,) = (wd / "results").glob("*.json")
    r = load_result_file(res)
    assert [s.name for s in r.stages] == ["resolve", "precheck"]  # the interrupted build stored nothing
    again = envbuilder(*base, "run", "engine_pkg=1.0", "--checks", "none")
    assert "Traceback" not in again.err
    r = load_result_file(res)
    build = r.stage("build")
    assert build is not None and build.status.value == "pass", build
    assert not [p for p in (wd / "venvs").iterdir() if ".partial" in p.name]
    assert not list((wd / "tmp").iterdir()) and not list((wd / "run").glob("*.pid"))


INTERRUPT_AT = """
import os, signal, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while envbuilder's own imports load
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["envbuilder", "--matrix", {matrix!r}, "expand"]
from envbuilder.__main__ import main
raise SystemExit(main())
"""


@pytest.mark.parametrize("module", ["envbuilder.cli", "rich.console", "envbuilder.matrix", "packaging.version",
                                    "envbuilder.cli.stages"])
def test_ctrl_c_at_startup_is_one_line(tmp_path: Path, module: str) -> None:
    """The first tens of milliseconds are imports: a Ctrl-C there is one line and exit 130, never a traceback."""
    m = write(tmp_path / "matrix.toml", '[matrix]\ncuda = ["none"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\nx = ["1.0"]\n'
              '[model]\npath = "m"\n')
    p = subprocess.run([sys.executable, "-c", INTERRUPT_AT.format(module=module, matrix=str(m))], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert "Traceback" not in p.stderr and p.returncode == 130, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines() == ["interrupted"]


def test_gc_signals_only_the_process_envbuilder_started(tmp_path: Path) -> None:
    """A stale pid file whose pid now belongs to another process (start time differs) is removed, not signalled."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pidfile = tmp_path / "server-x.pid"
        write_pidfile(pidfile, other.pid, ["sleep", "60"])
        info = json.loads(pidfile.read_text())
        pidfile.write_text(json.dumps({**info, "start_ticks": info["start_ticks"] - 1}))  # an older process of that pid
        assert gc(tmp_path) == [] and not pidfile.exists()
        assert other.poll() is None  # still running: never signalled
        pidfile.write_text(json.dumps({**info, "argv": ["python", "-m", "something-else"]}))
        assert gc(tmp_path) == [] and other.poll() is None
        pidfile.write_text(json.dumps({k: v for k, v in info.items() if k != "start_ticks"}))  # no identity recorded
        assert gc(tmp_path) == [] and other.poll() is None
        write_pidfile(pidfile, other.pid, ["sleep", "60"])  # the real one
        assert gc(tmp_path) == [f"process group {other.pid} (server-x)"]
        assert other.wait(5) is not None
    finally:
        other.kill()
        other.wait()


def test_children_die_with_a_timeout_and_temp_folders_are_cleaned(tmp_path: Path) -> None:
    t = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(["sh", "-c", "sleep 31.4159 & sleep 31.4159 & wait"], timeout_s=0.5)
    assert time.monotonic() - t < 5
    assert _wait_for(lambda: not _procs_naming("31.4159"), 3)
    stale = tmp_path / "tmp" / "resolve-999999999-abc"  # a dead owner's
    stale.mkdir(parents=True)
    live = tmp_path / "tmp" / f"resolve-{os.getpid()}-abc"
    live.mkdir()
    assert children.clean_stale_temp(tmp_path) == [stale] and live.exists()
