"""precheck: CUDA/driver table boundaries, driver mismatch, architectures, glibc, VRAM fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuilder import matrix, model, precheck
from envbuilder.artifacts import HostFacts
from envbuilder.matrix import Cell
from envbuilder.results import Reason, Status
from tests.conftest import FIXTURES, envbuilder, write

A6000 = {"name": "NVIDIA RTX A6000", "memory_mib": 49140, "compute_capability": "8.6"}


def cell(cuda: str = "12.8", driver: str = "host") -> Cell:
    return Cell(packages=(("sglang", "0.5.11"),), cuda=cuda, driver=driver, os="ubuntu24.04", python="3.12")


def facts(module: str | None = "580.126.09", user: str | None = None, gpus: list[dict[str, Any]] | None = None) -> HostFacts:
    drv = {k: v for k, v in (("kernel_module", module), ("userspace", user or module)) if v}
    return HostFacts.from_json({"driver": drv, "gpus": gpus if gpus is not None else [A6000, A6000]})


# --- every toolkit row, at and around its boundary ------------------------------------------

ROWS = precheck.rules("cuda_driver")["toolkit"]


def _below(v: str) -> str:
    parts = [int(x) for x in v.split(".")]
    parts[-1] -= 1
    if parts[-1] < 0:
        parts[-1] = 0
        parts[-2] -= 1
    return ".".join(str(x) for x in parts)


@pytest.mark.parametrize("row", [r for r in ROWS if r["release"] == "GA"], ids=lambda r: r["cuda"])
def test_toolkit_rows_at_and_around_boundary(row: dict[str, str]) -> None:
    cuda, own = row["cuda"], row["driver"]
    at = precheck.check_cuda_driver(cell(cuda), facts(own))[0]
    assert at.status is Status.PASS and "warning" not in at.message
    below = precheck.check_cuda_driver(cell(cuda), facts(_below(own)))[0]
    floor = next(r["driver"] for r in precheck.rules("cuda_driver")["minor_compat"] if r["cuda_major"] == int(cuda.split(".")[0]))
    if precheck._v(_below(own)) >= precheck._v(floor):
        assert below.status is Status.PASS and below.message.startswith("warning") and "minor-version" in below.message
    else:
        assert below.status is Status.FAIL and below.reason is Reason.DRIVER_TOO_OLD


@pytest.mark.parametrize(("cuda", "driver", "status", "reason", "warn"), [
    ("12.8", "570.26", Status.PASS, Reason.OK, False),
    ("12.8", "570.25.99", Status.PASS, Reason.OK, True),     # above the 12.x floor: minor-version compatibility
    ("12.8", "525.60.13", Status.PASS, Reason.OK, True),
    ("12.8", "525.60.12", Status.FAIL, Reason.DRIVER_TOO_OLD, False),
    ("12.9", "575.51.03", Status.PASS, Reason.OK, False),
    ("13.1", "590.48.01", Status.PASS, Reason.OK, False),    # 13.1 U1: the production container's driver
    ("13.2", "595.45.04", Status.PASS, Reason.OK, False),
    ("13.2", "595.44", Status.PASS, Reason.OK, True),
    ("13.0", "580.65.06", Status.PASS, Reason.OK, False),
    ("13.0", "580.1", Status.PASS, Reason.OK, True),
    ("13.0", "575.64.05", Status.FAIL, Reason.DRIVER_TOO_OLD, False),  # 13.x needs >= 580
    ("13.1", "590.44.01", Status.PASS, Reason.OK, False),
    ("13.1", "580.126.09", Status.PASS, Reason.OK, True),
    ("12.8", "590.48.01", Status.PASS, Reason.OK, False),   # a newer driver runs an older toolkit
])
def test_cuda_driver_matrix(cuda: str, driver: str, status: Status, reason: Reason, warn: bool) -> None:
    (f,) = precheck.check_cuda_driver(cell(cuda), facts(driver))
    assert (f.status, f.reason, f.message.startswith("warning")) == (status, reason, warn), f.message


def test_baked_userspace_must_equal_kernel_module() -> None:
    (f,) = precheck.check_driver_mismatch(cell("13.0", driver="590.48.01"), facts("580.126.09"))
    assert f.status is Status.FAIL and f.reason is Reason.DRIVER_MISMATCH
    assert "Driver/library version mismatch" in f.message and "580.126.09" in f.message and "590.48.01" in f.message
    (ok,) = precheck.check_driver_mismatch(cell("13.0", driver="580.126.09"), facts("580.126.09"))
    assert ok.status is Status.PASS


def test_host_driver_upgraded_without_reboot() -> None:
    (f,) = precheck.check_driver_mismatch(cell(), facts("580.126.09", "590.48.01"))
    assert f.status is Status.FAIL and f.reason is Reason.DRIVER_MISMATCH and "reboot" in f.message


def test_unknown_driver_is_skip_not_pass() -> None:
    (f,) = precheck.check_cuda_driver(cell(), HostFacts.from_json({"driver": {}, "gpus": []}))
    assert f.status is Status.SKIP and f.reason is Reason.UNKNOWN_FACTS


def _matrix(tmp_path: Path, extra: str = "", model_path: str = "Qwen/Qwen3.6-27B", tp: int = 2) -> matrix.Matrix:
    text = (f'[matrix]\nsglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n'
            f'[model]\npath = "{model_path}"\ntp = {tp}\ncontext_length = 131072\n{extra}')
    return matrix.load(write(tmp_path / "matrix.toml", text))


LOCK = {"sglang-kernel": "0.4.2", "torch": "2.11.0", "flash-attn-4": "4.0.0b12"}


def _arch(tmp_path: Path, args: str, gpus: list[dict[str, Any]] | None = None,
          lock: dict[str, str] | None = None) -> list[precheck.Finding]:  # fmt: skip
    m = _matrix(tmp_path, f"[server]\nargs = {args}\n")
    return precheck.check_arch(cell("13.0"), m, facts(gpus=gpus), lock or LOCK)


def test_fa3_on_sm86_is_judged_as_sglang_judges_it(tmp_path: Path) -> None:
    # sgl-kernel's x86_64 FA3 has sm_80/sm_86/sm_90 kernels and SGLang accepts major 8 (non-MLA) and 9
    found = _arch(tmp_path, '["--attention-backend", "fa3"]')
    assert all(f.status is Status.PASS for f in found) and "fa3 (given)" in found[0].message
    t4 = {"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5"}
    (_note, fail) = [f for f in _arch(tmp_path, '["--attention-backend", "fa3"]', gpus=[t4, t4]) if f.rule == "arch"][:2]
    assert fail.status is Status.FAIL and fail.reason is Reason.ARCH_UNSUPPORTED and "7.5" in fail.message
    assert "FlashAttention 3" in fail.message and "sm_86" in fail.source


def test_default_backend_is_stated_and_checked(tmp_path: Path) -> None:
    cfg = FIXTURES / "models/qwen3.6-27b/config.json"
    m = _matrix(tmp_path, f'config = "{cfg}"\n')
    (note,) = precheck.check_arch(cell("13.0"), m, facts(), LOCK)
    assert note.status is Status.PASS and "picks flashinfer on sm 8.6" in note.message
    assert "triton for the linear-attention layers" in note.message
    h200 = HostFacts.from_json(json.loads((FIXTURES / "h200-doctor.json").read_text()))
    assert "picks fa3 on sm 9.0" in precheck.check_arch(cell("13.0"), m, h200, LOCK)[0].message


@pytest.mark.parametrize(("fa4", "status"), [("4.0.0b3", Status.FAIL), ("4.0.0b4", Status.FAIL),
                                             ("4.0.0b9", Status.PASS), ("4.0.0b12", Status.PASS)])
def test_fa4_architectures_by_beta(tmp_path: Path, fa4: str, status: Status) -> None:
    found = _arch(tmp_path, '["--attention-backend", "fa4"]', lock={**LOCK, "flash-attn-4": fa4})
    worst = max(found, key=lambda f: f.status.rank)
    assert worst.status is status
    if status is Status.FAIL:
        assert f"flash_attn.cute) {fa4} has no kernels for compute capability 8.6" in worst.message


def test_torch_cu130_x86_has_no_sm110(tmp_path: Path) -> None:
    thor = {"name": "Jetson Thor", "memory_mib": 131072, "compute_capability": "11.0"}
    found = _arch(tmp_path, "[]", gpus=[thor, thor])
    assert any(f.status is Status.FAIL and "PyTorch CUDA 13.0" in f.message for f in found)


def test_torch_needs_sm75(tmp_path: Path) -> None:
    v100 = {"name": "Tesla V100", "memory_mib": 32768, "compute_capability": "7.0"}
    (note, f) = precheck.check_arch(cell("12.8"), _matrix(tmp_path), facts(gpus=[v100]), {"torch": "2.9.1"})
    assert note.message.startswith("note: no attention backend given")
    assert f.status is Status.FAIL and "PyTorch" in f.message


# --- VRAM ------------------------------------------------------------------------------------


def test_qwen36_27b_fits_two_a6000_not_one(tmp_path: Path) -> None:
    cfg = FIXTURES / "models/qwen3.6-27b/config.json"
    extra = f'parameters = 27_800_000_000\nconfig = "{cfg}"\n'
    two = precheck.check_vram(_matrix(tmp_path, extra.replace("parameters", "dtype = 'bfloat16'\nparameters")), facts(), tmp_path)
    assert two[0].status is Status.PASS and "fits" in two[0].message
    one = precheck.check_vram(_matrix(tmp_path, extra, tp=1), facts(gpus=[A6000]), tmp_path)
    assert one[0].status is Status.FAIL and one[0].reason is Reason.VRAM_INSUFFICIENT
    assert "55.6 GB" in one[0].message and "does not fit" in one[0].message
    short = precheck.check_vram(_matrix(tmp_path, extra, tp=2), facts(gpus=[A6000]), tmp_path)
    assert short[0].status is Status.FAIL and "tp=2 needs 2 GPUs" in short[0].message


def test_hybrid_kv_only_in_full_attention_layers() -> None:
    cfg = model.read_config(FIXTURES / "models/qwen3.6-27b/config.json")
    assert model.full_attention_layers(cfg) == (16, 48)
    fp = model.footprint(matrix.ModelConfig(path="Qwen/Qwen3.6-27B", config=str(FIXTURES / "models/qwen3.6-27b/config.json"), parameters=27_800_000_000), Path())
    assert fp is not None
    assert fp.kv_bytes_per_token == 2 * 16 * 4 * 256 * 2  # 64 KiB per token, 16 of 64 layers
    assert fp.state_bytes_per_sequence > 0


def test_llama_style_parameter_estimates() -> None:
    llama = model.read_config(FIXTURES / "models/llama-3.1-8b/config.json")
    assert abs(model.estimate_parameters(llama) - 8.03e9) / 8.03e9 < 0.01
    smol = model.read_config(FIXTURES / "models/smollm2-135m/config.json")
    assert abs(model.estimate_parameters(smol) - 134.5e6) / 134.5e6 < 0.02
    fp = model.footprint(matrix.ModelConfig(path=str(FIXTURES / "models/llama-3.1-8b")), Path())
    assert fp is not None and fp.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_unknown_model_size_is_skip(tmp_path: Path) -> None:
    (f,) = precheck.check_vram(_matrix(tmp_path, model_path="nobody/unknown-model"), facts(), tmp_path)
    assert f.status is Status.SKIP and f.reason is Reason.UNKNOWN_FACTS


# --- the stage through the CLI -----------------------------------------------------------------


@pytest.mark.network
def test_precheck_cli_with_hand_written_facts(tmp_path: Path) -> None:
    m = write(tmp_path / "m.toml", '[matrix]\nsglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n'
              'driver = ["host", "590.48.01"]\n[model]\npath = "Qwen/Qwen3.6-27B"\ntp = 2\nparameters = 27_800_000_000\n')
    f = write(tmp_path / "facts.json", json.dumps({"driver": {"kernel_module": "580.126.09", "userspace": "580.126.09"},
                                                   "gpus": [A6000, A6000], "glibc": "2.35"}))
    r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "precheck", "--host-facts", str(f), "--json")
    assert r.code == 1, r.err
    res = {c["axes"]["driver"]: c for c in json.loads(r.out)}
    host = next(s for s in res["host"]["stages"] if s["name"] == "precheck")
    baked = next(s for s in res["590.48.01"]["stages"] if s["name"] == "precheck")
    assert host["status"] == "pass" and "picks flashinfer on sm 8.6" in host["message"]  # sm86: not fa3
    vram = next(f for f in host["details"]["findings"] if f["rule"] == "vram")
    assert vram["status"] == "pass" and "fits" in vram["message"]
    assert baked["status"] == "fail" and baked["reason"] == "driver-mismatch"
    bad = write(tmp_path / "bad.json", '{"gpus": [{"memory_mib": "x"}]}')
    r2 = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "precheck", "--host-facts", str(bad))
    assert r2.code == 2 and "gpus[0].memory_mib" in r2.err and "Traceback" not in r2.err


@pytest.mark.parametrize("args", ['["--mem-fraction-static", "abc"]', '["--mem-fraction-static", "1.5"]',
                                  '["--max-running-requests", "many"]', '["--context-length", "0"]'])
def test_unreadable_memory_flag_in_the_matrix_is_a_bad_flag_verdict(tmp_path: Path, args: str) -> None:
    qwen = FIXTURES / "models/qwen3.6-27b/config.json"
    m = _matrix(tmp_path, f'config = "{qwen}"\n[server]\nargs = {args}\n')
    findings = precheck.evaluate(cell("13.0"), m, facts())
    bad = [f for f in findings if f.reason is Reason.BAD_FLAG]
    assert len(bad) == 1 and bad[0].status is Status.FAIL, findings
    flag, value = json.loads(args)
    assert bad[0].message.startswith(f"{flag} {value!r}: SGLang takes a ")
    assert not [f for f in findings if f.rule == "vram"]  # no verdict computed from SGLang's default instead
