"""The validation layer: hostile and clumsy input ends as one line naming the file and key, exit 2, never a
traceback. Hypothesis fuzzes matrix files, host-facts files and result files through the CLI, in-process."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random
import string
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuilder import doctor, images, matrix, model, precheck, validate
from envbuilder.artifacts import HostFacts
from envbuilder.cli import main
from envbuilder.errors import InputError
from tests.conftest import AXES, BASE_AXES, FIXTURES, MODEL, Ran, envbuilder, write


def cli(*args: str) -> Ran:
    """The real CLI, in-process (fast enough to fuzz); output as a user sees it."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


def assert_one_line_exit_2(r: Ran, where: str, key: str | None = None) -> str:
    assert r.code == 2, r
    assert "Traceback" not in r.err + r.out
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("error: ") and where in lines[0], lines[0]
    if key is not None:
        assert key in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------------------------
# Named cases (each was a traceback, a junk cell or a silent wrong answer before)
# --------------------------------------------------------------------------------------------

BAD_MATRIX = {
    "cuda newline": (BASE_AXES.replace('cuda = ["13.0"]', 'cuda = ["12.8\\n"]'), "[matrix].cuda[0]"),
    "cuda arabic digits": (BASE_AXES.replace('cuda = ["13.0"]', 'cuda = ["١٢.٨"]'), "[matrix].cuda[0]"),
    "python newline": (BASE_AXES.replace('python = ["3.12"]', 'python = ["3.12\\n"]'), "[matrix].python[0]"),
    "driver newline": (AXES + 'driver = ["580.126.09\\n"]\n' + MODEL, "[matrix].driver[0]"),
    "axis name newline": (AXES + '"sglang\\n" = ["0.5.11"]\n' + MODEL, "[matrix].sglang"),
    "5000-digit version": (BASE_AXES.replace('"0.5.11"', '"' + "9" * 5000 + '"'), "[matrix].sglang[0]"),
    "non-ascii version": (BASE_AXES.replace('"0.5.11"', '"0.5.١"'), "[matrix].sglang[0]"),
    "negative port": (BASE_AXES + "[server]\nport = -1\n", "[server].port"),
    "huge port": (BASE_AXES + "[server]\nport = 70000\n", "[server].port"),
    "negative startup timeout": (BASE_AXES + "[server]\nstartup_timeout_s = -5\n", "[server].startup_timeout_s"),
    "nan stall timeout": (BASE_AXES + "[server]\nstall_timeout_s = nan\n", "[server].stall_timeout_s"),
    "zero resolve timeout": (BASE_AXES + "[resolve]\ntimeout_s = 0\n", "[resolve].timeout_s"),
    "negative resolve jobs": (BASE_AXES + "[resolve]\njobs = -1\n", "[resolve].jobs"),
    "cuda index key": (BASE_AXES + '[resolve]\ncuda_indexes = {"12.x" = "http://127.0.0.1:1/simple"}\n',
                       "[resolve].cuda_indexes.'12.x': '12.x' is not a CUDA version"),
    "cuda index url": (BASE_AXES + '[resolve]\ncuda_indexes = {"12.8" = " "}\n', "[resolve].cuda_indexes.'12.8'"),
    "cuda index type": (BASE_AXES + '[resolve]\ncuda_indexes = {"12.8" = 3}\n', "[resolve].cuda_indexes.12.8"),
    "zero concurrency": (BASE_AXES + "[smoke]\nconcurrency = [0]\n", "[smoke].concurrency[0]"),
    "negative long context": (BASE_AXES + "[smoke]\nlong_context = [-100]\n", "[smoke].long_context[0]"),
    "dockerfile base image injection": (BASE_AXES + '[build]\nbase_image = "ubuntu:24.04\\nRUN touch /PWNED"\n',
                                        "[build].base_image"),
    "dockerfile env key injection": (BASE_AXES + '[build]\nenv = {"X=1 touch /PWNED;Y" = "1"}\n', "[build].env"),
    "server env key": (BASE_AXES + '[server]\nenv = {"A B" = "1"}\n', "[server].env"),
    "huge axis product": ("[matrix]\n" + "".join(f'p{i} = [{", ".join(repr(f"1.{j}") for j in range(10))}]\n'
                                                 for i in range(9)).replace("'", '"')
                          + 'cuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n' + MODEL, "[matrix]"),
}


@pytest.mark.parametrize("case", sorted(BAD_MATRIX))
def test_bad_matrix_value_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    text, key = BAD_MATRIX[case]
    p = write(tmp_path / "matrix.toml", text)
    assert_one_line_exit_2(cli("--matrix", str(p), "expand"), str(p), key)


def test_cell_cap_names_the_count_and_max_cells_raises_it(tmp_path: Path) -> None:
    axes = 'a = [' + ", ".join(f'"1.{i}"' for i in range(20)) + ']\nb = [' + ", ".join(f'"2.{i}"' for i in range(15)) + "]"
    p = write(tmp_path / "matrix.toml", f'[matrix]\n{axes}\ncuda = ["none"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n' + MODEL)
    line = assert_one_line_exit_2(cli("--matrix", str(p), "expand"), str(p), "[matrix]")
    assert "expands to 300 cells; at most 256" in line and "--max-cells" in line
    r = cli("--matrix", str(p), "--max-cells", "300", "expand", "--json")
    assert r.code == 0 and len(json.loads(r.out)) == 300
    assert_one_line_exit_2(cli("--matrix", str(p), "--max-cells", "0", "expand"), "command line", "--max-cells")


def test_dockerfile_render_refuses_what_the_loader_refuses(tmp_path: Path) -> None:
    """The sink checks too: nothing unquoted reaches a Dockerfile even from a caller that skipped the loader."""
    m = matrix.load(write(tmp_path / "matrix.toml", BASE_AXES))
    (cell,) = m.cells()
    lock_path = write(tmp_path / "pylock.toml", 'lock-version = "1.0"\n')
    with pytest.raises(InputError, match="base_image"):
        images.render(cell, lock_path, tmp_path / "ctx", base="ubuntu:24.04\nRUN touch /PWNED")
    with pytest.raises(InputError, match="env"):
        images.render(cell, lock_path, tmp_path / "ctx", base="ubuntu:24.04", install_env={"X=1 touch /PWNED;Y": "1"})
    assert not (tmp_path / "ctx" / "Dockerfile").exists()
    r = images.render_layers(cell, lock_path, tmp_path / "ctx", base="nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04",
                             install_env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF; touch /x"})  # fmt: skip
    stack = (r.stack_dir / "Dockerfile").read_text()
    assert "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04" in stack and "PWNED" not in stack


@pytest.mark.parametrize("ref", ["ubuntu:24.04", "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", "localhost:5000/a/b:c",
                                 "debian@sha256:" + "a" * 64, "registry.example.org/team/img"])
def test_image_references_that_are_real_pass(ref: str) -> None:
    assert validate.image_reference(ref, "f", "k") == ref


@pytest.mark.parametrize("ref", ["ubuntu:24.04\nRUN x", "ubuntu 24.04", "Ubuntu", "a:b:c", "", "x" * 300, "ubuntu:24.04 AS x"])
def test_image_references_that_are_not_fail(ref: str) -> None:
    with pytest.raises(InputError):
        validate.image_reference(ref, "f", "k")


def test_command_line_numbers_are_checked(tmp_path: Path) -> None:
    p = write(tmp_path / "matrix.toml", BASE_AXES)
    for args, key in ((("ci-matrix", "--max-jobs", "0"), "--max-jobs"), (("ci-matrix", "--max-jobs", "-1"), "--max-jobs"),
                      (("resolve", "--jobs", "-1"), "--jobs"), (("smoke", "--startup-timeout", "-3"), "--startup-timeout"),
                      (("build", "--base-image", "ubuntu\nRUN x"), "--base-image")):  # fmt: skip
        assert_one_line_exit_2(cli("--matrix", str(p), "--workdir", str(tmp_path / "wd"), *args), "command line", key)


def test_output_paths_are_checked_before_any_work(tmp_path: Path) -> None:
    p = write(tmp_path / "matrix.toml", BASE_AXES)
    base = ("--matrix", str(p), "--workdir", str(tmp_path / "wd"))
    missing = tmp_path / "no" / "such" / "report.md"
    assert_one_line_exit_2(cli(*base, "report", "--format", "md", "--output", str(missing)), str(missing), "--output")
    assert_one_line_exit_2(cli(*base, "report", "--format", "md", "--output", str(tmp_path)), str(tmp_path), "--output")
    assert_one_line_exit_2(cli(*base, "doctor", "--save", str(missing)), str(missing), "--save")
    assert_one_line_exit_2(cli(*base, "doctor", "--save", "/proc/envbuilder-doctor.json"), "/proc/envbuilder-doctor.json",
                           "--save")  # fmt: skip
    regular = write(tmp_path / "afile", "x")
    for cmd in ("report", "resolve", "expand"):
        assert_one_line_exit_2(cli("--matrix", str(p), "--workdir", str(regular), cmd), str(regular), "--workdir")
    assert_one_line_exit_2(cli("--matrix", str(p), "--workdir", str(regular / "sub"), "report"), str(regular), "--workdir")


def test_degeneracy_on_binary_latin1_and_random_stdin(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café olé".encode("latin-1"))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    for f in (latin1, binary):
        assert_one_line_exit_2(cli("degeneracy", str(f)), str(f), "byte")
    nested_obj = write(tmp_path / "nested-obj.jsonl", '{"text": ' + "[" * 5000 + "\n")
    assert_one_line_exit_2(cli("degeneracy", str(nested_obj)), str(nested_obj), "line 1")
    import subprocess
    import sys

    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, "-m", "envbuilder", "degeneracy", "-"], input=random.Random(7).randbytes(4096),
                       capture_output=True, cwd=ROOT, check=False, timeout=60)  # fmt: skip
    assert p.returncode == 2 and b"Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith(b"error: stdin: byte")


def test_deeply_nested_host_facts_and_results(tmp_path: Path) -> None:
    p = write(tmp_path / "matrix.toml", BASE_AXES)
    deep = write(tmp_path / "deep.json", "[" * 200_000 + "]" * 200_000)
    assert_one_line_exit_2(cli("--matrix", str(p), "precheck", "--host-facts", str(deep)), str(deep), "nested")
    deep_obj = write(tmp_path / "deep2.json", '{"driver": ' + '{"a": ' * 5000 + "1" + "}" * 5001)
    assert_one_line_exit_2(cli("--matrix", str(p), "precheck", "--host-facts", str(deep_obj)), str(deep_obj), "nested")
    assert_one_line_exit_2(cli("--workdir", str(tmp_path / "wd"), "merge", str(deep)), str(deep), "nested")


@pytest.mark.parametrize(("field", "value"), [("kernel_module", "banana"), ("kernel_module", "580.126.09\n"),
                                              ("userspace", "٥٨٠.١٢٦"), ("cuda_supported", "x"), ("userspace_versions", ["a"])])
def test_host_facts_driver_versions_are_validated(tmp_path: Path, field: str, value: Any) -> None:
    p = write(tmp_path / "matrix.toml", BASE_AXES)
    facts = json.loads((FIXTURES / "h200-doctor.json").read_text())
    facts["driver"][field] = value
    f = write(tmp_path / "facts.json", json.dumps(facts))
    assert_one_line_exit_2(cli("--matrix", str(p), "precheck", "--host-facts", str(f)), str(f), f"driver.{field}")


# --------------------------------------------------------------------------------------------
# Fuzz
# --------------------------------------------------------------------------------------------

_WEIRD = st.sampled_from(["", " ", "\n", "12.8\n", "١٢.٨", "3.12\n", "none", "host", "resolver", "0.5.11", "13.0",
                          "ubuntu24.04", "debian12", "580.126.09", "../../x", "/etc/passwd", "\x00", "\x1b[31m",
                          "a|b", "<script>", "9" * 5000, "x=1 touch /P;Y", "ubuntu:24.04\nRUN x", "é", "😀"])  # fmt: skip
_TEXT = st.one_of(_WEIRD, st.text(st.characters(blacklist_categories=["Cs"]), max_size=12))
_SCALAR = st.one_of(_TEXT, st.integers(min_value=-(2**63), max_value=2**63 - 1), st.booleans(),
                    st.floats(allow_nan=True, allow_infinity=True))  # fmt: skip
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=8)  # fmt: skip
_KEYS = {
    "matrix": ["sglang", "flash_attn_4", "cuda", "driver", "os", "python", "include", "exclude", "torch"],
    "model": ["path", "tp", "context_length", "parameters", "dtype", "config"],
    "server": ["engine", "args", "command", "base_url", "host", "port", "startup_timeout_s", "stall_timeout_s", "env"],
    "smoke": ["checks", "golden", "concurrency", "long_context", "request_timeout_s", "needle_digits"],
    "resolve": ["indexes", "cuda_indexes", "find_links", "as_of", "extra", "constraints", "jobs", "timeout_s"],
    "build": ["runner", "base_image", "runners", "env"],
}
BASE_DOC: dict[str, Any] = {"matrix": {"sglang": ["0.5.11"], "cuda": ["13.0"], "os": ["ubuntu24.04"], "python": ["3.12"]},
                            "model": {"path": "Qwen/Qwen3.6-27B"}}


def _toml_key(k: str) -> str:
    return k if k and all(c in string.ascii_letters + string.digits + "_-" for c in k) else json.dumps(k, ensure_ascii=False)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def to_toml(doc: dict[str, Any]) -> str:
    out: list[str] = []
    for section, table in doc.items():
        if not isinstance(table, dict):
            out.insert(0, f"{_toml_key(section)} = {_toml_value(table)}")
            continue
        out.append(f"[{_toml_key(section)}]")
        out += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"


@st.composite
def matrix_docs(draw: st.DrawFn) -> str:
    """A valid matrix with a few keys set to hostile values, or its text mangled byte-wise."""
    doc = json.loads(json.dumps(BASE_DOC))
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from([*_KEYS, "bogus"]))
        key = draw(st.one_of(st.sampled_from(_KEYS.get(section, ["x"])), _TEXT))
        value = draw(st.one_of(_VALUE, st.lists(_TEXT, min_size=1, max_size=4)))
        doc.setdefault(section, {})[key] = value
    text = to_toml(doc)
    if draw(st.integers(0, 9)) == 0:  # byte-level damage: syntax errors, truncation, stray bytes
        pos = draw(st.integers(0, len(text)))
        text = text[:pos] + draw(st.sampled_from(["", "\x00", "[", '"', "\n[matrix]\n", "=", "\\"])) + text[pos + 1:]
    return text


def _check_matrix(tmp: Path, text: str) -> None:
    p = tmp / "matrix.toml"
    p.write_text(text)
    r = cli("--matrix", str(p), "expand", "--json")
    assert "Traceback" not in r.err + r.out
    assert r.code in (0, 2), r
    if r.code == 2:
        assert_one_line_exit_2(r, str(p))
    else:
        for c in json.loads(r.out):
            assert validate.full(validate.CELL_ID, c["id"]), c["id"]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=matrix_docs())
def test_fuzz_matrix_fast(fuzz_dir: Path, text: str) -> None:
    _check_matrix(fuzz_dir, text)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=matrix_docs())
def test_fuzz_matrix_1000(fuzz_dir: Path, text: str) -> None:
    _check_matrix(fuzz_dir, text)


H200 = json.loads((FIXTURES / "h200-doctor.json").read_text())


@st.composite
def facts_docs(draw: st.DrawFn) -> Any:
    """The H200's real facts with fields set to hostile values, or any JSON value at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(_VALUE)
    doc = json.loads(json.dumps(H200))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "driver", "gpu"]))
        target = doc if where == "top" else doc.get("driver") if where == "driver" else (doc.get("gpus") or [None])[0]
        if not isinstance(target, dict) or not target:
            target = doc
        key = draw(st.one_of(st.sampled_from(sorted(target)), _TEXT))
        target[key] = draw(_VALUE)
    return doc


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=facts_docs())
def test_fuzz_host_facts(fuzz_dir: Path, doc: Any) -> None:
    """Accepted facts never break a rule afterwards (the old ``"banana"`` path); refused ones are one line."""
    f = fuzz_dir / "facts.json"
    f.write_text(json.dumps(doc))
    try:
        facts = doctor.load_facts(f)
    except InputError as e:
        assert str(f) in str(e) and "\n" not in str(e)
        return
    m = matrix.load(write(fuzz_dir / "m.toml", AXES + 'driver = ["host", "580.126.09"]\n' + MODEL
                          + f'config = "{FIXTURES}/models/qwen3.6-27b/config.json"\nparameters = 27000000000\n'))
    host = HostFacts.from_json(facts)  # what the CLI hands the stages
    for cell in m.cells():
        precheck.evaluate(cell, m, host, None)


@st.composite
def result_docs(draw: st.DrawFn) -> Any:
    """A real result with fields set to hostile values (ids that climb out, unknown statuses…), or any JSON."""
    if draw(st.integers(0, 4)) == 0:
        return draw(_VALUE)
    doc: dict[str, Any] = {"schema": 1, "id": "sglang-0.5.11_cu13.0", "axes": {"sglang": "0.5.11", "cuda": "13.0"},
                           "hash": "ab", "verdict": "pass", "stages": [
                               {"name": "resolve", "status": "pass", "reason": "ok", "message": "m", "duration_s": 1.0,
                                "inputs": "x", "details": {"log": "/etc/passwd"}}], "env": {}}  # fmt: skip
    for _ in range(draw(st.integers(1, 3))):
        stages = doc.get("stages")
        stage = stages[0] if isinstance(stages, list) and stages and isinstance(stages[0], dict) else None
        target = doc if stage is None or draw(st.booleans()) else stage
        key = draw(st.one_of(st.sampled_from(sorted(target) or ["id"]), _TEXT))
        target[key] = draw(st.one_of(_VALUE, st.sampled_from(["../../x", "/tmp/abs", "..", ".", "a/b"])))
    return doc


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=result_docs(), fmt=st.sampled_from(["md", "html", "json", "junit", "table"]))
def test_fuzz_result_files_through_merge_and_report(fuzz_dir: Path, doc: Any, fmt: str) -> None:
    wd = fuzz_dir / "wd"
    f = fuzz_dir / "in" / "r.json"
    write(f, json.dumps(doc))
    r = cli("--workdir", str(wd), "--matrix", str(fuzz_dir / "absent.toml"), "merge", str(f))
    assert "Traceback" not in r.err + r.out
    if r.code == 2:
        assert_one_line_exit_2(r, str(f))
    else:
        assert r.code in (0, 1), r
        rr = cli("--workdir", str(wd), "--matrix", str(fuzz_dir / "absent.toml"), "report", "--format", fmt)
        assert rr.code in (0, 1) and "Traceback" not in rr.err and "root:" not in rr.out  # no /etc/passwd inlined
    outside = [p for p in fuzz_dir.rglob("*") if p.is_file() and p.suffix == ".json"
               and not p.is_relative_to(wd) and p.parent.name not in ("in",) and p.name not in ("facts.json",)]  # fmt: skip
    assert not outside, outside


# --- [model] config: checked when the matrix is loaded ---------------------------------------

_QWEN_MATRIX = ('[matrix]\nsglang = ["0.5.11"]\ncuda = ["13.0"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n'
                '[model]\npath = "Qwen/Qwen3.6-27B"\ntp = 2\nconfig = "{config}"\n')


def test_missing_model_config_names_the_matrix_file_and_key(tmp_path: Path) -> None:
    m = write(tmp_path / "prod.toml", _QWEN_MATRIX.format(config="nowhere/config.json"))
    with pytest.raises(InputError) as e:
        matrix.load(m)
    assert e.value.where == str(m) and e.value.key == "[model].config" and "does not exist" in str(e.value)


@pytest.mark.parametrize(("patch", "key"), [({"num_hidden_layers": "sixty-four"}, "text_config.num_hidden_layers"),
                                            ({"head_dim": 25.5}, "text_config.head_dim"),
                                            ({"num_key_value_heads": True}, "text_config.num_key_value_heads")])
def test_ill_typed_model_config_is_refused_at_load(tmp_path: Path, patch: dict[str, object], key: str) -> None:
    cfg = json.loads((FIXTURES / "models/qwen3.6-27b/config.json").read_text())
    cfg["text_config"].update(patch)
    write(tmp_path / "config.json", json.dumps(cfg))
    with pytest.raises(InputError) as e:
        matrix.load(write(tmp_path / "m.toml", _QWEN_MATRIX.format(config="config.json")))
    assert e.value.where == str(tmp_path / "config.json") and e.value.key == key


def test_find_config_names_the_real_matrix_file(tmp_path: Path) -> None:
    m = matrix.load(write(tmp_path / "prod.toml", _QWEN_MATRIX.format(config="config.json")
                          .replace('config = "config.json"\n', "")))
    gone = dataclasses.replace(m.model, config="gone.json")
    with pytest.raises(InputError) as e:
        model.find_config(gone, tmp_path, where=str(m.path))
    assert e.value.where == str(tmp_path / "prod.toml")


def test_precheck_cli_on_an_ill_typed_config_is_exit_2(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "models/qwen3.6-27b/config.json").read_text())
    cfg["text_config"]["num_attention_heads"] = "24"
    write(tmp_path / "config.json", json.dumps(cfg))
    m = write(tmp_path / "m.toml", _QWEN_MATRIX.format(config="config.json"))
    r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "precheck")
    assert r.code == 2 and "text_config.num_attention_heads" in r.err and "Traceback" not in r.err


def test_an_integer_too_long_for_tomllib_is_one_input_error(tmp_path: Path) -> None:
    """tomllib raises a plain ValueError (not TOMLDecodeError) for an integer of over 4,300 digits (found by the fuzz)."""
    from envbuilder import matrix
    from envbuilder.errors import InputError

    f = tmp_path / "matrix.toml"
    f.write_text('[matrix]\nsglang = {9=' + "9" * 5000 + '}\n')
    with pytest.raises(InputError) as e:
        matrix.load(f)
    assert "invalid TOML" in str(e.value) and "\n" not in str(e.value)
