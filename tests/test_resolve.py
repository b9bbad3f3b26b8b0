"""Resolve: real uv against PyPI (the measured facts) and against a real local index (hermetic cases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuilder import lock, matrix
from envbuilder.pipeline import RunContext, RunOptions, Workspace, run_pipeline
from envbuilder.resolve import ResolveStage
from envbuilder.results import CellResult, Reason, Status
from tests.conftest import envbuilder, write
from tests.localindex import LocalIndex, serve


def _run(tmp_path: Path, text: str, *, drift: bool = False, cuda_index: str | None = None) -> list[CellResult]:
    m = matrix.load(write(tmp_path / "matrix.toml", text))
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"),
                     options=RunOptions(retries=0, backoff_s=0.1, cuda_index=cuda_index))
    return run_pipeline(ctx, m.cells(), [ResolveStage(drift=drift)])


# --- live: PyPI, as of each release (stable as PyPI moves) ----------------------------------

LIVE = """
[matrix]
sglang = ["0.5.9", "0.5.10", "0.5.11"]
cuda = ["12.8", "13.0"]
os = ["ubuntu24.04"]
python = ["3.12"]
[[matrix.exclude]]
sglang = "0.5.9"
cuda = "13.0"
[[matrix.exclude]]
sglang = "0.5.10"
cuda = "13.0"
[[matrix.exclude]]
sglang = "0.5.11"
cuda = "12.8"
[[matrix.include]]
sglang = "0.5.11"
cuda = "13.0"
os = "ubuntu20.04"
python = "3.12"
[[matrix.include]]
sglang = "0.5.11"
flash_attn_4 = "4.0.0b4"
cuda = "13.0"
os = "ubuntu24.04"
python = "3.12"
[[matrix.include]]
sglang = "0.5.11"
flash_attn_4 = "none"
cuda = "13.0"
os = "ubuntu24.04"
python = "3.12"
[model]
path = "Qwen/Qwen3.6-27B"
"""


@pytest.mark.network
def test_live_facts_as_of_release(tmp_path: Path) -> None:
    text = LIVE.replace('sglang = ["0.5.9", "0.5.10", "0.5.11"]', 'sglang = ["0.5.9", "0.5.10", "0.5.11"]\nflash_attn_4 = ["resolver"]')
    results = {r.id: r for r in _run(tmp_path, text)}

    def key(cell: str) -> dict[str, str]:
        s = results[cell].stage("resolve")
        assert s is not None and s.status is Status.PASS, (cell, s)
        return dict(s.details["key_packages"]) | {"cuda": s.details["cuda"]}

    v9 = key("sglang-0.5.9_fa4-resolver_cu12.8_drv-host_ubuntu24.04_py3.12")
    assert v9["torch"] == "2.9.1" and v9["cuda"] == "12.8" and v9["nvidia-cuda-runtime-cu12"] == "12.8.90"
    assert v9["sgl-kernel"] == "0.3.21" and v9["transformers"] == "4.57.1" and "flash-attn-4" not in v9

    v10 = key("sglang-0.5.10_fa4-resolver_cu12.8_drv-host_ubuntu24.04_py3.12")
    assert v10["torch"] == "2.9.1" and v10["sglang-kernel"] == "0.4.1" and v10["transformers"] == "5.3.0"
    assert lock_version(v10, "flash-attn-4") >= "4.0.0b4"

    v11 = key("sglang-0.5.11_fa4-resolver_cu13.0_drv-host_ubuntu24.04_py3.12")
    assert v11["torch"] == "2.11.0" and v11["cuda"] == "13.0" and v11["kernels"] == "0.14.0"
    assert v11["transformers"] == "5.6.0"
    s11 = results["sglang-0.5.11_fa4-resolver_cu13.0_drv-host_ubuntu24.04_py3.12"].stage("resolve")
    assert s11 is not None and s11.details["as_of"].startswith("2026-05-08")
    assert s11.details["packages"]["nvidia-cutlass-dsl"] == "4.4.2"
    assert Path(s11.details["lock"]).name == "pylock.toml"

    old_glibc = results["sglang-0.5.11_fa4-resolver_cu13.0_drv-host_ubuntu20.04_py3.12"].stage("resolve")
    assert old_glibc is not None and old_glibc.status is Status.FAIL
    assert old_glibc.reason is Reason.NO_WHEEL_FOR_PLATFORM
    assert "manylinux_2_34_x86_64" in old_glibc.message and "glibc 2.31" in old_glibc.message

    pinned = results["sglang-0.5.11_fa4-4.0.0b4_cu13.0_drv-host_ubuntu24.04_py3.12"].stage("resolve")
    assert pinned is not None and pinned.reason is Reason.UNSATISFIABLE
    assert pinned.message == "sglang 0.5.11 requires flash-attn-4>=4.0.0b9; cell pins flash-attn-4==4.0.0b4"

    forbidden = results["sglang-0.5.11_fa4-none_cu13.0_drv-host_ubuntu24.04_py3.12"].stage("resolve")
    assert forbidden is not None and forbidden.reason is Reason.UNSATISFIABLE
    assert "sglang 0.5.11 requires flash-attn-4" in forbidden.message and "forbids" in forbidden.message


def lock_version(key: dict[str, str], name: str) -> str:
    from packaging.version import Version

    return str(Version(key[name]))


@pytest.mark.network
def test_live_drift_lists_kernels(tmp_path: Path) -> None:
    text = 'sglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n'
    (r,) = _run(tmp_path, "[matrix]\n" + text + '[model]\npath = "Qwen/Qwen3.6-27B"\n', drift=True)
    s = r.stage("resolve")
    assert s is not None and s.status is Status.PASS
    drift = {d["name"]: d for d in s.details["drift"]}
    assert drift["kernels"]["as_of"] == "0.14.0"
    assert drift["kernels"]["fresh"] != "0.14.0"


@pytest.mark.network
def test_live_cli_resolve_then_cached(tmp_path: Path) -> None:
    m = write(tmp_path / "m.toml", '[matrix]\nsglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n[model]\npath = "Qwen/Qwen3.6-27B"\n')
    args = ("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "resolve", "--json")
    first = envbuilder(*args)
    assert first.code == 0, first.err
    lockfile = tmp_path / "wd/locks/sglang-0.5.11_cu13.0_drv-host_ubuntu24.04_py3.12/pylock.toml"
    parsed = lock.read(lockfile)
    assert parsed.version("kernels") == "0.14.0"
    assert all(w.sha256 for p in parsed.packages.values() for w in p.wheels)
    second = envbuilder(*args)
    assert second.code == 0 and "(cached)" not in second.out
    assert json.loads(second.out)[0]["stages"][0]["inputs"] == json.loads(first.out)[0]["stages"][0]["inputs"]
    lockfile.unlink()  # a missing output is not reused
    third = envbuilder(*args)
    assert third.code == 0 and lockfile.exists()


# --- hermetic: a real local index served over HTTP ------------------------------------------


def _cells(index_url: str, axes: str, extra: str = "") -> str:
    return f'[matrix]\n{axes}\n[model]\npath = "Qwen/Qwen3.6-27B"\n[server]\nengine = "llama-cpp"\n[resolve]\nindexes = ["{index_url}"]\n{extra}'


def test_conflicting_pins_are_explained(tmp_path: Path) -> None:
    idx = LocalIndex(tmp_path / "idx")
    idx.add("engine-pkg", "1.0", requires=["helper>=2"])
    idx.add("helper", "1.0")
    idx.add("helper", "2.0")
    with serve(idx):
        axes = 'engine_pkg = ["1.0"]\nhelper = ["1.0", "resolver"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\npython = ["3.11"]'
        res = {r.axes["helper"]: r.stage("resolve") for r in _run(tmp_path, _cells(idx.url, axes))}
    bad, good = res["1.0"], res["resolver"]
    assert bad is not None and bad.status is Status.FAIL and bad.reason is Reason.UNSATISFIABLE
    assert bad.message == "engine-pkg 1.0 requires helper>=2; cell pins helper==1.0"
    assert good is not None and good.status is Status.PASS and good.details["packages"]["helper"] == "2.0"


def test_missing_platform_wheel_names_existing_platforms(tmp_path: Path) -> None:
    idx = LocalIndex(tmp_path / "idx")
    idx.add("engine-pkg", "1.0", tag="py3-none-manylinux_2_34_x86_64")
    with serve(idx):
        axes = 'engine_pkg = ["1.0"]\ncuda = ["none"]\nos = ["ubuntu20.04", "ubuntu22.04"]\npython = ["3.11"]'
        res = {r.axes["os"]: r.stage("resolve") for r in _run(tmp_path, _cells(idx.url, axes))}
    old, new = res["ubuntu20.04"], res["ubuntu22.04"]
    assert old is not None and old.reason is Reason.NO_WHEEL_FOR_PLATFORM and old.status is Status.FAIL
    assert "manylinux_2_34_x86_64" in old.message and "glibc 2.31" in old.message
    assert new is not None and new.status is Status.PASS


def test_unreachable_index_is_error_network_not_incompatible(tmp_path: Path) -> None:
    axes = 'engine_pkg = ["1.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\npython = ["3.11"]'
    (r,) = _run(tmp_path, _cells("http://127.0.0.1:9/simple", axes))
    s = r.stage("resolve")
    assert s is not None and s.status is Status.ERROR and s.reason is Reason.NETWORK
    assert "127.0.0.1:9" in s.message


def _torch_indexes(tmp_path: Path) -> tuple[LocalIndex, LocalIndex]:
    """A default index whose torch carries CUDA 12.8, and a CUDA index with a 13.0 build of the same torch."""
    pypi = LocalIndex(tmp_path / "pypi")
    pypi.add("torch", "2.0.0", requires=["nvidia-cuda-runtime-cu12==12.8.90"])
    pypi.add("nvidia-cuda-runtime-cu12", "12.8.90")
    pypi.add("engine-pkg", "1.0", requires=["torch==2.0.0"])
    cu130 = LocalIndex(tmp_path / "cu130")
    cu130.add("torch", "2.0.0+cu130", requires=["nvidia-cuda-runtime==13.0.96"])
    cu130.add("nvidia-cuda-runtime", "13.0.96")
    return pypi, cu130


def test_cuda_variant_index_and_mismatch(tmp_path: Path) -> None:
    """PyPI's torch carries CUDA 12.8; a cell asking for 13.0 is resolved again against the CUDA index."""
    pypi, cu130 = _torch_indexes(tmp_path)
    with serve(pypi), serve(cu130):
        axes = 'engine_pkg = ["1.0"]\ncuda = ["12.8", "13.0", "12.9", "12.6"]\nos = ["ubuntu24.04"]\npython = ["3.11"]'
        configured = f'cuda_indexes = {{"13.0" = "{cu130.url}", "12.9" = "{cu130.url}"}}\n'
        res = {r.axes["cuda"]: r.stage("resolve") for r in _run(tmp_path, _cells(pypi.url, axes, configured))}
    assert res["12.8"] is not None and res["12.8"].status is Status.PASS and res["12.8"].details["cuda"] == "12.8"
    s13 = res["13.0"]
    assert s13 is not None and s13.status is Status.PASS, s13
    assert s13.details["cuda"] == "13.0" and s13.details["packages"]["torch"] == "2.0.0+cu130"
    s129 = res["12.9"]  # the "CUDA index" has only a 13.0 build: the lock carries the wrong CUDA
    assert s129 is not None and s129.status is Status.FAIL and s129.reason is Reason.CUDA_MISMATCH
    assert "carries CUDA 13.0" in s129.message and "asks for 12.9" in s129.message
    s126 = res["12.6"]  # no index configured for 12.6: cannot decide, and the result names the setting
    assert s126 is not None and s126.status is Status.ERROR and s126.reason is Reason.CUDA_MISMATCH
    assert 'add [resolve] cuda_indexes = {"12.6" = "<url>"}' in s126.message


def test_cuda_template_option_still_fills_unconfigured_cudas(tmp_path: Path) -> None:
    pypi, cu130 = _torch_indexes(tmp_path)
    with serve(pypi), serve(cu130):
        template = cu130.url.replace("cu130", "cu{nodot}")
        axes = 'engine_pkg = ["1.0"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.11"]'
        (r,) = _run(tmp_path, _cells(pypi.url, axes), cuda_index=template)
    s = r.stage("resolve")
    assert s is not None and s.status is Status.PASS and s.details["packages"]["torch"] == "2.0.0+cu130", s


def test_as_of_release_reads_upload_time_from_pep691(tmp_path: Path) -> None:
    idx = LocalIndex(tmp_path / "idx")
    idx.add("engine-pkg", "1.0", requires=["helper"], uploaded="2026-03-01T10:00:00Z")
    idx.add("helper", "1.0", uploaded="2026-02-01T00:00:00Z")
    idx.add("helper", "2.0", uploaded="2026-06-01T00:00:00Z")  # released after the engine: not picked as-of
    with serve(idx):
        axes = 'engine_pkg = ["1.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\npython = ["3.11"]'
        (asof,) = _run(tmp_path / "a", _cells(idx.url, axes), drift=True)
        (fresh,) = _run(tmp_path / "b", _cells(idx.url, axes, 'as_of = "fresh"\n'))
    s = asof.stage("resolve")
    assert s is not None and s.status is Status.PASS and s.details["as_of"].startswith("2026-03-02T10:00")
    assert s.details["packages"]["helper"] == "1.0"
    assert s.details["drift"] == [{"name": "helper", "as_of": "1.0", "fresh": "2.0"}]
    f = fresh.stage("resolve")
    assert f is not None and f.details["packages"]["helper"] == "2.0" and f.details["as_of"] is None
