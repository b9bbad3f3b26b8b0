"""Index URLs come from the user's configuration (matrix, uv/pip environment, pip's config), never from code."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder import indexconfig
from envbuilder.errors import InputError
from envbuilder.resolve import Request

ROOT = Path(__file__).resolve().parent.parent
# the package-index hosts envbuilder must never name (escaped so this file does not name them either)
INDEX_HOSTS = (r"pypi\.org", r"pythonhoste[d]", r"download\.pytorch", r"pytorch\.org", r"flashinfer\.ai",
               r"pypi\.nvidia")  # fmt: skip


@pytest.fixture
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No index in the environment; pip's config is a file of the test's own."""
    for var in indexconfig.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    conf = tmp_path / "pip.conf"
    conf.write_text("")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    caches = (indexconfig._pip_config_index, indexconfig.tool_default)
    for c in caches:
        c.cache_clear()
    yield conf
    for c in caches:
        c.cache_clear()


def test_matrix_then_uv_then_pip_environment_in_that_order(no_user_config: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("PIP_INDEX_URL", "http://pip.invalid/simple")
    assert indexconfig.configured(()) == ("http://pip.invalid/simple",)
    monkeypatch.setenv("UV_INDEX_URL", "http://uv-old.invalid/simple")
    assert indexconfig.configured(()) == ("http://uv-old.invalid/simple",)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://uv.invalid/simple")
    assert indexconfig.configured(()) == ("http://uv.invalid/simple",)
    assert indexconfig.configured(("http://a.invalid/simple", "http://b.invalid/simple")) == (
        "http://a.invalid/simple", "http://b.invalid/simple")  # fmt: skip


def test_pip_config_is_asked_through_pip(no_user_config: Path) -> None:
    no_user_config.write_text("[global]\nindex-url = http://mirror.invalid/simple\n")
    assert indexconfig.configured(()) == ("http://mirror.invalid/simple",)
    assert indexconfig.read_url(()) == "http://mirror.invalid/simple"


def test_nothing_configured_leaves_uv_its_default_and_reads_pips(no_user_config: Path) -> None:
    assert indexconfig.configured(()) == ()
    req = Request(requirements=("x",), constraints=(), python="3.11", platform="x86_64-manylinux_2_36",
                  exclude_newer=None, indexes=())  # fmt: skip
    assert not any("index" in a for a in req.index_args())  # uv decides: no --index-url, no --no-index
    default = indexconfig.tool_default()
    assert default is not None and default.startswith("https://")  # uv's own default, read from uv at run time
    assert indexconfig.read_url(()) == default


def test_no_index_at_all_is_one_line_naming_the_setting(no_user_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexconfig, "tool_default", lambda: None)  # a uv and pip that name no default
    with pytest.raises(InputError, match=r"\[resolve\]\.indexes: .*UV_DEFAULT_INDEX"):
        indexconfig.require_read_url((), "matrix.toml")


def test_no_tracked_file_names_a_package_index_host() -> None:
    """The developers' guide: no package index's host in code, tests, docs, reports or fixtures."""
    try:
        files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    host = re.compile("|".join(INDEX_HOSTS).encode(), re.IGNORECASE)
    found = []
    for name in filter(None, files.decode().split("\0")):
        path = ROOT / name
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_bytes().splitlines(), 1):
            if host.search(line):
                found.append(f"{name}:{n}")
    assert not found, f"index hosts named in: {', '.join(found[:20])}"
