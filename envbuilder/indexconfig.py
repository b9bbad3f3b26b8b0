"""Which package indexes to use, taken from the user's configuration; envbuilder names no index host itself.

Order: the matrix's ``[resolve] indexes``, ``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``, ``PIP_INDEX_URL``, pip's
config (``global.index-url``, as ``pip config list`` reports it). With none of them, uv keeps its own default (no index flag
is passed) and envbuilder's own PEP 691 reads use the default the installed uv states (else pip's).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence

from envbuilder.errors import InputError
from envbuilder.uvbin import uv_bin

ENV_VARS = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")
HOW_TO_SET = "set [resolve] indexes, UV_DEFAULT_INDEX, UV_INDEX_URL, PIP_INDEX_URL or pip's global.index-url"


def configured(matrix_indexes: Sequence[str]) -> tuple[str, ...]:
    """The indexes to pass to uv; ``()`` leaves the choice to uv (its own configuration, else its default)."""
    if matrix_indexes:
        return tuple(matrix_indexes)
    for var in ENV_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            return (value,)
    pip_url = _pip_config_index()
    return (pip_url,) if pip_url else ()


@functools.cache
def _pip_config_index() -> str | None:
    """``global.index-url`` from ``pip config list`` (this interpreter's pip, else the one on PATH); None when unset."""
    pip = [sys.executable, "-m", "pip"] if importlib.util.find_spec("pip") else [shutil.which("pip3") or shutil.which("pip")]
    if pip[0] is None:
        return None
    try:
        out = subprocess.run([*pip, "config", "list"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^global\.index-url='(.+)'$", out.stdout, re.MULTILINE)
    return found.group(1).strip() or None if found else None


@functools.cache
def tool_default() -> str | None:
    """uv's own default index as its ``--help`` states it (else the installed pip's); None when neither says."""
    try:
        out = subprocess.run([uv_bin(), "pip", "compile", "--help"], capture_output=True, text=True, timeout=30,
                             check=False).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = re.search(r"--default-index\b.*?\(by default: <([^<>\s]+)>\)", out, re.DOTALL)
    if found:
        return found.group(1)
    try:
        models = importlib.import_module("pip._internal.models.index")
    except ImportError:
        return None
    url = getattr(getattr(models, "PyPI", None), "simple_url", None)
    return url if isinstance(url, str) and url else None


def read_url(matrix_indexes: Sequence[str]) -> str | None:
    """The index envbuilder reads PEP 691 metadata from: the first configured one, else pip's default."""
    found = configured(matrix_indexes)
    return found[0] if found else tool_default()


def require_read_url(matrix_indexes: Sequence[str], where: str) -> str:
    """:func:`read_url`, or :class:`InputError` (exit 2) saying what to set when there is none."""
    url = read_url(matrix_indexes)
    if url is None:
        raise InputError(where, "[resolve].indexes", f"no package index configured and no pip to ask: {HOW_TO_SET}")
    return url
