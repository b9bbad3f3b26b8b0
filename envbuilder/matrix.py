"""matrix.toml: the axes, their include/exclude rules, the per-run settings, and the cells they expand to.

The universe of cells is data: :func:`load` turns a TOML file into a frozen :class:`Matrix`,
:meth:`Matrix.cells` expands it with GitHub Actions matrix semantics, and :func:`select`
filters the cells by id globs or ``axis=value`` conditions.

Axes: ``cuda``, ``driver``, ``os``, ``python`` are platform axes; every other axis names a PyPI
distribution (``flash_attn_4`` -> ``flash-attn-4``) whose values are an exact version,
``"resolver"`` (let uv pick) or ``"none"`` (must not be installed).
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import hashlib
import itertools
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder import validate
from envbuilder.errors import InputError, did_you_mean

PLATFORM_AXES = ("cuda", "driver", "os", "python")
RESOLVER = "resolver"
NONE = "none"
HOST = "host"

# Short names used in cell ids; any other axis uses its own name with '_' -> '-'.
_ID_PREFIX = {"flash_attn_4": "fa4", "llama_cpp_python": "llamacpp", "sglang": "sglang"}

MAX_CELLS = 256  # GitHub's jobs per matrix; `--max-cells` raises it
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9.+-]")

def platforms() -> dict[str, dict[str, str]]:
    """The OS table (``envbuilder/data/platforms.toml``): os name -> glibc and CUDA image suffix."""
    text = resources.files("envbuilder").joinpath("data/platforms.toml").read_text()
    table: dict[str, dict[str, str]] = tomllib.loads(text)["os"]
    return table


# --------------------------------------------------------------------------------------------
# Settings sections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """``[model]``: what is served."""

    path: str  # required: a local directory, a .gguf file, or a hub id
    tp: int = 1
    context_length: int = 131072
    parameters: int | None = None  # parameter count, when the model is not local
    dtype: str = "bfloat16"
    config: str | None = None  # a config.json to use when the model is not local
    revision: str | None = None
    draft_path: str | None = None  # speculative draft model (None: the engine's own, e.g. MTP heads)


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """``[server]``: how the engine is started."""

    engine: Literal["sglang", "llama-cpp"] = "sglang"
    args: tuple[str, ...] = ()  # extra launch flags, appended to the engine's launch or to a custom command
    command: tuple[str, ...] | None = None  # custom launch with {host} {port} {model}; args are appended
    base_url: str | None = None  # where a custom or external server answers
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    startup_timeout_s: float = 1800.0
    stall_timeout_s: float = 300.0
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SmokeConfig:
    """``[smoke]``: the checks run against a started server."""

    checks: tuple[str, ...] = ("golden", "degeneracy", "spec", "speed", "long-context")
    golden: str = "builtin:qwen3"  # builtin:<name> or a path to a prompt-set TOML
    seed: int = 0
    request_timeout_s: float = 600.0
    min_spec_accept_length: float = 2.5
    spec_match_tokens: int = 32
    spec_min_identical: float = 0.8
    perf_tolerance: float = 0.10
    concurrency: tuple[int, ...] = (1, 4, 16)
    speed_max_tokens: int = 128
    long_context: tuple[int, ...] = (30000, 60000, 100000, 128000)
    needle_digits: int = 7  # RULER uses 7-digit numbers


@dataclass(frozen=True, kw_only=True)
class ResolveConfig:
    """``[resolve]``: where packages come from and as of when."""

    indexes: tuple[str, ...] = ()  # empty: the user's uv/pip configuration, else uv's own default
    cuda_indexes: dict[str, str] = field(default_factory=dict)  # {"12.8" = "<url>"}: the index of that CUDA's builds
    find_links: tuple[str, ...] = ()
    as_of: str = "release"  # "release", "fresh", or an RFC 3339 date/time
    extra: tuple[str, ...] = ()  # extra requirements added to every cell (e.g. the model package)
    constraints: tuple[str, ...] = ()  # extra constraint lines (e.g. "kernels<0.15")
    jobs: int = 0  # parallel resolutions; 0 = cores x 2
    timeout_s: float = 600.0


@dataclass(frozen=True, kw_only=True)
class BuildConfig:
    """``[build]``: how a cell becomes an environment."""

    runner: Literal["docker", "venv"] = "docker"
    base_image: str | None = None
    # per-cell runner, first matching cell filter wins: {"os=debian12" = "docker", "sglang=0.5.9" = "venv"}
    runners: dict[str, Literal["docker", "venv"]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # while installing (e.g. CMAKE_ARGS for an sdist)

    def runner_for(self, cell: Cell) -> str:
        """The runner of ``cell``: the first ``runners`` filter it matches, else ``runner``."""
        for selector, runner in self.runners.items():
            if _matches(cell, selector, "[build].runners"):
                return runner
        return self.runner


_SECTIONS: dict[str, type[Any]] = {
    "model": ModelConfig,
    "server": ServerConfig,
    "smoke": SmokeConfig,
    "resolve": ResolveConfig,
    "build": BuildConfig,
}


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One combination of axis values. Hashable, with a stable filesystem-safe id."""

    packages: tuple[tuple[str, str], ...]  # (axis name, value) in matrix order
    cuda: str
    driver: str
    os: str
    python: str
    settings: str = ""  # digest of the matrix sections that affect every result

    @property
    def axes(self) -> dict[str, str]:
        return {**dict(self.packages), "cuda": self.cuda, "driver": self.driver, "os": self.os,
                "python": self.python}  # fmt: skip

    @cached_property
    def id(self) -> str:
        parts = [f"{_ID_PREFIX.get(a, a.replace('_', '-'))}-{v}" for a, v in self.packages]
        parts.append("cpu" if self.cuda == NONE else f"cu{self.cuda}")
        parts.append(f"drv-{self.driver}")
        parts.append(self.os)
        parts.append(f"py{self.python}")
        return "_".join(_UNSAFE_ID_CHARS.sub("-", p) for p in parts)

    @cached_property
    def hash(self) -> str:
        """Content hash of everything that affects this cell's result."""
        blob = json.dumps({"axes": self.axes, "settings": self.settings}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def package(self, axis: str) -> str | None:
        return dict(self.packages).get(axis)

    def requirements(self) -> dict[str, str]:
        """Distribution name -> axis value, for every package axis."""
        return {distribution_name(a): v for a, v in self.packages}

    @property
    def glibc(self) -> str:
        return platforms()[self.os]["glibc"]


def distribution_name(axis: str) -> str:
    """``flash_attn_4`` -> ``flash-attn-4`` (PEP 503 normalised)."""
    return canonicalize_name(axis.replace("_", "-"))


# --------------------------------------------------------------------------------------------
# The matrix
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """A loaded matrix.toml."""

    path: Path
    axes: tuple[tuple[str, tuple[str, ...]], ...]
    include: tuple[tuple[tuple[str, str], ...], ...] = ()
    exclude: tuple[tuple[tuple[str, str], ...], ...] = ()
    model: ModelConfig
    server: ServerConfig = ServerConfig()
    smoke: SmokeConfig = SmokeConfig()
    resolve: ResolveConfig = ResolveConfig()
    build: BuildConfig = BuildConfig()

    @property
    def package_axes(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.axes if a not in PLATFORM_AXES)

    @cached_property
    def settings_digest(self) -> str:
        blob = json.dumps(
            {name: dataclasses.asdict(getattr(self, name)) for name in _SECTIONS}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def cells(self) -> tuple[Cell, ...]:
        """Expand the axes with GitHub Actions ``include``/``exclude`` semantics (at most :data:`MAX_CELLS`)."""
        limit = MAX_CELLS
        product = math.prod(len(v) for _, v in self.axes) if self.axes else 0
        if product > limit * 64:  # refused before anything is built: excludes cannot bring this down cheaply
            raise InputError(str(self.path), "[matrix]", f"the axes multiply to {product} combinations; at most "
                             f"{limit} cells (GitHub's jobs per matrix) unless --max-cells raises it")  # fmt: skip
        combos = expand_combinations(dict(self.axes), [dict(e) for e in self.exclude],
                                     [dict(i) for i in self.include])  # fmt: skip
        if len(combos) > limit:
            raise InputError(str(self.path), "[matrix]", f"expands to {len(combos)} cells; at most {limit} "
                             "(GitHub's jobs per matrix) unless --max-cells raises it")  # fmt: skip
        cells: list[Cell] = []
        seen: dict[str, int] = {}
        for n, combo in enumerate(combos):
            cell = self._cell(combo, n)
            if cell.id in seen:
                raise InputError(str(self.path), "[matrix]",
                                 f"cell {cell.id} appears twice (combinations {seen[cell.id] + 1} "
                                 f"and {n + 1}); remove the duplicate include")  # fmt: skip
            seen[cell.id] = n
            cells.append(cell)
        return tuple(cells)

    def _cell(self, combo: Mapping[str, str], n: int) -> Cell:
        combo = {"driver": HOST, **combo}
        missing = [a for a in PLATFORM_AXES if a not in combo]
        if missing:
            raise InputError(str(self.path), "[[matrix.include]]",
                             f"combination {dict(combo)} adds a new cell without "
                             f"{', '.join(missing)}; name every platform axis")  # fmt: skip
        packages = tuple((a, combo.get(a, RESOLVER)) for a in self.package_axes)
        return Cell(packages=packages, cuda=combo["cuda"], driver=combo["driver"], os=combo["os"],
                    python=combo["python"], settings=self.settings_digest)  # fmt: skip


def expand_combinations(
    axes: Mapping[str, Sequence[str]],
    exclude: Sequence[Mapping[str, str]],
    include: Sequence[Mapping[str, str]],
) -> list[dict[str, str]]:
    """GitHub Actions' matrix expansion, exactly.

    1. the cartesian product of the axes;
    2. every combination that matches all key/values of an ``exclude`` entry is dropped;
    3. each ``include`` entry, in order, is merged into every combination whose *original* values it
       does not overwrite (values added by earlier includes may be overwritten); an entry that
       matches no original combination becomes a new combination of its own.
    """
    names = list(axes)
    product = [dict(zip(names, values, strict=True)) for values in
               itertools.product(*(axes[n] for n in names))]  # fmt: skip
    if not names:
        product = []
    kept = [c for c in product if not any(all(c.get(k) == v for k, v in e.items()) for e in exclude)]
    originals = [dict(c) for c in kept]
    result = [dict(c) for c in kept]
    added: list[dict[str, str]] = []
    for entry in include:
        matched = False
        for orig, combo in zip(originals, result, strict=True):
            if all(orig[k] == v for k, v in entry.items() if k in orig):
                combo.update(entry)
                matched = True
        if not matched:
            added.append(dict(entry))
    return result + added


# --------------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------------


def load(path: Path) -> Matrix:
    """Read and validate a matrix file. Any problem raises :class:`InputError` (exit 2)."""
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(where, None, "file not found (pass --matrix PATH)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(where, None, f"cannot read: {e}") from None
    except ValueError as e:  # TOMLDecodeError, and tomllib's ValueError for an integer of over 4300 digits
        raise InputError(where, None, f"invalid TOML: {e}") from None
    m = parse(data, where=where, path=path)
    _check_model_config(m.model, path, where)
    return m


def _check_model_config(model: ModelConfig, path: Path, where: str) -> None:
    """``[model] config`` (or a local model directory's config.json) exists and its sizes are numbers, so no
    stage meets a config it cannot read."""
    if model.config:
        cfg = (path.parent / model.config).expanduser()
        if not cfg.is_file():
            raise InputError(where, "[model].config", f"{cfg} {'is not a file' if cfg.exists() else 'does not exist'}")
    else:
        cfg = (path.parent / model.path).expanduser() / "config.json"
        if not cfg.is_file():
            return
    validate.model_config(cfg)


def parse(data: Mapping[str, Any], *, where: str, path: Path | None = None) -> Matrix:
    """Validate an already-parsed TOML document."""
    known = ["matrix", *_SECTIONS]
    for key in data:
        if key not in known:
            raise InputError(where, f"[{key}]", f"unknown section{did_you_mean(key, known)}")
    raw = data.get("matrix")
    if not isinstance(raw, dict):
        raise InputError(where, "[matrix]", "missing: add a [matrix] table with the axes")
    axes: list[tuple[str, tuple[str, ...]]] = []
    for name, values in raw.items():
        if name in ("include", "exclude"):
            continue
        axes.append((name, _axis_values(name, values, where)))
    declared = {a for a, _ in axes}
    required = [a for a in PLATFORM_AXES if a != "driver" and a not in declared]
    if required and not raw.get("include"):
        raise InputError(where, f"[matrix].{required[0]}", "missing: every matrix needs this axis")
    exclude = _rule_list(raw.get("exclude", []), "exclude", declared, where)
    include = _rule_list(raw.get("include", []), "include", declared | set(PLATFORM_AXES), where)
    sections = {name: _load_section(cls, data.get(name, {}), name, where) for name, cls in _SECTIONS.items()}
    matrix = Matrix(path=path or Path(where), axes=tuple(axes), include=include, exclude=exclude, **sections)
    _check_sections(matrix, where)
    matrix.cells()  # surface duplicate / incomplete combinations now
    return matrix


def _axis_values(name: str, values: Any, where: str) -> tuple[str, ...]:
    key = f"[matrix].{name}"
    if not validate.full(validate.AXIS_NAME, name):
        raise InputError(where, key, "axis names are letters, digits and '_'")
    if not isinstance(values, list):
        raise InputError(where, key, f"must be a list of strings, got {_tname(values)}")
    if not values:
        raise InputError(where, key, "is empty: give at least one value")
    out: list[str] = []
    for i, v in enumerate(values):
        check_axis_value(name, v, where, f"{key}[{i}]")
        if v in out:
            raise InputError(where, f"{key}[{i}]", f"{v!r} is listed twice")
        out.append(v)
    return tuple(out)


def check_axis_value(axis: str, value: Any, where: str, key: str) -> None:
    """Raise :class:`InputError` unless ``value`` is valid for ``axis``."""
    if not isinstance(value, str):
        raise InputError(where, key, f"{repr(value)[:80]} must be a string (write it in quotes)")
    validate.short(value, where, key)
    if axis == "cuda":
        if value != NONE and not validate.full(validate.CUDA, value):
            raise InputError(where, key, f"{value!r} is not a CUDA version (e.g. \"12.8\", \"13.0\", \"none\")")
    elif axis == "driver":
        if value != HOST and not validate.full(validate.DRIVER, value):
            raise InputError(where, key, f"{value!r} is not a driver version (\"host\" or e.g. \"580.126.09\")")
    elif axis == "os":
        table = platforms()
        if value not in table:
            raise InputError(where, key, f"{value!r} is not a known OS{did_you_mean(value, table)}; "
                             f"known: {', '.join(table)}")  # fmt: skip
    elif axis == "python":
        if not validate.full(validate.PYTHON, value):
            raise InputError(where, key, f"{value!r} is not a Python version (e.g. \"3.12\")")
    elif value not in (RESOLVER, NONE):
        try:
            if not value.isascii() or not value.isprintable():
                raise InvalidVersion(value)
            v = Version(value)
        except (InvalidVersion, ValueError):
            raise InputError(where, key, f"{value!r} is not an exact version, \"resolver\" or \"none\"") from None
        if str(v) != value and value.lstrip("v") != str(v):
            raise InputError(where, key, f"{value!r} is not in normal form; write {str(v)!r}")


def _rule_list(
    rules: Any, kind: str, allowed: set[str], where: str
) -> tuple[tuple[tuple[str, str], ...], ...]:
    key = f"[[matrix.{kind}]]"
    if not isinstance(rules, list):
        raise InputError(where, key, f"must be an array of tables, got {_tname(rules)}")
    out = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or not rule:
            raise InputError(where, f"{key}[{i}]", "must be a non-empty table of axis = value")
        for axis, value in rule.items():
            if axis not in allowed:
                raise InputError(where, f"{key}[{i}].{axis}",
                                 f"unknown axis{did_you_mean(axis, allowed)}")  # fmt: skip
            check_axis_value(axis, value, where, f"{key}[{i}].{axis}")
        out.append(tuple(rule.items()))
    return tuple(out)


def parse_as_of(text: str, where: str, key: str) -> datetime.datetime:
    """An RFC 3339 date or date-time (UTC when no offset is given)."""
    try:
        if len(text) == 10:
            d = datetime.date.fromisoformat(text)
            return datetime.datetime(d.year, d.month, d.day, tzinfo=datetime.UTC)
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(where, key, f"{text!r} is not \"release\", \"fresh\" or an RFC 3339 date") from None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def _tname(v: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list",
            dict: "a table"}.get(type(v), type(v).__name__)  # fmt: skip


def _load_section(cls: type[Any], table: Any, section: str, where: str) -> Any:
    """Build a settings dataclass from a TOML table: unknown keys and wrong types are errors."""
    if not isinstance(table, dict):
        raise InputError(where, f"[{section}]", f"must be a table, got {_tname(table)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in names:
            raise InputError(where, f"[{section}].{key}", f"unknown key{did_you_mean(key, names)}")
        kwargs[key] = _coerce(value, hints[key], where, f"[{section}].{key}")
    for f in dataclasses.fields(cls):
        if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError(where, f"[{section}].{f.name}", "missing: this key is required")
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, where: str, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where, key)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise InputError(where, key, f"{value!r} is not one of {choices}{did_you_mean(str(value), args)}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise InputError(where, key, f"must be a list, got {_tname(value)}")
        return tuple(_coerce(v, args[0], where, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(where, key, f"must be a table, got {_tname(value)}")
        return {str(k): _coerce(v, args[1], where, f"{key}.{k}") for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(where, key, f"must be a number, got {_tname(value)}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(where, key, f"must be an integer, got {_tname(value)}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(where, key, f"must be true or false, got {_tname(value)}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise InputError(where, key, f"must be a string, got {_tname(value)}")
        return value
    raise InputError(where, key, f"unsupported setting type {hint!r}")  # pragma: no cover


def _check_sections(m: Matrix, where: str) -> None:
    if m.model.tp < 1:
        raise InputError(where, "[model].tp", f"must be at least 1, got {m.model.tp}")
    if m.model.context_length < 1:
        raise InputError(where, "[model].context_length", "must be positive")
    if m.resolve.as_of not in ("release", "fresh"):
        parse_as_of(m.resolve.as_of, where, "[resolve].as_of")
    known_checks = ("golden", "degeneracy", "spec", "speed", "long-context")
    for i, c in enumerate(m.smoke.checks):
        if c not in known_checks:
            raise InputError(where, f"[smoke].checks[{i}]", f"unknown check {c!r}{did_you_mean(c, known_checks)}")
    if m.server.command is not None and not m.server.command:
        raise InputError(where, "[server].command", "must not be empty")
    for selector in m.build.runners:
        for cond in selector.split(","):
            axis = cond.partition("=")[0]
            if "=" in selector and axis not in (*m.package_axes, *PLATFORM_AXES):
                raise InputError(where, f"[build].runners.{selector!r}",
                                 f"no axis {axis!r}{did_you_mean(axis, [*m.package_axes, *PLATFORM_AXES])}")  # fmt: skip
    for name in ("min_spec_accept_length", "perf_tolerance", "spec_min_identical"):
        validate.non_negative(getattr(m.smoke, name), where, f"[smoke].{name}")
    validate.port(m.server.port, where, "[server].port")
    for section, name in (("server", "startup_timeout_s"), ("server", "stall_timeout_s"),
                          ("smoke", "request_timeout_s"), ("resolve", "timeout_s"), ("smoke", "speed_max_tokens"),
                          ("smoke", "spec_match_tokens"), ("smoke", "needle_digits")):  # fmt: skip
        validate.positive(getattr(getattr(m, section), name), where, f"[{section}].{name}")
    validate.non_negative(m.resolve.jobs, where, "[resolve].jobs")
    for cuda, url in m.resolve.cuda_indexes.items():
        key = f"[resolve].cuda_indexes.{cuda[:40]!r}"
        if not validate.full(validate.CUDA, cuda):
            raise InputError(where, key, f"{cuda[:40]!r} is not a CUDA version (e.g. \"12.8\")")
        if not url.strip() or any(c.isspace() for c in url):
            raise InputError(where, key, f"{url[:80]!r} is not one index URL")
        validate.short(url, where, key)
    for name in ("concurrency", "long_context"):
        for i, n in enumerate(getattr(m.smoke, name)):
            validate.positive(n, where, f"[smoke].{name}[{i}]")
    if m.build.base_image is not None:
        validate.image_reference(m.build.base_image, where, "[build].base_image")
    for section, env in (("build", m.build.env), ("server", m.server.env)):
        for k in env:
            validate.env_key(k, where, f"[{section}].env.{k[:40]!r}")


# --------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------


def select(cells: Iterable[Cell], filters: Sequence[str], where: str = "command line") -> tuple[Cell, ...]:
    """Cells matching any filter. A filter is a glob on the cell id, or ``axis=glob[,axis=glob...]``.

    No filters selects every cell; a filter that matches nothing is an input error.
    """
    pool = tuple(cells)
    if not filters:
        return pool
    chosen: dict[str, Cell] = {}
    for f in filters:
        hits = [c for c in pool if _matches(c, f, where)]
        if not hits:
            ids = [c.id for c in pool]
            raise InputError(where, f"cell filter {f!r}", f"matches no cell{did_you_mean(f, ids)}; "
                             "see `envbuilder expand`")  # fmt: skip
        for c in hits:
            chosen.setdefault(c.id, c)
    return tuple(c for c in pool if c.id in chosen)


def _matches(cell: Cell, f: str, where: str) -> bool:
    if "=" not in f:
        return fnmatch.fnmatchcase(cell.id, f)
    axes = cell.axes
    for cond in f.split(","):
        axis, _, pattern = cond.partition("=")
        axis = axis.strip()
        if axis not in axes:
            raise InputError(where, f"cell filter {f!r}", f"unknown axis {axis!r}{did_you_mean(axis, axes)}")
        if not fnmatch.fnmatchcase(axes[axis], pattern.strip()):
            return False
    return True
