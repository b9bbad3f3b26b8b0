"""The result contract: round trip, verdict order, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envbuilder import atomic
from envbuilder.errors import InputError
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status, load_result_file


def _result() -> CellResult:
    return CellResult(id="c1", axes={"sglang": "0.5.11"}, hash="abc", stages=(
        StageResult(name="resolve", status=Status.PASS, message="ok", duration_s=1.25, inputs="k",
                    details={"packages": {"torch": "2.11.0"}}),
        StageResult(name="precheck", status=Status.FAIL, reason=Reason.DRIVER_MISMATCH, message="mismatch"),
    ), env={"envbuilder": "0.1.0"})


def test_round_trip_and_contract_keys(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    r = _result()
    store.save(r)
    data = json.loads(store.path("c1").read_text())
    assert {"id", "axes", "verdict", "stages", "env"} <= set(data)
    assert {"name", "status", "reason", "message", "duration_s"} <= set(data["stages"][0])
    assert data["verdict"] == "fail"
    assert store.load("c1") == r


@pytest.mark.parametrize(("statuses", "verdict"), [
    ([Status.PASS, Status.PASS], Status.PASS),
    ([Status.PASS, Status.SKIP], Status.SKIP),
    ([Status.SKIP, Status.ERROR], Status.ERROR),
    ([Status.ERROR, Status.FAIL, Status.PASS], Status.FAIL),
])
def test_verdict_is_worst_stage(statuses: list[Status], verdict: Status) -> None:
    r = CellResult(id="x", axes={}, stages=tuple(StageResult(name=f"s{i}", status=s) for i, s in enumerate(statuses)))
    assert r.verdict is verdict


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    atomic.write_json(target, {"v": 1})

    def boom(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_malformed_result_file_is_input_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match=r"bad\.json"):
        load_result_file(p)


def _cell(*stages: StageResult) -> CellResult:
    return CellResult(id="x", axes={}, stages=stages)


def test_not_asked_for_is_not_could_not_run_here() -> None:
    smoke = StageResult(name="smoke", status=Status.PASS)
    no_spec = StageResult(name="smoke.spec", status=Status.SKIP, reason=Reason.NOT_APPLICABLE)
    no_build = StageResult(name="build", status=Status.SKIP, reason=Reason.NOT_APPLICABLE)
    assert _cell(no_build, smoke, no_spec).verdict is Status.PASS  # every stage that ran passed
    assert _cell(no_build, no_spec).verdict is Status.SKIP  # nothing ran
    no_gpu = StageResult(name="smoke", status=Status.SKIP, reason=Reason.NO_GPU)
    assert _cell(StageResult(name="resolve", status=Status.PASS), no_gpu).verdict is Status.SKIP  # could not run here
    no_python = StageResult(name="build", status=Status.SKIP, reason=Reason.PYTHON_UNAVAILABLE)
    assert _cell(StageResult(name="resolve", status=Status.PASS), no_python).verdict is Status.SKIP
    assert _cell(smoke, no_spec, StageResult(name="smoke.golden", status=Status.FAIL)).verdict is Status.FAIL


def test_h200_plain_run_reads_pass() -> None:
    """The README's H200 proof: plain SGLang 0.5.11 (no speculation, so smoke.spec is not-applicable) -> pass."""
    r = load_result_file(Path(__file__).parent / "fixtures/results-v1/h200-plain.json")
    spec = r.stage("smoke.spec")
    assert spec is not None and spec.not_applicable
    assert all(s.status is Status.PASS for s in r.applicable) and r.verdict is Status.PASS


V1 = Path(__file__).parent / "fixtures/results-v1"


def test_version_1_files_load_with_typed_artifacts(tmp_path: Path) -> None:
    """Real version-1 files from the H200: the artifacts come back typed, the checks once, and they save as v2."""
    r = load_result_file(V1 / "h200-import-venv.json")
    resolved, built = r.lock(), r.environment()
    assert resolved is not None and len(resolved.sha256) == 64 and resolved.packages["sglang"] == "0.5.11"
    assert resolved.index_args and resolved.path.endswith("pylock.toml")
    assert built is not None and built.kind == "venv" and built.python.endswith("/bin/python") and built.venv
    smoke = load_result_file(V1 / "h200-plain.json")
    s = smoke.stage("smoke")
    assert s is not None and "substages" not in s.details  # v1 stored the checks twice
    assert [x.name for x in smoke.stages].count("smoke.golden") == 1
    store = ResultStore(tmp_path)
    store.save(r)
    data = json.loads(store.path(r.id).read_text())
    assert data["schema"] == 2
    build = next(x for x in data["stages"] if x["name"] == "build")
    assert build["artifact"] == {"kind": "venv", "python": built.python, "venv": built.venv, "image": None,
                                 "image_id": None}
    assert store.load(r.id) == r


def test_checks_are_stored_once(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    checks = (StageResult(name="smoke.golden", status=Status.PASS), StageResult(name="smoke.spec", status=Status.PASS))
    smoke = StageResult(name="smoke", status=Status.PASS, checks=checks, details={"launch": {"ready_s": 3.0}})
    store.save(CellResult(id="c", axes={}, stages=(smoke, *checks)))
    text = store.path("c").read_text()
    assert text.count('"smoke.golden"') == 1 and "substages" not in text
