"""matrix.toml: GitHub Actions include/exclude semantics, validation, cell ids, selection."""

from __future__ import annotations

import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuilder import matrix
from envbuilder.errors import InputError
from tests.conftest import AXES, BASE_AXES, ROOT, envbuilder, write

# --- GitHub Actions' documented examples, verbatim ------------------------------------------


def test_gha_include_example_expanding_configurations() -> None:
    # docs.github.com "Example: Expanding configurations"
    got = matrix.expand_combinations(
        {"fruit": ["apple", "pear"], "animal": ["cat", "dog"]},
        [],
        [{"color": "green"}, {"color": "pink", "animal": "cat"}, {"fruit": "apple", "shape": "circle"},
         {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}],
    )
    assert got == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]


def test_gha_include_example_adding_configurations() -> None:
    # "Example: Adding configurations"
    got = matrix.expand_combinations(
        {"os": ["windows-latest", "ubuntu-latest"], "node": ["14", "16"]}, [],
        [{"os": "windows-latest", "node": "16", "npm": "6"}],
    )
    assert {"os": "windows-latest", "node": "16", "npm": "6"} in got
    assert sum("npm" in c for c in got) == 1 and len(got) == 4


def test_gha_exclude_example() -> None:
    # "Excluding matrix configurations": 12 - 1 - 2 = 9 jobs
    got = matrix.expand_combinations(
        {"os": ["macos-latest", "windows-latest"], "version": ["12", "14", "16"],
         "environment": ["staging", "production"]},
        [{"os": "macos-latest", "version": "12", "environment": "production"},
         {"os": "windows-latest", "version": "16"}],
        [],
    )
    assert len(got) == 9
    assert {"os": "macos-latest", "version": "12", "environment": "production"} not in got


def test_includes_apply_after_excludes_and_cannot_overwrite_originals() -> None:
    got = matrix.expand_combinations({"a": ["1", "2"]}, [{"a": "1"}], [{"a": "1", "b": "x"}])
    # a=1 was excluded first, so the include cannot extend it: it becomes a new combination
    assert got == [{"a": "2"}, {"a": "1", "b": "x"}]
    got = matrix.expand_combinations({"a": ["1"]}, [], [{"b": "x"}, {"b": "y"}])
    assert got == [{"a": "1", "b": "y"}]  # added values may be overwritten by later includes


# --- the project's matrix and cells ---------------------------------------------------------


def test_default_matrix_loads_and_expands() -> None:
    m = matrix.load(ROOT / "matrix.toml")
    cells = m.cells()
    ids = [c.id for c in cells]
    assert "sglang-0.5.11_fa4-resolver_cu13.0_drv-host_ubuntu24.04_py3.12" in ids
    assert "sglang-0.5.11_fa4-resolver_cu13.0_drv-590.48.01_ubuntu24.04_py3.12" in ids
    assert len(ids) == len(set(ids))
    for c in cells:
        assert all(ch in string.ascii_letters + string.digits + "._+-" for ch in c.id)


def test_cell_ids_and_hashes_are_stable_across_processes() -> None:
    code = ("import json; from pathlib import Path; from envbuilder import matrix;"
            "print(json.dumps([[c.id, c.hash] for c in matrix.load(Path('matrix.toml')).cells()]))")
    runs = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1]
    assert json.loads(runs[0])


def test_hash_changes_with_settings_but_id_does_not(tmp_path: Path) -> None:
    a = matrix.load(write(tmp_path / "a.toml", BASE_AXES)).cells()[0]
    b = matrix.load(write(tmp_path / "b.toml", BASE_AXES + "tp = 2\n")).cells()[0]
    assert a.id == b.id and a.hash != b.hash
    again = matrix.load(write(tmp_path / "a2.toml", BASE_AXES)).cells()[0]
    assert a == again and hash(a) == hash(again)
    assert a != b and hash(a) != hash(b)


def test_select_by_glob_and_axis(tmp_path: Path) -> None:
    m = matrix.load(ROOT / "matrix.toml")
    assert {c.axes["sglang"] for c in matrix.select(m.cells(), ["sglang=0.5.1*"])} == {"0.5.10", "0.5.11"}
    assert len(matrix.select(m.cells(), ["sglang=0.5.11,driver=host"])) == 2
    assert len(matrix.select(m.cells(), ["*drv-590*"])) == 1
    with pytest.raises(InputError, match="matches no cell"):
        matrix.select(m.cells(), ["nothing-like-this"])
    with pytest.raises(InputError, match="did you mean 'sglang'"):
        matrix.select(m.cells(), ["sglng=0.5.11"])


# --- bad input: one line naming file and key, exit 2 ----------------------------------------

BAD = {
    "bad toml": ("[matrix\n", "invalid TOML"),
    "unknown section": (BASE_AXES + "[modle]\npath='x'\n", "[modle]: unknown section (did you mean 'model'?)"),
    "unknown key": (BASE_AXES + "context_lenght = 5\n", "[model].context_lenght: unknown key (did you mean 'context_length'?)"),
    "wrong type": (BASE_AXES + "tp = 'two'\n", "[model].tp: must be an integer"),
    "bad cuda": (BASE_AXES.replace('cuda = ["13.0"]', 'cuda = ["13.0", "12.x"]'), '[matrix].cuda[1]: "12.x" is not a CUDA version'.replace('"', "'")),
    "float cuda": (BASE_AXES.replace('cuda = ["13.0"]', "cuda = [12.8]"), "[matrix].cuda[0]: 12.8 must be a string"),
    "empty axis": (BASE_AXES.replace('cuda = ["13.0"]', "cuda = []"), "[matrix].cuda: is empty"),
    "unknown os": (BASE_AXES.replace("ubuntu24.04", "ubuntu24.4"), "did you mean 'ubuntu24.04'?"),
    "bad version": (BASE_AXES.replace('"0.5.11"', '"latest"'), "[matrix].sglang[0]: 'latest' is not an exact version"),
    "exclude unknown axis": (BASE_AXES + "[[matrix.exclude]]\nsglnag = '0.5.11'\n", "[[matrix.exclude]][0].sglnag: unknown axis (did you mean 'sglang'?)"),
    "include incomplete": (BASE_AXES + "[[matrix.include]]\nsglang = '0.5.9'\n", "without"),
    "duplicate cells": (BASE_AXES + "[[matrix.include]]\nsglang='0.5.9'\ncuda='13.0'\nos='ubuntu24.04'\npython='3.12'\n"
                        "[[matrix.include]]\nsglang='0.5.9'\ncuda='13.0'\nos='ubuntu24.04'\npython='3.12'\n", "appears twice"),
    "duplicate value": (BASE_AXES.replace('python = ["3.12"]', 'python = ["3.12", "3.12"]'), "listed twice"),
    "bad engine": (BASE_AXES + "[server]\nengine = 'vllm'\n", "[server].engine: 'vllm' is not one of"),
    "bad as_of": (BASE_AXES + "[resolve]\nas_of = 'yesterday'\n", "[resolve].as_of"),
    "runner unknown axis": (BASE_AXES + "[build.runners]\n'gpu=h200' = 'docker'\n", "[build].runners.'gpu=h200': no axis 'gpu'"),
    "runner bad value": (BASE_AXES + "[build.runners]\n'sglang=0.5.11' = 'podman'\n", "[build].runners.sglang=0.5.11: 'podman' is not one of"),
    "missing model path": (AXES + "[model]\ntp = 1\n", "[model].path: missing"),
    "missing axis": ('[matrix]\nsglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\n', "[matrix].python: missing"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_matrix_gives_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    text, expected = BAD[case]
    p = write(tmp_path / "matrix.toml", text)
    r = envbuilder("--matrix", str(p), "expand")
    assert r.code == 2, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert f"{p}: " in lines[0], lines[0]
    assert expected.replace('"', "'") in lines[0].replace('"', "'"), lines[0]
    assert "Traceback" not in r.err


_value = st.one_of(st.text(max_size=8), st.integers(), st.floats(allow_nan=False), st.booleans(),
                   st.lists(st.text(max_size=4), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
_axis = st.sampled_from(["sglang", "cuda", "driver", "os", "python", "flash_attn_4", "bogus axis", ""])


@st.composite
def malformed(draw: st.DrawFn) -> dict[str, object]:
    doc: dict[str, object] = {"matrix": {"sglang": ["0.5.11"], "cuda": ["13.0"], "os": ["ubuntu24.04"], "python": ["3.12"]},
                              "model": {"path": "m"}}
    kind = draw(st.sampled_from(["axis", "section", "key", "include", "exclude"]))
    m = doc["matrix"]
    assert isinstance(m, dict)
    if kind == "axis":
        m[draw(_axis)] = draw(st.one_of(_value, st.lists(_value, max_size=3)))
    elif kind == "section":
        doc[draw(st.sampled_from(["model", "server", "smoke", "resolve", "build", "modle"]))] = draw(_value)
    elif kind == "key":
        section = draw(st.sampled_from(["model", "server", "smoke", "resolve", "build"]))
        doc[section] = {draw(st.sampled_from(["tp", "path", "engine", "args", "as_of", "checks", "runner", "nope"])): draw(_value)}
    else:
        m[kind] = draw(st.one_of(_value, st.lists(st.dictionaries(_axis, _value, max_size=2), max_size=2)))
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed())
def test_malformed_matrices_never_traceback(doc: dict[str, object]) -> None:
    """In-process: any malformed document either loads or raises InputError naming a key."""
    try:
        m = matrix.parse(doc, where="matrix.toml")
        m.cells()
    except InputError as e:
        line = str(e)
        assert line.startswith("matrix.toml: ") and "\n" not in line
        assert e.key, line  # names the key, not only the file
        assert line.startswith(f"matrix.toml: {e.key}: ")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["tp", "context_length", "parameters", "path"]), st.sampled_from(["[1]", "{a=1}", "true", "'x'", "-3"]))
def test_malformed_matrix_cli_exit_2(tmp_path: Path, key: str, value: str) -> None:
    """Through the real CLI: exit 2, no traceback, the message names the key."""
    p = write(tmp_path / "m.toml", AXES + f"[model]\n{key} = {value}\n" + ("" if key == "path" else 'path = "m"\n'))
    r = envbuilder("--matrix", str(p), "expand")
    if r.code == 0:
        return  # a valid value for that key
    assert r.code == 2 and "Traceback" not in r.err
    assert f"[model].{key}" in r.err and len(r.err.strip().splitlines()) == 1


def test_runner_per_cell_first_matching_filter_wins(tmp_path: Path) -> None:
    m = matrix.load(write(tmp_path / "m.toml", BASE_AXES.replace('sglang = ["0.5.11"]', 'sglang = ["0.5.10", "0.5.11"]')
                          + '[build]\nrunner = "venv"\n[build.runners]\n"sglang=0.5.11" = "docker"\n"*" = "venv"\n'))
    assert {c.package("sglang"): m.build.runner_for(c) for c in m.cells()} == {"0.5.10": "venv", "0.5.11": "docker"}
