"""watch's decision per release and the upgrade summary it stores (the HTML upgrade view reads it)."""

from __future__ import annotations

import json
from pathlib import Path

from envbuilder import watch
from envbuilder.results import CellResult, Reason, StageResult, Status
from tests.conftest import envbuilder, write

BASE = {"decode_tokens_per_s": 580.0, "ttft_s": 0.02, "spec_accept_length": 3.67}


def cell(*stages: StageResult) -> CellResult:
    return CellResult(id="sglang-0.5.20_x", axes={}, stages=stages)


def ok(name: str, **details: object) -> StageResult:
    return StageResult(name=name, status=Status.PASS, details=dict(details))


CPU_PASS = (ok("resolve"), StageResult(name="precheck", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS), ok("build"),
            ok("import"), StageResult(name="smoke", status=Status.SKIP, reason=Reason.NO_GPU))  # fmt: skip
GPU_PASS = (*CPU_PASS[:4], ok("smoke"), ok("smoke.golden"), ok("smoke.degeneracy"), ok("smoke.spec", acceptance_length=3.7),
            ok("smoke.speed", decode_tokens_per_s=590.0, ttft_s=0.021))  # fmt: skip


def test_without_a_gpu_the_best_verdict_is_safe_to_try() -> None:
    assert watch.decide(cell(*CPU_PASS), gpu=False) == (watch.SAFE_TO_TRY, [], [])


def test_a_failed_stage_blocks_with_its_reason_and_fix() -> None:
    bad = StageResult(name="import", status=Status.FAIL, reason=Reason.BAD_CONFIG, message="launch-check: refused",
                      details={"fixes": ["add --disable-radix-cache"]})  # fmt: skip
    verdict, reasons, fixes = watch.decide(cell(*CPU_PASS[:3], bad), gpu=False)
    assert verdict == watch.BLOCKED and reasons == ["import: bad-config — launch-check: refused"]
    assert fixes == ["add --disable-radix-cache"]


def test_an_undecided_stage_is_not_a_verdict() -> None:
    err = StageResult(name="resolve", status=Status.ERROR, reason=Reason.NETWORK, message="index unreachable")
    assert watch.decide(cell(err), gpu=False)[0] == watch.UNDECIDED


def test_safe_to_upgrade_needs_the_gpu_checks_within_tolerance_of_the_pin() -> None:
    assert watch.decide(cell(*GPU_PASS), gpu=True, baseline=BASE)[0] == watch.SAFE_TO_UPGRADE
    slow = (*GPU_PASS[:-1], ok("smoke.speed", decode_tokens_per_s=400.0, ttft_s=0.021))
    verdict, reasons, _ = watch.decide(cell(*slow), gpu=True, baseline=BASE, tolerance=0.10)
    assert verdict == watch.BLOCKED and "perf-regression" in reasons[0]
    low = (*GPU_PASS[:-2], ok("smoke.spec", acceptance_length=2.9), GPU_PASS[-1])
    assert "spec-low-acceptance" in watch.decide(cell(*low), gpu=True, baseline=BASE)[1][0]
    late = (*GPU_PASS[:-1], ok("smoke.speed", decode_tokens_per_s=590.0, ttft_s=0.05))
    assert "TTFT" in watch.decide(cell(*late), gpu=True, baseline=BASE)[1][0]
    no_golden = tuple(s for s in GPU_PASS if s.name != "smoke.golden")
    assert watch.decide(cell(*no_golden), gpu=True, baseline=BASE)[0] == watch.SAFE_TO_TRY


def test_the_summary_round_trips_and_fits_one_screen() -> None:
    r = watch.ReleaseVerdict(version="0.5.20", cell="c", uploaded="2026-09-18", verdict=watch.BLOCKED,
                             reasons=("import: bad-flag — --cuda-graph-max-bs is gone",),
                             fixes=("replace --cuda-graph-max-bs with --cuda-graph-max-bs-decode",),
                             changes=("torch 2.11.0 → 2.13.0",), stages=(("import", "fail", "bad-flag"),))  # fmt: skip
    s = watch.UpgradeSummary(package="sglang", pinned_cell="p", pinned_version="0.5.11", launch_args=("--tp", "2"),
                             created="now", gpu=False, releases=(r,))  # fmt: skip
    assert watch.UpgradeSummary.from_json(s.to_json()) == s
    lines = s.render()
    assert "0.5.11 -> 0.5.20: blocked — bad-flag --cuda-graph-max-bs" in lines
    assert "    fix: --cuda-graph-max-bs → --cuda-graph-max-bs-decode" in lines
    assert "    changed: torch 2.13.0" in lines
    assert all(len(x) <= 118 for x in lines)


def test_key_changes_name_what_moved() -> None:
    assert watch.key_changes({"torch": "2.11.0", "kernels": "0.14.0"}, {"torch": "2.13.0", "kernels": "0.14.0"}) == [
        "torch 2.11.0 → 2.13.0"]


def test_a_placeholder_sdist_that_cannot_be_built_here_is_told_with_its_fix() -> None:
    msg = ("uv pip sync failed: error: Failed to build `cuda-tile==1.6.0rc5` The installation of cuda-tile for version "
           "1.6.0rc5 failed. (the build tried to reach a host it could not resolve) (log: build.log)")
    bad = StageResult(name="build", status=Status.FAIL, reason=Reason.BUILD_FAILED, message=msg)
    verdict, _, fixes = watch.decide(cell(CPU_PASS[0], bad), gpu=False)
    assert verdict == watch.BLOCKED and fixes[0].startswith("cuda-tile 1.6.0rc5 has no wheel here")
    assert watch.build_fixes("uv pip sync failed: error: Failed to build `x==1` (log: l)") == []


def test_watch_show_prints_the_stored_summary_and_refuses_without_one(tmp_path: Path) -> None:
    r = watch.ReleaseVerdict(version="0.5.23", cell="sglang-0.5.23_x", uploaded="2026-10-30", verdict=watch.BLOCKED,
                             reasons=("import: bad-flag — --cuda-graph-max-bs is gone",),
                             fixes=("replace --cuda-graph-max-bs with --cuda-graph-max-bs-decode",))  # fmt: skip
    s = watch.UpgradeSummary(package="sglang", pinned_cell="p", pinned_version="0.5.11", launch_args=(),
                             created="now", gpu=False, releases=(r,))  # fmt: skip
    missing = envbuilder("--workdir", str(tmp_path), "watch", "--show")
    assert missing.code == 2 and "no watch summary" in missing.err and "Traceback" not in missing.err
    write(tmp_path / "watch" / "summary.json", json.dumps(s.to_json()))
    shown = envbuilder("--workdir", str(tmp_path), "watch", "--show")
    assert shown.code == 0, shown.err
    assert "0.5.11 -> 0.5.23: blocked — bad-flag --cuda-graph-max-bs" in shown.out
    assert "fix: --cuda-graph-max-bs → --cuda-graph-max-bs-decode" in shown.out
    assert watch.load_summary(tmp_path / "watch" / "summary.json") == s
    for corrupt in ("{not json", "[1, 2]", '{"schema": 99}'):
        write(tmp_path / "watch" / "summary.json", corrupt)
        told = envbuilder("--workdir", str(tmp_path), "watch", "--show")
        assert told.code == 2 and "not a watch summary" in told.err and "Traceback" not in told.err, told.err


def test_tolerance_must_be_a_number_at_least_zero(tmp_path: Path) -> None:
    for bad in ("-0.1", "nan", "inf", "ten"):
        r = envbuilder("--workdir", str(tmp_path), "watch", "--show", "--tolerance", bad)
        assert r.code == 2 and "--tolerance" in r.err and "Traceback" not in r.err, (bad, r.err)
        assert len(r.err.strip().splitlines()) == 1, r.err
