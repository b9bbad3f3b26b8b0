"""The launch monitor against real SGLang 0.5.11 recordings (H200), replayed by a real subprocess."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from envbuilder import engines, monitor
from envbuilder.results import Reason, Status
from envbuilder.runners import LocalRunner, free_port
from tests.conftest import RUNS

REPLAY = Path(__file__).parent / "replay_sglang.py"

CASES = [
    # (log, exit code SGLang had, expected status, reason, message fragment)
    ("0.5.11-h200/plain.log", None, Status.PASS, Reason.OK, "ready"),
    ("0.5.11-h200/spec_standalone.log", None, Status.PASS, Reason.OK, "ready"),
    ("0.5.11-h200/oom.log", -9, Status.FAIL, Reason.OOM, "Not enough memory. Please try to increase --mem-fraction-static."),
    ("0.5.11-fresh-lock-import-failure.log", 1, Status.FAIL, Reason.IMPORT_ERROR, "ValueError: Either a revision or a version must be specified."),
    ("0.5.11-h200-qwen3next/plain.log", None, Status.PASS, Reason.OK, "ready"),
    ("0.5.11-h200-qwen3next/crash-config-missing-full_attention_interval.log", -9, Status.FAIL, Reason.CRASH,
     "AttributeError: 'Qwen3NextConfig' object has no attribute 'full_attention_interval'"),
    ("0.5.11-h200-qwen3next/nextn-refused-radix-cache.log", 1, Status.FAIL, Reason.BAD_CONFIG,
     "Speculative decoding for Qwen3NextForCausalLM is not compatible with radix cache"),
]


@pytest.mark.parametrize(("log", "code", "status", "reason", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_replayed_process_is_classified(log: str, code: int | None, status: Status, reason: Reason, fragment: str) -> None:
    """A real subprocess prints the recording (gaps compressed 50x) and exits the way SGLang did."""
    argv = [sys.executable, str(REPLAY), "--log", str(RUNS / log), "--compress", "50", "--max-gap", "0.3"]
    if code is not None:
        argv += ["--exit", str(code)]
    with LocalRunner(Path("/tmp/eb-test-run")).start(argv, env={"PATH": "/usr/bin:/bin"}, base_url="http://x",
                                                     name="replay") as h:
        out = monitor.watch(h.events, engines.SGLANG, ready_check=lambda: None,
                            limits=monitor.WatchLimits(startup_timeout_s=60, stall_timeout_s=30, fatal_grace_s=0.3))
    assert (out.status, out.reason) == (status, reason), out
    assert fragment in out.message
    if out.status is Status.FAIL:
        assert out.reaction_s is not None and out.reaction_s < 1.0
    if code == -9 and reason is Reason.OOM:
        assert "SIGKILL" in out.message or out.exit_code is None  # decided at the fatal line or at the kill


def test_plain_phase_timings_match_the_recording() -> None:
    lines = monitor.read_log(RUNS / "0.5.11-h200/plain.log")
    out = monitor.watch(monitor.replay_events(lines, None), engines.SGLANG, ready_check=lambda: None)
    p = out.phases
    assert p["imports"] == 26.0 and p["weights"] == 0.27 and p["graph_capture"] == 42.59
    assert p["piecewise_compile"] == 15.44 and p["warmup"] == 19.0 and p["logged_span"] == 105.0
    kv = next(m for m in out.milestones if m.name == "kv_cache")
    assert kv.values["tokens"] == "1606158"


def test_spec_run_times_the_draft_graph_separately() -> None:
    out = monitor.watch(monitor.replay_events(monitor.read_log(RUNS / "0.5.11-h200/spec_standalone.log"), None),
                        engines.SGLANG, ready_check=lambda: None)
    assert out.phases["graph_capture"] == 1.72 and out.phases["draft_graph_capture"] == 6.35


def test_oom_decided_at_the_fatal_line_without_waiting_for_the_kill() -> None:
    lines = monitor.read_log(RUNS / "0.5.11-h200/oom.log")
    out = monitor.watch(monitor.replay_events(lines, None), engines.SGLANG, ready_check=lambda: None,
                        limits=monitor.WatchLimits(fatal_grace_s=0.1))
    assert out.reason is Reason.OOM and out.exit_code is None


def test_ready_needs_a_real_generation() -> None:
    lines = monitor.read_log(RUNS / "0.5.11-h200/plain.log")
    answers = iter(["503", "503", None])
    out = monitor.watch(monitor.replay_events(lines, None), engines.SGLANG, ready_check=lambda: next(answers),
                        limits=monitor.WatchLimits(ready_retry_s=0.01))
    assert out.status is Status.PASS
    never = monitor.watch(monitor.replay_events(lines, None), engines.SGLANG, ready_check=lambda: "HTTP 503",
                          limits=monitor.WatchLimits(startup_timeout_s=0.5, ready_retry_s=0.05))
    assert never.reason is Reason.STARTUP_TIMEOUT and "HTTP 503" in never.message


def test_stall_is_judged_per_phase() -> None:
    """No output for longer than the stall limit → stall; inside graph capture the limit is 4x."""
    lines = [ln for ln in monitor.read_log(RUNS / "0.5.11-h200/plain.log") if "Capture cuda graph end" not in ln]
    cut = next(i for i, ln in enumerate(lines) if "Capture cuda graph begin" in ln)
    q = monitor.replay_events(lines[: cut + 1], None)
    t = time.monotonic()
    out = monitor.watch(q, engines.SGLANG, ready_check=lambda: None,
                        limits=monitor.WatchLimits(stall_timeout_s=0.2, slow_phase_factor=4.0))
    assert out.reason is Reason.STALL and "graph_capture_begin" in out.message
    assert time.monotonic() - t >= 0.8  # 4 x 0.2 s in a slow phase
    q2 = monitor.replay_events(lines[:5], None)
    out2 = monitor.watch(q2, engines.SGLANG, ready_check=lambda: None, limits=monitor.WatchLimits(stall_timeout_s=0.2))
    assert out2.reason is Reason.STALL


def test_argparse_error_is_bad_flag() -> None:
    lines = ["usage: launch_server.py [-h] --model-path MODEL_PATH",
             "launch_server.py: error: unrecognized arguments: --cuda-graph-max-bsz 8"]
    reason, msg, _ = monitor.classify(lines, 2, engines.SGLANG)
    assert reason is Reason.BAD_FLAG and "--cuda-graph-max-bsz" in msg


def test_signal_exit_without_traceback_names_the_signal() -> None:
    reason, msg, _ = monitor.classify(["[2026-12-02 13:40:06] Load weight begin."], -11, engines.SGLANG)
    assert reason is Reason.CRASH and "SIGSEGV (-11)" in msg


def test_failure_on_a_rank_names_it() -> None:
    lines = ["[2026-12-02 13:40:06 TP1] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "x.py", line 1, in f', "RuntimeError: NCCL error: unhandled system error",
             "[2026-12-02 13:40:06] Received sigquit from a child process. It usually means the child failed."]
    reason, msg, rank = monitor.classify(lines, None, engines.SGLANG)
    assert reason is Reason.CRASH and rank == "TP1" and "NCCL error" in msg


def test_runner_tears_down_on_exception() -> None:
    port = free_port()
    argv = [sys.executable, str(REPLAY), "--log", str(RUNS / "0.5.11-h200/plain.log"), "--port", str(port)]
    runner = LocalRunner(Path("/tmp/eb-test-run"), grace_s=2)
    pid = None
    with pytest.raises(RuntimeError), runner.start(argv, env={"PATH": "/usr/bin:/bin"}, base_url="", name="boom") as h:
        pid = h.pid
        raise RuntimeError("the orchestrator failed mid-start")
    assert pid is not None and not _alive(pid)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is not alive
