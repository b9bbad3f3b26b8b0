"""A newcomer's first run on a machine without Docker: the CLI as they run it (a real uv, a real index, a real
venv), with DOCKER_HOST naming a socket that does not exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import envbuilder, write

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
MATRIX = """
[matrix]
six = ["1.17.0"]
cuda = ["13.0"]
os = ["debian12"]
python = ["3.11", "3.99"]
[model]
path = "HuggingFaceTB/SmolLM2-135M-Instruct"
[server]
engine = "sglang"
args = []
[resolve]
as_of = "fresh"
extra = ["nvidia-cuda-runtime==13.0.96"]  # the lock carries CUDA 13.0 (a small wheel), as the cell says
[build]
runner = "docker"
"""


@pytest.mark.network
def test_without_docker_runnable_cells_fall_back_to_venv_the_rest_say_both_ways_out(tmp_path: Path) -> None:
    m = write(tmp_path / "matrix.toml", MATRIX)
    r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "run", env=NO_DOCKER)
    assert r.code == 0, r.err + r.out
    assert "Traceback" not in r.err + r.out
    results = {json.loads(p.read_text())["axes"]["python"]: json.loads(p.read_text())
               for p in (tmp_path / "wd/results").glob("*.json")}  # fmt: skip
    here = {s["name"]: s for s in results["3.11"]["stages"]}
    # the cell whose Python exists here: resolve, precheck, build (a venv, saying why) and import decided
    assert [here[n]["status"] for n in ("resolve", "build", "import")] == ["pass", "pass", "pass"]
    assert here["precheck"]["status"] in ("pass", "skip")
    assert here["build"]["details"]["runner"] == "venv"
    assert "no Docker engine answers at unix:///nonexistent/docker.sock" in here["build"]["message"]
    assert here["import"]["details"]["probe"]["modules"]["six"]["version"] == "1.17.0"
    # the cell without its Python: one sentence, both ways out
    gone = {s["name"]: s for s in results["3.99"]["stages"]}
    assert gone["resolve"]["status"] == "pass"
    b = gone["build"]
    assert (b["status"], b["reason"]) == ("skip", "docker-unavailable")
    assert "install Docker" in b["message"] and "--runner venv --python PATH" in b["message"]
    assert results["3.99"]["verdict"] == "skip"
    # the GPU stage is skip here (no GPU), never an error
    assert here["smoke"]["status"] == "skip" and results["3.11"]["verdict"] == "skip"
    # what the user reads: the fallback said in the progress lines, the reason for the other cell
    assert "built a venv with Python 3.11 instead" in r.err
    assert "--runner venv --python PATH" in r.err
    # `nox -s matrix`'s second step: every report written, the table not printed again, where they are said last
    rep = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "report", "--all", "--quiet", env=NO_DOCKER)
    assert rep.out == ""
    assert rep.err.strip().splitlines()[-1] == f"reports written to {tmp_path / 'wd' / 'reports'}/ (md, html, json, junit)"


@pytest.mark.network
def test_explicit_docker_runner_does_not_fall_back(tmp_path: Path) -> None:
    m = write(tmp_path / "matrix.toml", MATRIX.replace('"3.11", "3.99"', '"3.11"'))
    r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "build", "--runner", "docker", "--json",
                   env=NO_DOCKER)  # fmt: skip
    assert r.code == 1, r.err + r.out
    (res,) = json.loads(r.out)
    b = {s["name"]: s for s in res["stages"]}["build"]
    assert (b["status"], b["reason"]) == ("error", "docker-unavailable")
    assert b["message"].startswith("no Docker engine answers at unix:///nonexistent/docker.sock: install Docker")
