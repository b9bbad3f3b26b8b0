"""bisect: real uv, real venvs, a real local index whose newer release of one package breaks another's import."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuilder.bisect import fix_constraint
from envbuilder.uvbin import uv_bin
from tests.conftest import envbuilder, write
from tests.localindex import NEW, OLD, LocalIndex, breaking_index, serve


def _matrix(path: Path, url: str) -> Path:
    return write(path, f"""
[matrix]
app = ["1.0"]
cuda = ["none"]
os = ["debian12"]
python = ["3.11"]
[model]
path = "Qwen/Qwen3.6-27B"
[resolve]
indexes = ["{url}"]
as_of = "release"
""")


def test_bisect_names_the_breaking_package_and_a_verified_fix(tmp_path: Path) -> None:
    idx = breaking_index(tmp_path / "idx")
    with serve(idx):
        m = _matrix(tmp_path / "matrix.toml", idx.url)
        r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "bisect", "app=1.0", timeout=300)
    assert r.code == 0, r.err
    assert "lib 1.0 → 2.0 breaks `import app`" in r.out
    assert "ImportError" in r.out and "helper" in r.out
    assert "'lib<2'" in r.out and "verified" in r.out
    (report,) = (tmp_path / "wd" / "bisect").glob("*/bisect.json")
    data = json.loads(report.read_text())
    assert data["drifted"] == ["lib", "noise", "util"]
    assert [c["name"] for c in data["culprits"]] == ["lib"] and data["fix"] == ["lib<2"] and data["verified"] is True
    outcomes = {tuple(t["pinned"]): t["outcome"] for t in data["trials"]}
    assert outcomes[()] == "good" and outcomes[("lib", "noise", "util")] == "bad" and outcomes[("lib",)] == "bad"
    verify = next(t for t in data["trials"] if t["pinned"] == [] and t["moved"])  # today's resolution + lib<2
    assert verify["moved"] == {"lib": "1.1", "noise": "2.0", "util": "1.5"} and verify["outcome"] == "good"
    assert not list((tmp_path / "wd" / "bisect").glob("*/trial-*")), "trial venvs are deleted"


def test_bisect_offline_from_a_wheelhouse_with_provided_packages_and_a_custom_test(tmp_path: Path) -> None:
    """The H200 shape: no index, wheels in a folder, the interpreter already has some packages (``noise``)."""
    idx = breaking_index(tmp_path / "idx")
    wd = tmp_path / "wd"
    with serve(idx):
        m = _matrix(tmp_path / "matrix.toml", idx.url)
        r = envbuilder("--matrix", str(m), "--workdir", str(wd), "resolve", "--drift")
        assert r.code == 0, r.err
        provider = tmp_path / "provider"  # an interpreter that has noise 1.0 installed, like the H200's torch
        subprocess.run([uv_bin(), "venv", "-q", "--python", "3.11", str(provider)], check=True)
        subprocess.run([uv_bin(), "pip", "install", "-q", "--python", str(provider / "bin" / "python"),
                        "--index-url", idx.url, "noise==1.0"], check=True)  # fmt: skip
    # the server is gone: everything below is offline
    wheels = tmp_path / "wheelhouse"
    shutil.copytree(idx.root, wheels)
    for w in wheels.glob("noise-*.whl"):
        w.unlink()  # provided packages need not travel
    freeze = write(tmp_path / "freeze.txt", "noise==1.0\n")
    test = "python -c 'import app, noise; assert noise.__file__.startswith(\"" + str(provider) + "\")'"
    r = envbuilder("--matrix", str(m), "--workdir", str(wd), "bisect", "app=1.0", "--find-links", str(wheels),
                   "--provided", str(freeze), "--python", str(provider / "bin" / "python"), "--test", test,
                   "--json", timeout=300)  # fmt: skip
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["drifted"] == ["lib", "util"]  # noise is the interpreter's, never moved
    assert data["fix"] == ["lib<2"] and data["verified"] is True
    assert data["verdict"].startswith("lib 1.0 → 2.0 breaks `python -c")


def test_bisect_when_today_passes_says_nothing_broke(tmp_path: Path) -> None:
    idx = LocalIndex(tmp_path / "idx")
    idx.add("app", "1.0", requires=["util"], uploaded=OLD)
    idx.add("util", "1.0", uploaded=OLD)
    idx.add("util", "1.5", uploaded=NEW)
    with serve(idx):
        m = _matrix(tmp_path / "matrix.toml", idx.url)
        r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "bisect", "app=1.0", timeout=300)
    assert r.code == 0, r.err
    assert "today's lock passes `import app` too: nothing broke (1 packages drifted)" in r.out


def test_offline_bisect_without_locks_is_one_input_error(tmp_path: Path) -> None:
    m = _matrix(tmp_path / "matrix.toml", "http://127.0.0.1:9/simple")
    r = envbuilder("--matrix", str(m), "--workdir", str(tmp_path / "wd"), "bisect", "app=1.0", "--find-links", "x")
    assert r.code == 2 and "--find-links" in r.err and "resolve --drift" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize(("good", "bad", "fix"), [
    ("0.14.0", "0.17.2", "kernels<0.15"), ("1.0", "2.0", "kernels<2"), ("3.13.5", "3.14.5", "kernels<3.14"),
    ("6.1.0", "6.1.3", "kernels<6.1.1"), ("4.0.0b12", "4.0.0b15", "kernels<4.0.0b15"), ("2.9.0.post0", "4.0.0", "kernels<3"),
])  # fmt: skip
def test_fix_constraint_examples(good: str, bad: str, fix: str) -> None:
    assert fix_constraint("kernels", good, bad) == fix


_versions = st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)).map(lambda t: ".".join(map(str, t)))


@given(_versions, _versions)
def test_fix_constraint_admits_good_and_excludes_bad(a: str, b: str) -> None:
    good, bad = sorted((a, b), key=Version)
    if Version(good) == Version(bad):
        return
    spec = SpecifierSet(fix_constraint("x", good, bad).removeprefix("x"))
    assert Version(good) in spec and Version(bad) not in spec
