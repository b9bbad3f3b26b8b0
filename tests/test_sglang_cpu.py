"""Real SGLang 0.5.9 and 0.5.10 on this CPU box (Python 3.11 venvs from their release-day locks): the import smoke,
the flag check against each version's real ``--help``, and SGLang's own launch-argument checks (launch-check).

What happens here (measured, not assumed): both import and parse ``--help``; ``sgl_kernel`` needs ``libcuda.so.1``
at import, so it is reported as needing a GPU; SGLang's ``ServerArgs`` asks for an accelerator before it reads the
model config, so launch-check is ``skip``/``no-gpu`` for the hybrid NEXTN config and the Llama config alike
(the 0.5.11 refusal is decided on the H200: reports/h200-sglang-0.5.11/import/); a nonsense flag value is refused
by SGLang's argument parser first, with no GPU needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, envbuilder, write

pytestmark = [pytest.mark.slow, pytest.mark.network]

NEXTN = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4", "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder"]  # fmt: skip


def _matrix(path: Path, config: Path, args: list[str]) -> Path:
    return write(path, f"""
[matrix]
sglang = ["0.5.9", "0.5.10"]
cuda = ["12.8"]
os = ["debian12"]
python = ["3.11"]
[model]
path = "{config.parent.name}"
config = "{config}"
tp = 1
context_length = 131072
[server]
engine = "sglang"
args = {json.dumps(args)}
[build]
runner = "venv"
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, Any]]]:
    """Resolve + venv + import smoke of both versions with the production NEXTN flags, once; venvs deleted after."""
    d = tmp_path_factory.mktemp("sglang")
    m = _matrix(d / "matrix.toml", FIXTURES / "models" / "tiny-qwen3next" / "config.json", NEXTN)
    r = envbuilder("--matrix", str(m), "--workdir", str(d / "wd"), "build", "--json", timeout=3000)
    assert r.code == 0, r.err[-3000:]
    yield m, d / "wd", {x["id"]: x for x in json.loads(r.out)}
    import shutil

    shutil.rmtree(d / "wd" / "venvs", ignore_errors=True)  # ~10 GB each (uv's cache keeps the wheels)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10"])
def test_import_and_production_flags_parse(built: tuple[Path, Path, dict[str, Any]], version: str) -> None:
    _, _, results = built
    r = results[f"sglang-{version}_cu12.8_drv-host_debian12_py3.11"]
    stages = {s["name"]: s for s in r["stages"]}
    assert stages["build"]["status"] == "pass"
    imp = stages["import"]
    assert imp["status"] == "pass", imp["message"]
    probe = imp["details"]["probe"]["modules"]
    assert probe["sglang"] == {"ok": True, "version": version} and probe["torch"]["ok"]
    assert imp["details"]["needs_gpu"] == ["sgl_kernel"] and "libcuda.so.1" in probe["sgl_kernel"]["error"]
    assert imp["details"]["flag_problems"] == [] and imp["details"]["options"] > 300
    lc = imp["details"]["launch_check"]
    assert lc["status"] == "skip" and lc["reason"] == "no-gpu" and "No accelerator" in lc["message"]
    assert "launch-check skip" in imp["message"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10"])
def test_launch_check_llama_config_and_nonsense_value(built: tuple[Path, Path, dict[str, Any]], version: str,
                                                      tmp_path: Path) -> None:  # fmt: skip
    _, wd, _ = built
    cell = f"sglang={version}"
    llama = _matrix(tmp_path / "llama.toml", FIXTURES / "models" / "llama-3.1-8b" / "config.json", [])
    r = envbuilder("--matrix", str(llama), "--workdir", str(wd), "launch-check", cell, "--json", timeout=600)
    verdict = json.loads(r.out)
    assert verdict["status"] == "skip" and verdict["reason"] == "no-gpu", verdict  # asks for an accelerator first
    bogus = _matrix(tmp_path / "bogus.toml", FIXTURES / "models" / "tiny-qwen3next" / "config.json",
                    ["--speculative-algorithm", "BOGUS"])  # fmt: skip
    r = envbuilder("--matrix", str(bogus), "--workdir", str(wd), "launch-check", cell, "--json", timeout=600)
    verdict = json.loads(r.out)
    assert r.code == 1 and verdict["status"] == "fail" and verdict["reason"] == "bad-flag", verdict
    assert "BOGUS" in verdict["message"] and "invalid choice" in verdict["message"]


def test_flag_check_against_the_real_help(built: tuple[Path, Path, dict[str, Any]], tmp_path: Path) -> None:
    """0.5.11's suggested fix flag ``--mamba-scheduler-strategy`` exists in 0.5.9 and 0.5.10 too; a made-up one does not."""
    _, wd, _ = built
    m = _matrix(tmp_path / "m.toml", FIXTURES / "models" / "tiny-qwen3next" / "config.json",
                [*NEXTN, "--mamba-scheduler-strategy", "extra_buffer", "--no-such-flag"])  # fmt: skip
    r = envbuilder("--matrix", str(m), "--workdir", str(wd), "build", "--json", timeout=1200)
    out = {x["id"]: {s["name"]: s for s in x["stages"]} for x in json.loads(r.out)}
    assert len(out) == 2
    for stages in out.values():
        imp = stages["import"]
        assert imp["status"] == "fail" and imp["reason"] == "bad-flag", imp["message"]
        assert imp["details"]["flag_problems"] == ["--no-such-flag does not exist"], imp["details"]["flag_problems"]
