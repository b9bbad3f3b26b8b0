"""launch-check: verdicts from SGLang's own argument checks (the recorded 0.5.11 refusal), fixes as data."""

from __future__ import annotations

from pathlib import Path

from envbuilder import launchcheck
from envbuilder.monitor import last_traceback, read_log
from envbuilder.results import Reason, Status
from tests.conftest import FIXTURES, RUNS


def test_recorded_nextn_refusal_is_bad_config_with_fixes() -> None:
    lines = read_log(RUNS / "0.5.11-h200-qwen3next/nextn-refused-radix-cache.log")
    tb, final = last_traceback(lines)
    assert final is not None and "_handle_mamba_radix_cache" in "\n".join(tb)
    v = launchcheck.interpret({"ok": False, "error": final, "traceback": "\n".join(tb)})
    assert (v.status, v.reason) == (Status.FAIL, Reason.BAD_CONFIG)
    assert v.fixes == ["--disable-radix-cache", "--mamba-scheduler-strategy extra_buffer with SGLANG_ENABLE_SPEC_V2=1"]
    assert "not compatible with radix cache" in v.message and "fix: --disable-radix-cache" in v.message


def test_unknown_message_suggests_what_it_names() -> None:
    assert launchcheck.suggest("Please set --page-size 64 and FOO_BAR=1.") == ["--page-size 64", "FOO_BAR=1"]


def test_gpu_needed_is_skip_and_argparse_is_bad_flag() -> None:
    v = launchcheck.interpret({"ok": False, "error": "RuntimeError: Found no NVIDIA driver on your system.", "traceback": ""})
    assert (v.status, v.reason) == (Status.SKIP, Reason.NO_GPU)
    b = launchcheck.interpret({"ok": False, "error": "argument --speculative-algorithm: invalid choice: 'BOGUS'", "traceback": ""})
    assert (b.status, b.reason) == (Status.FAIL, Reason.BAD_FLAG)


def test_accepted_launch_notes_what_changed() -> None:
    v = launchcheck.interpret({"ok": True, "changed": {
        "disable_radix_cache": [False, True], "attention_backend": [None, "fa3"], "random_seed": [None, 5],
        "max_running_requests": [None, 48]}, "log": "[2026-12-02 13:39:40] Attention backend not specified. Use fa3 backend by default.\n"})
    assert v.status is Status.PASS
    assert "disable_radix_cache: False -> True" in v.notes and "attention_backend: None -> 'fa3'" in v.notes
    assert not any("random_seed" in n for n in v.notes)


def test_config_dir_holds_only_config_files(tmp_path: Path) -> None:
    d = launchcheck.config_dir(FIXTURES / "models/qwen3.6-27b/config.json", tmp_path / "m")
    assert [p.name for p in d.iterdir()] == ["config.json"]
