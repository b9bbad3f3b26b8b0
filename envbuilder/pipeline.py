"""The pipeline: stages run over cells, one result per cell, one bad cell never stops the others.

A stage is a small object behind the :class:`Stage` protocol: its ``inputs`` are hashed so an
unchanged stage is not re-run, and ``run`` returns a :class:`StageResult` or raises
:class:`StageFailure`. Every other exception is caught per cell and recorded as
``error``/``internal-error``. A stage whose prerequisite ended ``fail`` or ``error`` is recorded
as ``skip``/``prerequisite-failed`` without running.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from envbuilder import __version__, children, validate
from envbuilder.artifacts import HostFacts
from envbuilder.errors import StageFailure
from envbuilder.matrix import Cell, Matrix
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status

STAGE_ORDER = ("resolve", "precheck", "build", "import", "smoke")


@dataclass(frozen=True)
class Workspace:
    """Where envbuilder keeps its work: ``<workdir>/{results,locks,images,logs,reports,cache}``."""

    root: Path

    @property
    def results(self) -> ResultStore:
        return ResultStore(self.root / "results")

    def locks(self, cell_id: str) -> Path:
        return self._cell_dir("locks", cell_id)

    def images(self, cell_id: str) -> Path:
        return self._cell_dir("images", cell_id)

    def logs(self, cell_id: str) -> Path:
        return self._cell_dir("logs", cell_id)

    def venvs(self, cell_id: str) -> Path:
        return self._cell_dir("venvs", cell_id)

    def _cell_dir(self, kind: str, cell_id: str) -> Path:
        """``<workdir>/<kind>/<cell-id>``: an id is checked, and the path must stay under the workdir."""
        validate.cell_id(cell_id, str(self.root / kind), "cell id")
        return validate.under(self.root, kind, cell_id)

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def cache(self) -> Path:
        return self.root / "cache"


@dataclass(frozen=True, kw_only=True)
class StageEvent:
    """Reported to the CLI's progress display; ``result`` is None when the stage starts, and while it runs
    ``progress`` carries what a long stage is doing (an image layer, a wheel download, a start-up phase)."""

    cell_id: str
    stage: str
    result: StageResult | None = None
    cached: bool = False
    progress: str | None = None


EventSink = Callable[[StageEvent], None]


def _no_events(_: StageEvent) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """This run's command-line choices the stages read (``None``: the matrix's setting or the stage's default)."""

    base_image: str | None = None  # --base-image
    base_url: str | None = None  # --base-url: check a server that already runs
    startup_timeout_s: float | None = None
    stall_timeout_s: float | None = None
    no_cache: bool = False  # build images without Docker's layer cache
    find_links: tuple[str, ...] = ()  # venv runner: install only from these wheel folders
    provided: str | None = None  # venv runner: a `pip freeze` of what the interpreter already has
    python: str | None = None  # venv runner: the interpreter venvs are made from
    baseline_speed: float | None = None  # the pinned decode tok/s (watch)
    cuda_index: str | None = None  # a per-CUDA index template ("…/cu{nodot}") for CUDAs [resolve] cuda_indexes lacks
    retries: int | None = None  # index retries (default: per call site)
    backoff_s: float = 1.0
    index_timeout_s: float = 30.0  # one index request, answer included (an overall deadline, not per read)


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Everything a stage may read. Immutable: stages communicate only through results."""

    matrix: Matrix
    workspace: Workspace
    host_facts: HostFacts = field(default_factory=HostFacts)
    force_stages: frozenset[str] = frozenset()
    options: RunOptions = RunOptions()
    events: EventSink = _no_events


def progress_sink(ctx: RunContext, cell_id: str, stage: str) -> Callable[[str], None]:
    """A callback a long stage reports its progress lines to."""

    def say(line: str) -> None:
        ctx.events(StageEvent(cell_id=cell_id, stage=stage, progress=line))

    return say


class Stage(Protocol):
    """One step of the pipeline."""

    name: str
    requires: tuple[str, ...]
    max_workers: int  # cells run at once for this stage

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        """Everything the outcome depends on; hashed to decide whether a stored result is still valid."""
        ...

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        """Whether what ``old`` produced (a lock, an image) is still there, so it may be reused."""
        ...

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        """Decide this stage for ``cell``; may raise :class:`StageFailure`."""
        ...


@functools.cache
def producer() -> str:
    """envbuilder's version, with its git commit when it runs from a checkout (``0.1.0+g1a2b3c4d5e6f``)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return __version__
    try:
        p = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                           text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return __version__
    commit = p.stdout.strip()
    return f"{__version__}+g{commit}" if p.returncode == 0 and commit else __version__


def inputs_hash(stage: Stage, ctx: RunContext, cell: Cell, prior: CellResult) -> str:
    """The stage's cache key: what it declares it reads (``Stage.inputs``) and the envbuilder that decides."""
    payload = {"stage": stage.name, "envbuilder": producer(), **stage.inputs(ctx, cell, prior)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_stage_for_cell(stage: Stage, ctx: RunContext, cell: Cell, prior: CellResult) -> tuple[StageResult, bool]:
    """Run (or reuse) one stage of one cell. Returns the result and whether it came from the store."""
    blocked = [
        r for r in (prior.stage(n) for n in stage.requires) if r is not None and r.status in (Status.FAIL, Status.ERROR)
    ]
    if blocked:
        first = blocked[0]
        return StageResult(name=stage.name, status=Status.SKIP, reason=Reason.PREREQUISITE_FAILED,
                           message=f"not run: {first.name} ended {first.status} ({first.reason})"), False  # fmt: skip
    start = time.monotonic()
    try:
        key = inputs_hash(stage, ctx, cell, prior)
    except StageFailure as e:
        return _from_failure(stage.name, e, time.monotonic() - start, ""), False
    except Exception as e:  # one bad cell never stops the matrix
        return _internal(stage.name, e, time.monotonic() - start, ""), False
    old = prior.stage(stage.name)
    if (old is not None and old.inputs == key and old.status is not Status.ERROR
            and stage.name not in ctx.force_stages and stage.intact(ctx, cell, old)):  # fmt: skip
        return old, True
    try:
        result = stage.run(ctx, cell, prior)
        result = replace(result, duration_s=time.monotonic() - start, inputs=key, producer=producer())
    except StageFailure as e:
        result = _from_failure(stage.name, e, time.monotonic() - start, key)
    except Exception as e:
        result = _internal(stage.name, e, time.monotonic() - start, key)
    return result, False


def _from_failure(name: str, e: StageFailure, duration: float, key: str) -> StageResult:
    return StageResult(name=name, status=e.status, reason=e.reason, message=e.message, duration_s=duration,
                       inputs=key, details=e.details, producer=producer())  # fmt: skip


def _internal(name: str, e: BaseException, duration: float, key: str) -> StageResult:
    tb = traceback.format_exception(e)
    return StageResult(name=name, status=Status.ERROR, reason=Reason.INTERNAL_ERROR,
                       message=f"{type(e).__name__}: {e}".splitlines()[0][:500], duration_s=duration,
                       inputs=key, details={"traceback": "".join(tb)[-4000:]}, producer=producer())  # fmt: skip


def run_pipeline(ctx: RunContext, cells: Sequence[Cell], stages: Sequence[Stage]) -> list[CellResult]:
    """Run ``stages`` in order over ``cells``; each finished stage is saved before the next starts.

    A stored stage is reused when its cache key (:func:`inputs_hash`) is unchanged, whatever else of the cell's
    settings changed; when the settings changed, stored stages this run does not revisit are dropped (their
    keys cannot be checked).
    """
    store = ctx.workspace.results
    lock = threading.Lock()
    current: dict[str, CellResult] = {}
    names = {s.name for s in stages}
    children.STOPPING.clear()
    children.clean_stale_temp(ctx.workspace.root)
    for cell in cells:
        prior = store.load(cell.id) or CellResult(id=cell.id, axes=cell.axes)
        if prior.hash and prior.hash != cell.hash:
            prior = prior.without_stages({s.name for s in prior.stages if s.name.split(".")[0] not in names})
        current[cell.id] = CellResult(id=cell.id, axes=cell.axes, hash=cell.hash, stages=prior.stages,
                                      env=_environment(ctx, prior))  # fmt: skip

    for stage in stages:

        def one(cell: Cell, stage: Stage = stage) -> None:
            ctx.events(StageEvent(cell_id=cell.id, stage=stage.name))
            result, cached = run_stage_for_cell(stage, ctx, cell, current[cell.id])
            if children.STOPPING.is_set():  # computed while the run is being stopped: never stored
                raise children.Interrupted
            with lock:
                updated = current[cell.id]  # a reused stage is stored already, its checks too
                if not cached:  # a re-run's checks replace the stored ones; stored once, as stages of their own
                    updated = updated.without_stages({s.name for s in updated.stages if s.name.startswith(stage.name + ".")})
                    updated = updated.with_stage(result)
                    for check in result.checks:
                        updated = updated.with_stage(replace(check, producer=result.producer))
                current[cell.id] = updated
                store.save(updated)
            ctx.events(StageEvent(cell_id=cell.id, stage=stage.name, result=result, cached=cached))

        workers = max(1, min(stage.max_workers, len(cells)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"eb-{stage.name}") if workers > 1 else None
        try:
            if pool is None:
                for cell in cells:
                    one(cell)
            else:
                list(pool.map(one, cells))
        except BaseException:
            # Ctrl-C / SIGTERM (or a bug): stop every child now, store nothing more, keep what is stored
            children.stop_all()
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
    return [current[c.id] for c in cells]


def _environment(ctx: RunContext, prior: CellResult) -> dict[str, Any]:
    env = dict(prior.env)
    env["envbuilder"] = __version__
    env["matrix"] = str(ctx.matrix.path)
    if ctx.host_facts.known:
        env["host"] = dict(ctx.host_facts.document)
    return env


def default_jobs() -> int:
    return max(1, (os.cpu_count() or 1) * 2)
