"""The index client and resolve against broken indexes: a local fault server (loopback only) answers every
request the same wrong way; each must end ``error``/``network`` (undecided), never a verdict about the cell."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from envbuilder import matrix
from envbuilder.index import NOT_AN_INDEX, IndexUnreachable, ProjectNotFound, SimpleIndex
from envbuilder.pipeline import RunContext, RunOptions, Workspace, run_pipeline
from envbuilder.resolve import ResolveStage
from envbuilder.results import CellResult, Reason, Status
from tests.conftest import write
from tests.localindex import FAULTS, LocalIndex, serve, serve_fault

AXES = 'engine_pkg = ["1.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\npython = ["3.11"]'


def _resolve(tmp_path: Path, url: str, as_of: str, timeout_s: float = 60) -> CellResult:
    text = (f'[matrix]\n{AXES}\n[model]\npath = "m"\n[server]\nengine = "llama-cpp"\n'
            f'[resolve]\nindexes = ["{url}"]\nas_of = "{as_of}"\ntimeout_s = {timeout_s}\n')  # fmt: skip
    m = matrix.load(write(tmp_path / "matrix.toml", text))
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"),
                     options=RunOptions(retries=0, backoff_s=0.05, index_timeout_s=2.0))  # fmt: skip
    (r,) = run_pipeline(ctx, m.cells(), [ResolveStage()])
    return r


@pytest.mark.parametrize("as_of", ["release", "fresh"])
@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "drip"])
def test_a_broken_index_is_undecided_never_a_verdict(tmp_path: Path, fault: str, as_of: str) -> None:
    """release: envbuilder's client asks first; fresh: uv asks first and envbuilder checks the index after."""
    with serve_fault(fault) as url:
        r = _resolve(tmp_path, url, as_of)
    s = r.stage("resolve")
    assert s is not None and (s.status, s.reason) == (Status.ERROR, Reason.NETWORK), s
    assert NOT_AN_INDEX in s.message
    assert not (tmp_path / "wd" / "cache" / "index").is_dir() or not any(
        "files" not in p.read_text() for p in (tmp_path / "wd" / "cache" / "index").glob("*.json")
        if p.name != "release-times.json")  # nothing a broken index said was cached as a project page


def test_a_dripping_index_is_ended_by_the_overall_deadline(tmp_path: Path) -> None:
    """One byte every 0.2 s: each read succeeds, so only a deadline for the whole answer ends it (2 s here)."""
    idx = SimpleIndex("http://127.0.0.1:9/simple", None, retries=0, timeout_s=1.0)
    with serve_fault("drip", drip_s=0.2) as url:
        idx = SimpleIndex(url, None, retries=0, timeout_s=1.0)
        t = time.monotonic()
        with pytest.raises(IndexUnreachable, match="within 1 s"):
            idx.project("engine-pkg")
        assert time.monotonic() - t < 3
        t = time.monotonic()
        r = _resolve(tmp_path, url, "release")
        assert time.monotonic() - t < 10
    s = r.stage("resolve")
    assert s is not None and (s.status, s.reason) == (Status.ERROR, Reason.NETWORK), s


def test_a_hanging_uv_is_ended_within_resolve_timeout(tmp_path: Path) -> None:
    """uv itself reads the dripping index (fresh: no release date to read first); [resolve] timeout_s ends it."""
    with serve_fault("drip", drip_s=0.2) as url:
        t = time.monotonic()
        r = _resolve(tmp_path, url, "fresh", timeout_s=3)
        took = time.monotonic() - t
    s = r.stage("resolve")
    assert s is not None and (s.status, s.reason) == (Status.ERROR, Reason.NETWORK), s
    assert "timed out after 3 s" in s.message and took < 8
    assert not list((tmp_path / "wd" / "tmp").iterdir())  # uv's scratch folder went with it


def test_a_missing_project_on_a_working_index_is_still_a_verdict(tmp_path: Path) -> None:
    idx = LocalIndex(tmp_path / "idx")
    idx.add("other", "1.0")
    with serve(idx):
        with pytest.raises(ProjectNotFound):
            SimpleIndex(idx.url, None, retries=0).project("engine-pkg")
        r = _resolve(tmp_path, idx.url, "fresh")
    s = r.stage("resolve")
    assert s is not None and (s.status, s.reason) == (Status.FAIL, Reason.UNSATISFIABLE), s


@pytest.mark.parametrize("content", ["[]", '{"x": 5}', "{", "", '{"k": 12}'])
def test_a_wrong_shape_release_times_cache_is_named_and_rebuilt(tmp_path: Path, content: str,
                                                              caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    idx = LocalIndex(tmp_path / "idx")
    idx.add("engine-pkg", "1.0", uploaded="2026-03-01T10:00:00Z")
    memo = write(tmp_path / "wd" / "cache" / "index" / "release-times.json", content)
    with serve(idx):
        r = _resolve(tmp_path, idx.url, "release")
    s = r.stage("resolve")
    assert s is not None and s.status is Status.PASS, s
    assert str(memo) in caplog.text and "rebuilt" in caplog.text
    assert json.loads(memo.read_text()) == {f"{idx.url} engine-pkg 1.0": "2026-03-01T10:00:00+00:00"}
