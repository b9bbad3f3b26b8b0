"""The degenerate-output detector on real texts (SGLang on an H200, llama.cpp on the CPU) and its CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envbuilder.checks import degeneracy
from tests.conftest import FIXTURES, ROOT

ROWS = [json.loads(ln) for ln in (FIXTURES / "degeneracy.jsonl").read_text().splitlines() if ln.strip()]


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_calibration_set(row: dict[str, str]) -> None:
    v = degeneracy.detect(row["text"], finish_reason=row.get("finish_reason"))
    assert v.label == row["expected"], (v.signals, v.numbers, row["text"][:120])


def test_calibration_set_has_real_degenerate_output_of_each_kind() -> None:
    degenerate = [r for r in ROWS if r["expected"] == "degenerate"]
    assert any(r["id"].startswith("sglang-h200-random") and "random weights" in r["source"] for r in degenerate)
    assert any(r["id"].startswith("llamacpp-rope-freq-scale") and r["text"] == "" for r in ROWS)
    assert sum(r["expected"] == "ok" for r in ROWS) >= 30


@pytest.mark.parametrize(("text", "signal"), [
    ("wife's " * 30, "loop"), ("!" * 40, "loop"), ("/" * 40, "loop"), ("   ", "empty"), ("None", "empty"),
    ("the cat sat on the mat. " * 12, "loop"),
])
def test_known_failure_shapes(text: str, signal: str) -> None:
    v = degeneracy.detect(text)
    assert v.degenerate and signal in v.signals


def test_cli_json_lines_one_verdict_per_line_and_exit_code() -> None:
    lines = [{"id": "a", "text": "The capital of France is Paris."}, {"id": "b", "text": "!!!!!!!!!!!!!!!!!!!!!!!!!!!!"}]
    p = subprocess.run([sys.executable, "-m", "envbuilder", "degeneracy", "--json", "-"], cwd=ROOT, text=True,
                       input="\n".join(json.dumps(x) for x in lines) + "\n", capture_output=True, check=False)
    assert p.returncode == 1
    out = [json.loads(x) for x in p.stdout.splitlines()]
    assert [o["id"] for o in out] == ["a", "b"] and [o["verdict"] for o in out] == ["ok", "degenerate"]
    assert "loop" in out[1]["signals"]
    ok = subprocess.run([sys.executable, "-m", "envbuilder", "degeneracy", "-"], cwd=ROOT, text=True,
                        input="Two sentences about the sea. It is wide and deep.", capture_output=True, check=False)
    assert ok.returncode == 0 and ok.stdout.strip() == "1: ok"
    bad = subprocess.run([sys.executable, "-m", "envbuilder", "degeneracy", "-"], cwd=ROOT, text=True,
                         input='{"id": 1}\n', capture_output=True, check=False)
    assert bad.returncode == 2 and "line 1" in bad.stderr and "Traceback" not in bad.stderr
