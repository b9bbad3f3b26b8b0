"""Where a cell runs (one protocol) and the engine adapters (one class per engine)."""

from __future__ import annotations

import sys
from pathlib import Path

from envbuilder import backends, engines
from envbuilder.artifacts import BuiltEnvironment


def test_local_backend_runs_python_for_real(tmp_path: Path) -> None:
    b = backends.for_environment(BuiltEnvironment(kind="venv", python=sys.executable), run_dir=tmp_path)
    assert b.name == "local" and b.logs
    code, out = b.run_python(["-c", "import sys; print('hi from', sys.version_info[0])"], 60)
    assert (code, out.strip()) == (0, "hi from 3")
    assert b.run_python(["-c", "raise SystemExit(3)"], 60)[0] == 3
    python, host, model, env = b.server_view("127.0.0.1", "/m", {"A": "1"})
    assert (python, host, model, env["A"]) == (sys.executable, "127.0.0.1", "/m", "1") and "PATH" in env


def test_image_and_external_backends_see_what_runs_there() -> None:
    img = backends.for_environment(BuiltEnvironment(kind="image", python="python", image="t:1"), model_dir="/here/m")
    assert isinstance(img, backends.DockerBackend) and img.name == "docker"
    assert img.server_view("127.0.0.1", "/here/m", {"A": "1"}) == ("python3", "0.0.0.0", "/model", {"A": "1"})
    ext = backends.ExternalBackend()
    assert not ext.logs and ext.run_python(["-c", "1"], 5)[0] == 127


def test_engine_adapters_own_their_launch_and_flags() -> None:
    sg = engines.engine("sglang").launch_argv("py", "/m", "h", 1, ["--x"], tp=2, context_length=8)
    assert sg == ["py", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "h", "--port", "1", "--tp", "2",
                  "--context-length", "8", "--enable-metrics", "--x"]
    ll = engines.engine("llama-cpp").launch_argv("py", "/m", "h", 1, ["--x"], tp=2, context_length=8)
    assert ll == ["py", "-m", "llama_cpp.server", "--model", "/m", "--host", "h", "--port", "1", "--n_ctx", "8", "--x"]
    assert "--speculative-algorithm" in engines.SGLANG.spec_flags and "--draft_model" in engines.LLAMA_CPP.spec_flags
    assert engines.SGLANG.launch_check and not engines.LLAMA_CPP.launch_check
