"""CLI plumbing: exit codes, --json, global options before or after the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuilder.cli import ui as ui_mod
from envbuilder.pipeline import StageEvent
from envbuilder.results import StageResult, Status
from tests.conftest import ROOT, envbuilder, write


def test_expand_json_lists_default_matrix() -> None:
    r = envbuilder("expand", "--json")
    assert r.code == 0, r.err
    cells = json.loads(r.out)
    assert len(cells) == 8
    assert all({"id", "axes", "hash"} <= set(c) for c in cells)


def test_global_options_before_or_after_command(tmp_path: Path) -> None:
    m = write(tmp_path / "m.toml", (ROOT / "matrix.toml").read_text().replace('"0.5.9", ', ""))
    a = envbuilder("--matrix", str(m), "expand", "--json")
    b = envbuilder("expand", "--matrix", str(m), "--json")
    assert a.code == b.code == 0 and a.out == b.out and len(json.loads(a.out)) == 6


def test_usage_errors_exit_2_with_one_line() -> None:
    for args in (["expand", "--bogus"], ["no-such-command"], ["expand", "sglang=9.9"]):
        r = envbuilder(*args)
        assert r.code == 2, (args, r)
        assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_missing_matrix_file(tmp_path: Path) -> None:
    r = envbuilder("--matrix", str(tmp_path / "nope.toml"), "expand")
    assert r.code == 2 and "nope.toml: file not found" in r.err


def test_python_dash_m_and_version() -> None:
    r = envbuilder("--version")
    assert r.code == 0 and r.out.startswith("envbuilder ")


def test_the_wheel_carries_its_data_files(tmp_path: Path) -> None:
    """A non-editable install (what `nox -s matrix` uses) must find the Dockerfile template, rules and prompts."""
    import subprocess
    import zipfile

    from envbuilder.uvbin import uv_bin

    subprocess.run([uv_bin(), "build", "--wheel", "-o", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("envbuilder-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("envbuilder/_dockerfiles/cell.Dockerfile.j2", "envbuilder/rules/cuda_driver.toml",
                   "envbuilder/rules/arch.toml", "envbuilder/rules/sglang_memory.toml", "envbuilder/data/platforms.toml",
                   "envbuilder/data/sglang_options.json", "envbuilder/prompts/smollm2.toml",
                   "envbuilder/prompts/qwen3.toml"):
        assert needed in names, needed



def test_ci_logs_fold_per_stage_under_github_actions(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Under GitHub Actions each stage's lines sit in one ``::group::`` fold; elsewhere no markers."""
    def feed() -> list[str]:
        out, err = ui_mod.consoles(False)
        ui = ui_mod.Ui(out=out, err=err, json=False, verbose=False)
        on_event = ui_mod.progress(ui)
        for stage in ("resolve", "precheck"):
            for cell in ("a", "b"):
                on_event(StageEvent(cell_id=cell, stage=stage))
                on_event(StageEvent(cell_id=cell, stage=stage, result=StageResult(name=stage, status=Status.PASS)))
        ui.endgroup()
        return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("::")]

    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert feed() == ["::group::envbuilder resolve", "::endgroup::", "::group::envbuilder precheck", "::endgroup::"]
    monkeypatch.setenv("GITHUB_ACTIONS", "")
    assert feed() == []


def test_a_workdir_that_cannot_be_written_is_one_line() -> None:
    r = envbuilder("--workdir", "/proc/1", "report", "--all")  # /proc/1 is a folder no one can make folders in
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert r.err.strip().splitlines() == [r.err.strip()] and "/proc/1/reports" in r.err
