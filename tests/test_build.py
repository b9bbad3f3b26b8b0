"""build + import against a real Docker engine (a local debootstrap base image) and real venvs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder import images, matrix
from envbuilder.build import BuildStage
from envbuilder.importcheck import ImportStage, check_flags, help_options
from envbuilder.matrix import Cell
from envbuilder.pipeline import RunContext, RunOptions, Workspace, run_pipeline
from envbuilder.resolve import ResolveStage
from envbuilder.results import CellResult, Reason, Status
from tests.conftest import ROOT, RUNS, write

SMALL = """
[matrix]
six = ["1.16.0", "1.17.0"]
cuda = ["none"]
os = ["debian12"]
python = ["3.11"]
[model]
path = "Qwen/Qwen3.6-27B"
[server]
engine = "llama-cpp"
args = []
[resolve]
extra = ["packaging==24.2"]
as_of = "fresh"
[build]
runner = "docker"
base_image = "{base}"
"""


@pytest.fixture
def fresh_images(base_image: str) -> Iterator[str]:
    """Remove this test's images before and after, so a previous run's tags do not count as cache hits."""
    import docker

    client = docker.from_env()

    def purge() -> None:
        for img in client.images.list(name="envbuilder/six-*"):
            for tag in img.tags:
                client.images.remove(tag, force=True)

    purge()
    yield base_image
    purge()
    client.close()


def _run(tmp_path: Path, text: str, stages: list[object], force: frozenset[str] = frozenset()) -> list[CellResult]:
    m = matrix.load(write(tmp_path / "matrix.toml", text))
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"), options=RunOptions(), force_stages=force)
    return run_pipeline(ctx, m.cells(), stages)  # type: ignore[arg-type]


@pytest.mark.docker
@pytest.mark.network
def test_images_share_layers_skip_when_tagged_and_import_smoke(tmp_path: Path, fresh_images: str) -> None:
    base_image = fresh_images
    text = SMALL.format(base=base_image)
    stages = [ResolveStage(), BuildStage(), ImportStage()]
    first = {r.axes["six"]: r for r in _run(tmp_path, text, stages)}
    a, b = first["1.16.0"], first["1.17.0"]
    for r in (a, b):
        assert r.stage("build").status is Status.PASS, r.stage("build")  # type: ignore[union-attr]
        imp = r.stage("import")
        assert imp is not None and imp.status is Status.PASS, imp
        assert imp.details["probe"]["modules"]["six"]["version"] == r.axes["six"]
    ba, bb = a.stage("build"), b.stage("build")
    assert ba is not None and bb is not None
    assert ba.details["image"].startswith("envbuilder/six-1.16.0_cpu_drv-host_debian12_py3.11:")
    # the second cell shares the stack image (base, uv, Python, the venv): built once, reused
    assert bb.details["built"] and ba.details["layers"]["stack"]["image"] == bb.details["layers"]["stack"]["image"]
    assert bb.details["layers"]["stack"]["built"] is False
    import docker

    client = docker.from_env()
    la = client.images.get(ba.details["image"]).history()
    lb = client.images.get(bb.details["image"]).history()
    ids_a = [h["Id"] for h in la if h["Id"] != "<missing>"]
    ids_b = [h["Id"] for h in lb if h["Id"] != "<missing>"]
    assert set(ids_a) & set(ids_b)  # shared parent layers
    labels = client.images.get(ba.details["image"]).labels
    assert labels["envbuilder.cell"] == a.id and len(labels["envbuilder.lock-sha256"]) == 64
    dockerfile = Path(ba.details["dockerfile"]).read_text()
    assert f"FROM {ba.details['layers']['stack']['image']}" in dockerfile and "uv pip sync" in dockerfile
    # an unchanged cell's build result is reused while its image exists
    again = {r.axes["six"]: r for r in _run(tmp_path, text, stages)}
    assert again["1.16.0"].stage("build").to_json() == ba.to_json()  # type: ignore[union-attr]
    # forced, the build finds its content tag and does not rebuild
    forced = {r.axes["six"]: r for r in _run(tmp_path, text, stages, force=frozenset({"build"}))}
    assert forced["1.16.0"].stage("build").details["built"] is False  # type: ignore[union-attr]
    # the image gone, the stored result no longer counts: built again
    client.images.remove(ba.details["image"], force=True)
    rebuilt = {r.axes["six"]: r for r in _run(tmp_path, text, stages)}
    assert rebuilt["1.16.0"].stage("build").details["built"] is True  # type: ignore[union-attr]


@pytest.mark.docker
def test_no_docker_engine_is_error_not_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    from envbuilder.errors import StageFailure

    with pytest.raises(StageFailure) as e:
        images.docker_client()
    assert e.value.status is Status.ERROR and e.value.reason is Reason.DOCKER_UNAVAILABLE


def test_base_image_table_and_driver_bake(tmp_path: Path) -> None:
    cell = Cell(packages=(("sglang", "0.5.11"),), cuda="13.0", driver="580.126.09", os="ubuntu24.04", python="3.12")
    assert images.base_image(cell, None) == "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04"
    c128 = Cell(packages=(), cuda="12.8", driver="host", os="ubuntu22.04", python="3.12")
    assert images.base_image(c128, None) == "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04"
    assert images.base_image(c128, "my/base:1") == "my/base:1"
    lock_path = write(tmp_path / "pylock.toml", 'lock-version = "1.0"\ncreated-by = "test"\n')
    text, tag = images.render(cell, lock_path, tmp_path / "ctx", base="nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04")
    assert "NVIDIA-Linux-x86_64-580.126.09.run" in text and "--no-kernel-module" in text
    assert tag.startswith("envbuilder/sglang-0.5.11_cu13.0_drv-580.126.09_ubuntu24.04_py3.12:")
    host = Cell(packages=(("sglang", "0.5.11"),), cuda="13.0", driver="host", os="ubuntu24.04", python="3.12")
    text2, tag2 = images.render(host, lock_path, tmp_path / "ctx2", base="b")
    assert "NVIDIA-Linux" not in text2 and tag2 != tag
    stack_uv = list((tmp_path / "_stack").glob("*/uv"))  # uv lives in the shared stack context, one per base
    assert len(stack_uv) == 2 and all(u.stat().st_size > 1_000_000 for u in stack_uv)
    assert (tmp_path / "ctx2/Dockerfile").exists() and "FROM envbuilder/stack-py3.12:" in text2


def test_flag_check_with_recorded_0_5_11_help() -> None:
    options = help_options((RUNS / "0.5.11-h200/launch_server_help.txt").read_text())
    production = list(matrix.load(ROOT / "matrix.toml").server.args)  # the production launch flags
    problems, notes = check_flags(production, options)
    assert problems == [] and notes == []
    problems, notes = check_flags(["--speculative-algo", "NEXTN", "--cuda-graph-max-bs", "8"], options)
    assert problems == [] and notes == ["--speculative-algo is accepted as an abbreviation of --speculative-algorithm"]
    problems, _ = check_flags(["--speculative", "x", "--no-such-flag"], options)
    assert problems[0].startswith("--speculative is ambiguous: it could be --speculative-")
    assert problems[1].startswith("--no-such-flag does not exist")
    # 0.5.23 removed --cuda-graph-max-bs: what remains are longer flags it prefixes, so argparse calls it ambiguous
    without = {o for o in options if o != "--cuda-graph-max-bs"} | {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"}
    problems, _ = check_flags(["--cuda-graph-max-bs", "8"], without)
    assert problems == ["--cuda-graph-max-bs is ambiguous: it could be --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"]


@pytest.mark.network
def test_venv_runner_builds_and_import_smokes(tmp_path: Path) -> None:
    text = SMALL.format(base="unused").replace('runner = "docker"', 'runner = "venv"').replace('"1.16.0", ', "")
    (r,) = _run(tmp_path, text, [ResolveStage(), BuildStage(), ImportStage()])
    b, i = r.stage("build"), r.stage("import")
    assert b is not None and b.status is Status.PASS and Path(b.details["python"]).exists()
    assert i is not None and i.status is Status.PASS and i.details["probe"]["modules"]["six"]["version"] == "1.17.0"
    assert not list((tmp_path / "wd/venvs").glob("*.partial*"))


@pytest.mark.network
def test_venv_for_missing_python_is_skip(tmp_path: Path) -> None:
    text = SMALL.format(base="unused").replace('runner = "docker"', 'runner = "venv"').replace('python = ["3.11"]', 'python = ["3.99"]').replace('"1.16.0", ', "")
    (r,) = _run(tmp_path, text, [ResolveStage(), BuildStage()])
    b = r.stage("build")
    assert b is not None and b.status is Status.SKIP and "Python 3.99 is not installed" in b.message


def test_offline_venv_with_provided_packages(tmp_path: Path) -> None:
    """The air-gapped GPU box: wheels from a folder only, and what its Python already has is used, not installed."""
    from envbuilder.uvbin import uv_bin
    from tests.conftest import envbuilder
    from tests.localindex import breaking_index, serve

    idx = breaking_index(tmp_path / "idx")
    wd = tmp_path / "wd"
    with serve(idx):
        m = write(tmp_path / "matrix.toml", f'[matrix]\napp = ["1.0"]\ncuda = ["none"]\nos = ["debian12"]\n'
                                            f'python = ["3.11"]\n[model]\npath = "Qwen/Qwen3.6-27B"\n[resolve]\nindexes = ["{idx.url}"]\n[build]\nrunner = "venv"\n')  # fmt: skip
        assert envbuilder("--matrix", str(m), "--workdir", str(wd), "resolve").code == 0
        provider = tmp_path / "provider"
        subprocess.run([uv_bin(), "venv", "-q", "--python", "3.11", str(provider)], check=True)
        subprocess.run([uv_bin(), "pip", "install", "-q", "--python", str(provider / "bin/python"), "--index-url", idx.url,
                        "noise==2.0"], check=True)  # fmt: skip
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for w in idx.root.glob("*.whl"):
        if not w.name.startswith("noise"):
            (wheels / w.name).write_bytes(w.read_bytes())
    freeze = write(tmp_path / "freeze.txt", "noise==2.0\n")
    r = envbuilder("--matrix", str(m), "--workdir", str(wd), "build", "--find-links", str(wheels), "--provided",
                   str(freeze), "--python", str(provider / "bin/python"), "--json")  # fmt: skip
    assert r.code == 0, r.err
    (res,) = json.loads(r.out)
    b = next(s for s in res["stages"] if s["name"] == "build")
    i = next(s for s in res["stages"] if s["name"] == "import")
    assert b["status"] == "pass" and "(1 provided by" in b["message"] and "1 at another version" in b["message"]
    assert b["details"]["provided"]["notes"] == ["noise 2.0 provided (lock: 1.0)"]
    assert i["status"] == "pass", i["message"]
    site = next(Path(b["details"]["venv"]).glob("lib/python*/site-packages"))
    assert (site / "lib").is_dir() and not (site / "noise").exists()  # noise comes from the provider


def _group_alive(pgid: int) -> bool:
    """Processes of the group that are not zombies (a reparented zombie may wait for a busy init)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_a_killed_runs_build_is_stopped_before_the_next_one(tmp_path: Path) -> None:
    """SIGKILL envbuilder mid-build: uv dies with it (PDEATHSIG), the compilers it started are stopped by the
    next build of that cell (its pid file), so none holds uv's cache lock or burns the CPU."""
    import json
    import signal
    import sys
    import time

    from envbuilder.runners import gc

    script = ("import sys; from pathlib import Path; from envbuilder.runners import run_group\n"
              f"run_group(['sh', '-c', 'sleep 300 & sleep 300 & wait'], run_dir=Path({str(tmp_path)!r}), "
              "name='build-x', log=sys.stdout, env={'PATH': '/usr/bin:/bin'}, timeout_s=600)")  # fmt: skip
    p = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parent.parent)
    pidfile = tmp_path / "build-x.pid"
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    pgid = int(json.loads(pidfile.read_text())["pid"])
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    time.sleep(0.5)
    assert _group_alive(pgid), "the compilers outlive a SIGKILLed orchestrator (what gc is for)"
    assert gc(tmp_path, only="build-x") == [f"process group {pgid} (build-x)"]
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(pgid) and not pidfile.exists()


def test_a_failed_sync_is_told_by_uv_s_error_and_the_build_s_own_last_word() -> None:
    from envbuilder.build import sync_failure

    # lines of the real build log of sglang 0.5.18's release-day lock (cuda-tile 1.6.0rc5 is a placeholder sdist
    # that fetches the real wheel from another index at build time), the index's address left out
    log = """Resolved 190 packages in 2ms
error: Failed to build `cuda-tile==1.6.0rc5`
  |-> The build backend returned an error
  `-> Call to `wheel_stub.buildapi.build_wheel` failed (exit status: 1)
         socket.gaierror: [Errno -2] Name or service not known
             raise InstallFailedError(
         wheel_stub.error.InstallFailedError:
         The installation of cuda-tile for version 1.6.0rc5 failed.
hint: Build failures usually indicate a problem with the package or the build environment"""
    assert sync_failure(log) == ("error: Failed to build `cuda-tile==1.6.0rc5` The installation of cuda-tile for version "
                                 "1.6.0rc5 failed. (the build tried to reach a host it could not resolve)")
    assert sync_failure("") == "no output"
    assert sync_failure("x\nlast line") == "last line"
