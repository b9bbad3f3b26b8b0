"""memory: SGLang's own sizing (per release) against what SGLang logged, and the fixes it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuilder import memory, model
from tests.conftest import FIXTURES

RECORDED = json.loads((FIXTURES / "sglang-kv.json").read_text())["recordings"]
PRODUCTION = ["--tp", "2", "--context-length", "131072", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--disable-radix-cache"]
QWEN36 = FIXTURES / "models/qwen3.6-27b/config.json"
A6000_MIB = 49140


def _plan(rec: dict[str, Any]) -> memory.MemoryPlan:
    cfg = model.read_config(FIXTURES / rec["config"])
    return memory.predict(cfg=cfg, weight_bytes=rec["weights_gib"] * memory.GIB, gpu_mib=rec["gpu_mib"],
                          argv=rec["argv"], version=rec["version"])


@pytest.mark.parametrize("rec", [r for r in RECORDED if r["max_total_num_tokens"]], ids=lambda r: r["name"])
def test_kv_tokens_within_15_percent_of_sglang_log(rec: dict[str, Any]) -> None:
    plan = _plan(rec)
    off = plan.kv_tokens / rec["max_total_num_tokens"] - 1
    assert abs(off) <= memory.KvComparison.TOLERANCE, (plan.kv_tokens, rec["max_total_num_tokens"])
    if not rec.get("calibration"):  # the recordings the context overhead was not read from: much closer than 15 %
        assert abs(off) < 0.01
    assert plan.max_running_requests == rec["max_running_requests"]
    if "max_mamba_cache_size" in rec:
        assert plan.mamba_cache_size is not None
        assert abs(plan.mamba_cache_size / rec["max_mamba_cache_size"] - 1) < 0.01


def test_refused_launch_has_no_pool() -> None:
    (rec,) = [r for r in RECORDED if r.get("refused")]
    plan = _plan(rec)
    assert plan.kv_tokens <= 0 and plan.mem_fraction_static == 0.0001  # the last --mem-fraction-static wins
    (fix, *_) = memory.fixes(plan, 8192)
    assert fix.flag == "--mem-fraction-static" and float(fix.value) > 0.0001


def test_draft_reserve_differs_by_release() -> None:
    cfg = model.read_config(QWEN36)
    f = {v: memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, argv=PRODUCTION, version=v, tp=2)
         for v in ("0.5.9", "0.5.10", "0.5.11", "0.5.12")}
    # server_args: 0.5.9 reserves 2 GiB for an EAGLE-style draft, 0.5.10+ 4 GiB; x the VLM factor of the ViT
    assert f["0.5.9"].reserved_mib is not None and f["0.5.11"].reserved_mib is not None
    assert f["0.5.11"].reserved_mib - f["0.5.9"].reserved_mib == 2048
    assert f["0.5.12"].engine_rules == "0.5.11"  # a newer release uses the newest row until it has its own
    assert f["0.5.11"].max_running_requests == 48 and f["0.5.11"].speculative_algorithm == "NEXTN"


def test_production_flags_on_two_a6000s_name_the_fix() -> None:
    cfg = model.read_config(QWEN36)
    plan = memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, argv=PRODUCTION, version="0.5.11", tp=2)
    # 48 sequences x (1 + 4 draft tokens) x 48 GDN layers' fp32 state: more than the A6000 has after the weights
    assert plan.state_per_request > 70 * memory.MIB and plan.kv_tokens <= 0
    fixes = {f.flag: f for f in memory.fixes(plan, 131072)}
    n = int(fixes["--max-running-requests"].value)
    fixed = memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, version="0.5.11", tp=2,
                           argv=[*PRODUCTION, "--max-running-requests", str(n)])
    assert fixed.kv_tokens >= 131072
    worse = memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, version="0.5.11", tp=2,
                           argv=[*PRODUCTION, "--max-running-requests", str(n + 2)])
    assert worse.kv_tokens < fixed.kv_tokens


def test_state_size_is_sglangs_formula() -> None:
    tiny = memory.shape(model.read_config(FIXTURES / "models/tiny-qwen3next/config.json"))
    # 6 GDN layers x (conv (4x64 + 2x2x64) x (4-1) x bf16 + ssm 4x64x64 x fp32), as the 0.5.11 log's sizes show
    assert tiny.state_bytes(1) == 6 * ((256 + 256) * 3 * 2 + 4 * 64 * 64 * 4)
    assert tiny.cell_bytes(1, 2) == 2 * 128 * 2 * 2


def test_plan_is_json(tmp_path: Path) -> None:
    plan = _plan(RECORDED[0])
    out = memory.KvComparison.of(plan, 1606158).to_json()
    assert json.loads(json.dumps(out))["predicted"] == plan.kv_tokens and out["within_tolerance"] is True


H200_REPORTS = Path(__file__).parent.parent / "reports/h200-sglang-0.5.11"
CELL_LOGS = "logs/sglang-0.5.11_cu13.0_drv-host_ubuntu24.04_py3.12"


def test_kv_check_on_the_committed_h200_logs() -> None:
    from tests.conftest import envbuilder

    logs = [str(H200_REPORTS / run / CELL_LOGS / f"{name}.log")
            for run, name in (("plain", "server"), ("spec", "server"), ("spec", "reference"), ("oom", "server"))]
    r = envbuilder("--json", "kv-check", *logs, "--config", str(FIXTURES / "models/smollm2-135m/config.json"),
                   "--host-facts", str(FIXTURES / "h200-doctor.json"), "--sglang", "0.5.11")
    rows = json.loads(r.out)
    assert [row["logged"] for row in rows] == [1606158, 1606158, 778216, None]
    assert rows[0]["within_tolerance"] and rows[1]["within_tolerance"]
    # the old reference launch started while the speculative server still held 71 GiB: 68.06 GiB free at load
    assert rows[2]["within_tolerance"] is False and "another server held it" in rows[2]["why"]
    assert rows[3]["predicted"] <= 0  # --mem-fraction-static 0.0001: SGLang refused the start
    assert r.code == 1  # one start more than 15 % off


def test_radix_cache_on_needs_fewer_sequences_and_a_larger_fraction() -> None:
    cfg = model.read_config(QWEN36)
    argv = [a for a in PRODUCTION if a != "--disable-radix-cache"]
    plan = memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, argv=argv, version="0.5.11", tp=2)
    assert plan.kv_tokens <= 0
    (fix,) = memory.fixes(plan, 131072)
    n, _, fraction = fix.value.split()
    fixed = memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, version="0.5.11", tp=2,
                           argv=[*argv, "--max-running-requests", n, "--mem-fraction-static", fraction])
    assert fixed.kv_tokens >= 131072 and float(fraction) <= memory.COMBINED_FRACTION_CAP + 0.005


def test_kv_check_refuses_a_file_that_is_not_a_server_log_and_says_why_a_start_has_no_prediction(
        tmp_path: Path) -> None:  # fmt: skip
    from tests.conftest import envbuilder, write

    args = ("--config", str(FIXTURES / "models/smollm2-135m/config.json"), "--host-facts", str(FIXTURES / "h200-doctor.json"))
    garbage = envbuilder("kv-check", str(write(tmp_path / "g.log", "garbage\n")), *args)
    assert garbage.code == 2 and "g.log: line 1: not a server log" in garbage.err and "Traceback" not in garbage.err
    early = write(tmp_path / "early.log", "CMD python3 -m sglang.launch_server --model-path /m\nImportError: x\n")
    told = envbuilder("kv-check", str(early), *args)
    assert told.code == 0 and told.out.strip() == f"{early}: no prediction: the start ended before the weights loaded"


@pytest.mark.parametrize(("flags", "flag", "value"), [
    (["--mem-fraction-static", "abc"], "--mem-fraction-static", "'abc'"),
    (["--mem-fraction-static", "1.5"], "--mem-fraction-static", "'1.5'"),
    (["--mem-fraction-static", "0.9x"], "--mem-fraction-static", "'0.9x'"),
    (["--mem-fraction-static", "0"], "--mem-fraction-static", "'0'"),
    (["--mem-fraction-static"], "--mem-fraction-static", "no value"),
    (["--max-running-requests", "many"], "--max-running-requests", "'many'"),
    (["--max-running-requests", "-3"], "--max-running-requests", "'-3'"),
    (["--context-length", "0"], "--context-length", "'0'"),
    (["--context-length", "-1"], "--context-length", "'-1'"),
    (["--context-length", "1.5K"], "--context-length", "'1.5K'"),  # human_readable_int: no decimals with K
])
def test_unreadable_memory_flag_is_refused_not_ignored(flags: list[str], flag: str, value: str) -> None:
    cfg = model.read_config(QWEN36)
    with pytest.raises(memory.BadLaunchFlag) as e:
        memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, argv=["--tp", "2", *flags], version="0.5.11", tp=2)
    assert e.value.flag == flag and str(e.value).startswith(f"{flag} {value}: SGLang takes a ")


def test_context_length_reads_sglangs_human_readable_int() -> None:
    cfg = model.read_config(QWEN36)
    lengths = {v: memory.predict(cfg=cfg, weight_bytes=55.6e9, gpu_mib=A6000_MIB, argv=["--context-length", v],
                                 version="0.5.11", tp=2).context_length for v in ("32768", "32k", "32K", "2.5k")}
    assert lengths == {"32768": 32768, "32k": 32000, "32K": 32768, "2.5k": 2500}
