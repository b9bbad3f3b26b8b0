"""Corrupt state in the workdir: a broken stored result is moved aside (named) and that cell recomputed while the
others go on; a truncated lock is derived data and is regenerated."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from envbuilder import lock
from envbuilder.cli import main
from tests.conftest import Ran, write
from tests.localindex import LocalIndex, serve


def cli(*args: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    idx = LocalIndex(tmp_path_factory.mktemp("idx"))
    idx.add("engine-pkg", "1.0")
    idx.add("engine-pkg", "2.0")
    with serve(idx):
        yield idx


def _workdir(tmp_path: Path, index: LocalIndex) -> tuple[list[str], Path]:
    m = write(tmp_path / "matrix.toml", '[matrix]\nengine_pkg = ["1.0", "2.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\n'
              f'python = ["3.11"]\n[model]\npath = "m"\n[server]\nengine = "llama-cpp"\n[resolve]\nindexes = ["{index.url}"]\nas_of = "fresh"\n')
    base = ["--matrix", str(m), "--workdir", str(tmp_path / "wd")]
    assert cli(*base, "resolve").code == 0
    return base, tmp_path / "wd"


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "truncated": lambda text: text[: len(text) // 2],
    "empty": lambda text: "",
    "foreign": lambda text: json.dumps({"gpus": [], "driver": {}}),
    "not json": lambda text: "\x00\xff garbage",
    "another cell's": lambda text: text.replace("engine-pkg-1.0", "engine-pkg-9.9"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_a_broken_result_is_moved_aside_and_recomputed(tmp_path: Path, index: LocalIndex, kind: str) -> None:
    base, wd = _workdir(tmp_path, index)
    broken, other = sorted((wd / "results").glob("*.json"))
    other_before = other.read_bytes()
    broken.write_text(CORRUPTIONS[kind](broken.read_text()))
    r = cli(*base, "report", "--format", "json")
    assert r.code == 0 and len(json.loads(r.out)) == 1, r  # the others are reported
    warning = next(line for line in r.err.splitlines() if line.startswith("warning:"))
    assert str(broken) in warning and "moved aside" in warning
    assert [p.name.split(".json.broken-")[0] for p in (wd / "results").glob("*.broken-*")] == [broken.stem]
    r = cli(*base, "resolve")
    assert r.code == 0, r
    assert json.loads(broken.read_text())["stages"][0]["status"] == "pass"  # that cell recomputed
    assert other.read_bytes() == other_before  # the other one untouched (cached)


def test_a_truncated_lock_is_regenerated(tmp_path: Path, index: LocalIndex) -> None:
    base, wd = _workdir(tmp_path, index)
    lk = next((wd / "locks").glob("*/pylock.toml"))
    good = lk.read_bytes()
    lk.write_bytes(good[: len(good) // 2])
    r = cli(*base, "resolve")
    assert r.code == 0, r
    assert lk.read_bytes() == good and lock.read(lk).packages


def test_a_foreign_results_environment_is_never_reused(tmp_path: Path) -> None:
    """A merged result may claim a passed build whose python is any program, or any image: only an environment
    this workdir built for the cell is reused (else the import stage would run what a CI artifact names)."""
    from envbuilder import matrix
    from envbuilder.artifacts import BuiltEnvironment
    from envbuilder.build import BuildStage
    from envbuilder.pipeline import RunContext, Workspace
    from envbuilder.results import StageResult, Status

    m = matrix.load(write(tmp_path / "matrix.toml", '[matrix]\nx = ["1.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\n'
                          'python = ["3.12"]\n[model]\npath = "m"\n'))  # fmt: skip
    (cell,) = m.cells()
    ctx = RunContext(matrix=m, workspace=Workspace(tmp_path / "wd"))
    own = write(ctx.workspace.venvs(cell.id) / "bin" / "python", "")

    def built(**kw: str) -> StageResult:
        return StageResult(name="build", status=Status.PASS, artifact=BuiltEnvironment(**kw))  # type: ignore[arg-type]

    stage = BuildStage()
    assert stage.intact(ctx, cell, built(kind="venv", python=str(own)))
    assert not stage.intact(ctx, cell, built(kind="venv", python="/bin/sh"))
    assert not stage.intact(ctx, cell, built(kind="venv", python=str(ctx.workspace.venvs(cell.id) / ".." / ".." / "x")))
    assert not stage.intact(ctx, cell, built(kind="image", python="python", image="attacker/img:latest"))
