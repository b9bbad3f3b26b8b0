"""The one validation layer for everything envbuilder reads: matrix values, host facts, result files,
command-line numbers and paths derived from ids.

Every pattern is a full match on ASCII (``re.fullmatch`` with ``re.ASCII``: no ``$`` that lets a
trailing newline through, no ``\\d`` that accepts other scripts' digits). Every check raises
:class:`~envbuilder.errors.InputError` (exit 2) with one line naming the file and the key.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envbuilder.errors import InputError

MAX_VALUE_LEN = 128  # an axis value, a version, a name: longer is not a real one
MAX_JSON_DEPTH = 64  # nesting of a host-facts or result file; deeper is not envbuilder's

CUDA = r"[0-9]{2}\.[0-9]{1,2}"
DRIVER = r"[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?"
PYTHON = r"3\.[0-9]{1,2}"
AXIS_NAME = r"[A-Za-z][A-Za-z0-9_]{0,63}"
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
CELL_ID = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}"
GLIBC = r"[0-9]{1,2}\.[0-9]{1,3}"
COMPUTE_CAPABILITY = r"[0-9]{1,2}\.[0-9]{1,2}"
# Docker's image reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest]
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = (rf"(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                   r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")  # fmt: skip


def full(pattern: str, value: object) -> bool:
    """Whether ``value`` is a string that ``pattern`` matches entirely, in ASCII."""
    return isinstance(value, str) and re.fullmatch(pattern, value, re.ASCII) is not None


def short(value: str, where: str, key: str, limit: int = MAX_VALUE_LEN) -> str:
    """``value`` unless longer than ``limit`` characters."""
    if len(value) > limit:
        raise InputError(where, key, f"is {len(value)} characters long; at most {limit}")
    return value


def image_reference(value: str, where: str, key: str) -> str:
    """One Docker image reference (``nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04``), nothing else."""
    if len(value) > 255 or not full(IMAGE_REFERENCE, value):
        raise InputError(where, key, f"{value[:80]!r} is not one image reference (e.g. \"ubuntu:24.04\")")
    return value


def env_key(value: str, where: str, key: str) -> str:
    """An environment variable name (shell identifier syntax)."""
    if not full(IDENTIFIER, value) or len(value) > MAX_VALUE_LEN:
        raise InputError(where, key, f"{value[:80]!r} is not an environment variable name (letters, digits, '_')")
    return value


def port(value: int, where: str, key: str) -> int:
    """A TCP port, or 0 for "pick a free one"."""
    if not 0 <= value <= 65535:
        raise InputError(where, key, f"{value} is not a port (0-65535; 0 picks a free one)")
    return value


def positive(value: float, where: str, key: str) -> float:
    """A count, a timeout or a limit: above zero."""
    if not value > 0:  # also refuses NaN
        raise InputError(where, key, f"must be positive, got {value}")
    return value


def non_negative(value: float, where: str, key: str) -> float:
    if not value >= 0:
        raise InputError(where, key, f"must not be negative, got {value}")
    return value


def cell_id(value: object, where: str, key: str = "id") -> str:
    """A cell id safe to use as a file name (no separators, no ``..``, no control characters)."""
    if not full(CELL_ID, value):
        raise InputError(where, key, f"{str(value)[:80]!r} is not a cell id (letters, digits, '.', '_', '+', '-')")
    assert isinstance(value, str)
    return value


def under(root: Path, *parts: str) -> Path:
    """``root/parts…``, refused unless it stays under ``root`` (no ``..``, no absolute part, no symlink out)."""
    path = root.joinpath(*parts)
    base = root.resolve()
    if any(Path(p).is_absolute() for p in parts) or not path.resolve().is_relative_to(base):
        raise InputError(str(root), "/".join(parts)[:120], "leads outside the work folder")
    return path


def _depth(obj: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value (iterative: never a RecursionError)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > deepest:
            deepest = d
            if d > limit:
                break
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return deepest


def load_json(path: Path, *, what: str = "JSON") -> Any:
    """Read a JSON file someone else may have written: unreadable, not UTF-8, not JSON or nested beyond
    :data:`MAX_JSON_DEPTH` is an :class:`InputError` naming the file."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(where, None, "file not found") from None
    except OSError as e:
        raise InputError(where, None, f"cannot read ({e.strerror or e})") from None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise InputError(where, None, f"not {what}: not UTF-8 text") from None
    # a bracket run deeper than the limit is refused before the parser recurses into it
    if re.search(rf"[\[{{](?:\s*[\[{{]){{{MAX_JSON_DEPTH}}}", text):
        raise InputError(where, None, f"not {what}: nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(where, None, f"not {what}: nested too deep") from None
    except ValueError as e:
        raise InputError(where, None, f"not {what} ({e})") from None
    if _depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise InputError(where, None, f"not {what}: nested deeper than {MAX_JSON_DEPTH} levels")
    return data


def output_file(path: Path, key: str) -> Path:
    """A file envbuilder is asked to write: its folder must exist and it must not be a folder itself."""
    if path.is_dir():
        raise InputError(str(path), key, "is a folder; name a file")
    parent = path.parent if str(path.parent) else Path()
    if not parent.is_dir():
        raise InputError(str(path), key, f"folder {parent} does not exist")
    try:  # writable at all? (a read-only or virtual file system), asked before any work is done
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(fd)
        Path(probe).unlink()
    except OSError as e:
        raise InputError(str(path), key, f"cannot write in {parent} ({e.strerror or e})") from None
    return path


def workdir(path: Path) -> Path:
    """``--workdir``: a folder (made when missing), never a regular file."""
    if path.exists() and not path.is_dir():
        raise InputError(str(path), "--workdir", "is not a folder")
    for p in path.parents:
        if p.exists() and not p.is_dir():
            raise InputError(str(path), "--workdir", f"{p} is not a folder")
    return path


def int_arg(minimum: int) -> Any:
    """An argparse ``type=`` for an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _float_arg(text: str, ok: Callable[[float], bool], wanted: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
    return value


def positive_float_arg(text: str) -> float:
    """An argparse ``type=`` for a positive number of seconds."""
    return _float_arg(text, lambda v: 0 < v < float("inf"), "a positive number")


def fraction_arg(text: str) -> float:
    """An argparse ``type=`` for a share such as a tolerance: a finite number >= 0 (0.10 = 10 %)."""
    return _float_arg(text, lambda v: 0 <= v < float("inf"), "a number >= 0 (0.10 = 10 %)")  # also refuses NaN


CONFIG_COUNTS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "v_head_dim", "vocab_size", "intermediate_size", "moe_intermediate_size", "num_experts",
                 "full_attention_interval", "max_position_embeddings", "linear_num_value_heads",
                 "linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
                 "depth")  # fmt: skip


def model_config(path: Path) -> dict[str, Any]:
    """A model's ``config.json``: a JSON object whose sizes (layers, heads, dims, ``text_config``'s and
    ``vision_config``'s too) are whole numbers, so every size envbuilder computes from it is defined."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(str(path), None, f"not a readable config.json ({e})") from None
    if not isinstance(data, dict):
        raise InputError(str(path), None, "must be a JSON object")
    tables = [("", data)] + [(f"{k}.", data[k]) for k in ("text_config", "vision_config") if isinstance(data.get(k), dict)]
    for prefix, table in tables:
        for key in CONFIG_COUNTS:
            value = table.get(key)
            if value is None:
                continue
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            if isinstance(value, bool) or not whole or value < 0:
                raise InputError(str(path), prefix + key, f"{str(value)[:40]!r} is not a whole number >= 0")
        if "layer_types" in table and not isinstance(table["layer_types"], list):
            raise InputError(str(path), prefix + "layer_types", "must be a list of layer type names")
    return data
