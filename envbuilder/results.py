"""The result contract: one JSON document per cell, written atomically, read by every stage and report.

::

    {"id", "axes": {...}, "hash", "verdict": "pass|fail|skip|error",
     "stages": [{"name", "status", "reason", "message", "duration_s", "inputs", "details", "envbuilder",
                 "artifact"}],
     "env": {...}}

Schema 2: a stage's typed hand-off to later stages is its ``artifact`` (:mod:`envbuilder.artifacts`), and the
smoke checks are stored once, as stages of their own. Version-1 files still load (their artifacts are read
from ``details``; the copy of the checks inside ``smoke``'s details is dropped).

``fail`` means the cell is incompatible, ``error`` that the tool could not decide (network down,
Docker missing), ``skip`` that the stage did not run: either it was not asked for / does not apply
to the cell (reason ``not-applicable``) or it could not run here (``no-gpu``, ``unknown-facts``,
``python-unavailable``, ``prerequisite-failed``). The verdict is the worst status among the stages
that apply (pass < skip < error < fail): ``not-applicable`` stages are left out, so a cell whose
every stage that ran passed reads ``pass``.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuilder import atomic, validate
from envbuilder.artifacts import Artifact, BuiltEnvironment, ResolvedLock, artifact_from_json, from_v1_details
from envbuilder.errors import InputError
from envbuilder.redact import redact_obj

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2


class Status(enum.StrEnum):
    PASS = "pass"
    SKIP = "skip"
    ERROR = "error"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Status.PASS: 0, Status.SKIP: 1, Status.ERROR: 2, Status.FAIL: 3}


class Reason(enum.StrEnum):
    """The fixed vocabulary of reason slugs. The README's table documents each."""

    OK = "ok"
    # resolve
    UNSATISFIABLE = "unsatisfiable"
    NO_WHEEL_FOR_PLATFORM = "no-wheel-for-platform"
    NETWORK = "network"
    CUDA_MISMATCH = "cuda-mismatch"
    # precheck
    DRIVER_TOO_OLD = "driver-too-old"
    DRIVER_MISMATCH = "driver-mismatch"
    ARCH_UNSUPPORTED = "arch-unsupported"
    VRAM_INSUFFICIENT = "vram-insufficient"
    # build / import
    DOCKER_UNAVAILABLE = "docker-unavailable"
    BUILD_FAILED = "build-failed"
    IMPORT_ERROR = "import-error"
    BAD_FLAG = "bad-flag"
    BAD_CONFIG = "bad-config"
    # smoke
    NO_GPU = "no-gpu"
    OOM = "oom"
    CRASH = "crash"
    GRAPH_CAPTURE_FAILED = "graph-capture-failed"
    STARTUP_TIMEOUT = "startup-timeout"
    STALL = "stall"
    DEGENERATE = "degenerate"
    GOLDEN_MISMATCH = "golden-mismatch"
    SPEC_LOSSY = "spec-lossy"
    SPEC_LOW_ACCEPTANCE = "spec-low-acceptance"
    PERF_REGRESSION = "perf-regression"
    LONG_CONTEXT_MISS = "long-context-miss"
    # any stage
    NOT_APPLICABLE = "not-applicable"
    PREREQUISITE_FAILED = "prerequisite-failed"
    UNKNOWN_FACTS = "unknown-facts"
    PYTHON_UNAVAILABLE = "python-unavailable"
    INTERNAL_ERROR = "internal-error"


@dataclass(frozen=True, kw_only=True)
class StageResult:
    """What one stage decided about one cell."""

    name: str
    status: Status
    reason: Reason = Reason.OK
    message: str = ""
    duration_s: float = 0.0
    inputs: str = ""  # content hash of the stage's inputs; equal inputs => the stage is not re-run
    details: dict[str, Any] = field(default_factory=dict)
    producer: str = ""  # the envbuilder (version, git commit when known) that decided it
    artifact: Artifact | None = None  # what later stages read (a lock, an environment)
    checks: tuple[StageResult, ...] = ()  # smoke's checks; in memory only: stored as stages of their own

    @property
    def not_applicable(self) -> bool:
        """Not asked for, or meaningless for this cell (as opposed to "could not run here")."""
        return self.status is Status.SKIP and self.reason is Reason.NOT_APPLICABLE

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "reason": self.reason.value,
            "message": self.message,
            "duration_s": round(self.duration_s, 3),
            "inputs": self.inputs,
            "details": self.details,
            "envbuilder": self.producer,
            "artifact": None if self.artifact is None else self.artifact.to_json(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], schema: int = SCHEMA_VERSION) -> StageResult:
        name = str(d["name"])
        details = dict(d.get("details", {}))
        if schema < 2:
            details.pop("substages", None)  # version 1 kept the checks twice: here and as stages
            artifact = from_v1_details(name, details)
        else:
            artifact = artifact_from_json(d["artifact"]) if d.get("artifact") else None
        return cls(
            name=str(d["name"]),
            status=Status(d["status"]),
            reason=Reason(d.get("reason", "ok")),
            message=str(d.get("message", "")),
            duration_s=float(d.get("duration_s", 0.0)),
            inputs=str(d.get("inputs", "")),
            details=details,
            producer=str(d.get("envbuilder", "")),
            artifact=artifact,
        )


@dataclass(frozen=True, kw_only=True)
class CellResult:
    """Every stage result of one cell, in pipeline order, plus the environment it ran in."""

    id: str
    axes: dict[str, str]
    hash: str = ""
    stages: tuple[StageResult, ...] = ()
    env: dict[str, Any] = field(default_factory=dict)

    @property
    def applicable(self) -> tuple[StageResult, ...]:
        """The stages that ran or could not run here (``skip``/``not-applicable`` ones left out)."""
        return tuple(s for s in self.stages if not s.not_applicable)

    @property
    def verdict(self) -> Status:
        ran = self.applicable
        if not ran:
            return Status.SKIP
        return max((s.status for s in ran), key=lambda s: s.rank)

    def stage(self, name: str) -> StageResult | None:
        for s in self.stages:
            if s.name == name:
                return s
        return None

    def lock(self) -> ResolvedLock | None:
        """The resolved lock, when resolve passed."""
        s = self.stage("resolve")
        return s.artifact if s is not None and s.status is Status.PASS and isinstance(s.artifact, ResolvedLock) else None

    def environment(self) -> BuiltEnvironment | None:
        """The built environment (venv or image), when build passed."""
        s = self.stage("build")
        ok = s is not None and s.status is Status.PASS
        return s.artifact if s is not None and ok and isinstance(s.artifact, BuiltEnvironment) else None

    def with_stage(self, result: StageResult) -> CellResult:
        """A copy with ``result`` replacing the stage of the same name (or appended)."""
        kept = [s for s in self.stages if s.name != result.name]
        return replace(self, stages=(*kept, result))

    def without_stages(self, names: set[str]) -> CellResult:
        return replace(self, stages=tuple(s for s in self.stages if s.name not in names))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "id": self.id,
            "axes": self.axes,
            "hash": self.hash,
            "verdict": self.verdict.value,
            "stages": [s.to_json() for s in self.stages],
            "env": self.env,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellResult:
        return cls(
            id=str(d["id"]),
            axes={str(k): str(v) for k, v in d["axes"].items()},
            hash=str(d.get("hash", "")),
            stages=tuple(StageResult.from_json(s, int(d.get("schema", 1))) for s in d.get("stages", [])),
            env=dict(d.get("env", {})),
        )


class ResultStore:
    """``<workdir>/results/<cell-id>.json``, one atomic file per cell.

    A stored file that cannot be read back (truncated, empty, foreign) is moved aside to
    ``<cell-id>.json.broken-<time>`` with a warning naming it, and the cell counts as never run.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, cell_id: str) -> Path:
        validate.cell_id(cell_id, str(self.root), "cell id")
        return validate.under(self.root, f"{cell_id}.json")

    def load(self, cell_id: str) -> CellResult | None:
        p = self.path(cell_id)
        if not p.exists():
            return None
        try:
            r = load_result_file(p)
        except InputError as e:
            _move_aside(p, e)
            return None
        if r.id != cell_id:
            _move_aside(p, InputError(str(p), "id", f"names cell {r.id!r}, not {cell_id!r}"))
            return None
        return r

    def save(self, result: CellResult) -> None:
        """Write the result atomically, every credential in it redacted."""
        atomic.write_json(self.path(result.id), redact_obj(result.to_json()))

    def all(self) -> list[CellResult]:
        if not self.root.is_dir():
            return []
        out = []
        for p in sorted(self.root.glob("*.json")):
            try:
                out.append(load_result_file(p))
            except InputError as e:
                _move_aside(p, e)
        return out


def _move_aside(path: Path, why: InputError) -> None:
    aside = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    try:
        os.replace(path, aside)
    except OSError:
        log.warning("%s; could not move it aside, ignored", why)
        return
    log.warning("%s; moved aside to %s, the cell will be computed again", why, aside.name)


def merge_result_files(paths: Sequence[Path]) -> list[CellResult]:
    """The results in ``paths`` (files, or folders searched for ``*.json``), one per cell; a cell found twice with
    different results is an input error naming both files."""
    seen: dict[str, tuple[Path, CellResult]] = {}
    for d in paths:
        files = [d] if d.is_file() else sorted(d.rglob("*.json"))
        if not d.exists():
            raise InputError(str(d), None, "does not exist")
        for f in files:
            r = load_result_file(f)
            if r.id in seen:
                prev_path, prev = seen[r.id]
                if prev.to_json() != r.to_json():
                    raise InputError(str(f), r.id, f"conflicts with {prev_path} (same cell, different results)")
                continue
            seen[r.id] = (f, r)
    return [r for _, r in seen.values()]


def load_result_file(path: Path) -> CellResult:
    """Read one result file (possibly someone else's: a CI artifact); a malformed file is an input error
    naming it and the key."""
    data = validate.load_json(path, what="an envbuilder result file")
    where = str(path)
    if not isinstance(data, dict):
        raise InputError(where, None, "not an envbuilder result file (must be a JSON object)")
    validate.cell_id(data.get("id"), where, "id")
    if not isinstance(data.get("axes"), dict):
        raise InputError(where, "axes", "must be an object of axis = value")
    for k, v in data["axes"].items():
        if not validate.full(validate.AXIS_NAME, k) or not isinstance(v, str) or len(v) > validate.MAX_VALUE_LEN:
            raise InputError(where, f"axes.{k[:40]}", "not an axis name and a short string value")
    stages = data.get("stages", [])
    if not isinstance(stages, list):
        raise InputError(where, "stages", "must be a list")
    for i, st in enumerate(stages):
        if not isinstance(st, dict):
            raise InputError(where, f"stages[{i}]", "must be an object")
        if not validate.full(r"[a-z][a-z0-9.-]{0,63}", st.get("name")):
            raise InputError(where, f"stages[{i}].name", "not a stage name")
        for key, enum_type in (("status", Status), ("reason", Reason)):
            value = st.get(key, "ok")
            if not isinstance(value, str) or value not in {e.value for e in enum_type}:
                raise InputError(where, f"stages[{i}].{key}", f"{str(value)[:40]!r} is not a known {key}")
        for key in ("details",):
            if key in st and not isinstance(st[key], dict):
                raise InputError(where, f"stages[{i}].{key}", "must be an object")
        dur = st.get("duration_s", 0.0)
        if isinstance(dur, bool) or not isinstance(dur, int | float):
            raise InputError(where, f"stages[{i}].duration_s", "must be a number")
    if "env" in data and not isinstance(data["env"], dict):
        raise InputError(where, "env", "must be an object")
    try:
        return CellResult.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
        raise InputError(where, None, f"not an envbuilder result file ({e})") from None
