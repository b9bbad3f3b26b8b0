"""Resolve: one uv lock (PEP 751 ``pylock.toml``) per cell, for the cell's Python and platform, as of a date.

``uv pip compile --format pylock.toml`` targets the cell's Python (``--python-version``) and glibc
(``--python-platform x86_64-manylinux_2_NN``), never the host's. ``as_of = "release"`` resolves with
``--exclude-newer`` one day after the upload of the cell's engine release, read from the index's PEP
691 JSON API. The CUDA a lock carries is read from the lock itself; when the default build does not match
the cell's ``cuda`` axis, the index configured for that CUDA (``[resolve] cuda_indexes``) is added and the
cell resolved again. Indexes come from the user's configuration (:mod:`envbuilder.indexconfig`).
"""

from __future__ import annotations

import datetime
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder import atomic, children, indexconfig, lock
from envbuilder.artifacts import ResolvedLock
from envbuilder.errors import InputError, StageFailure
from envbuilder.index import NOT_AN_INDEX, IndexUnreachable, ProjectNotFound, SimpleIndex
from envbuilder.matrix import NONE, RESOLVER, Cell, Matrix, parse_as_of
from envbuilder.pipeline import RunContext, default_jobs
from envbuilder.redact import redact
from envbuilder.results import CellResult, Reason, StageResult, Status
from envbuilder.uvbin import uv_bin

ENGINE_PACKAGES = {"sglang": "sglang", "llama-cpp": "llama-cpp-python"}
KEY_PACKAGES = (
    "sglang", "llama-cpp-python", "torch", "transformers", "flash-attn-4", "kernels", "sgl-kernel",
    "sglang-kernel", "flashinfer-python", "triton", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12",
)  # fmt: skip
_NETWORK = re.compile(r"Failed to fetch|error sending request|dns error|timed out|Connection refused|"
                      r"tcp connect error|failed to download|Could not connect|operation timed out", re.I)  # fmt: skip


def engine_package(m: Matrix, cell: Cell) -> str:
    """The distribution whose release date anchors the cell's as-of resolution."""
    name = ENGINE_PACKAGES.get(m.server.engine)
    reqs = cell.requirements()
    if name in reqs:
        return name
    return next(iter(reqs), name or "sglang")


@dataclass(frozen=True, kw_only=True)
class Request:
    """Everything one ``uv pip compile`` depends on."""

    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    python: str
    platform: str
    exclude_newer: str | None
    indexes: tuple[str, ...]
    extra_indexes: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()

    def index_args(self) -> list[str]:
        """Where packages come from, as uv options (also used to install the lock)."""
        a: list[str] = []
        if self.indexes:  # none configured: uv's own configuration, else its default
            a += ["--index-url", self.indexes[0]]
            for extra in self.indexes[1:]:
                a += ["--extra-index-url", extra]
        for extra in self.extra_indexes:
            a += ["--extra-index-url", extra]
        for fl in self.find_links:
            a += ["--find-links", fl]
        return a

    def argv(self, out: Path, req_file: Path, constraints_file: Path | None) -> list[str]:
        a = [uv_bin(), "pip", "compile", str(req_file), "--format", "pylock.toml", "--no-header",
             "--python-version", self.python, "--python-platform", self.platform, "--no-python-downloads",
             "-o", str(out)]  # fmt: skip
        if constraints_file is not None:
            a += ["-c", str(constraints_file)]
        if self.exclude_newer:
            a += ["--exclude-newer", self.exclude_newer]
        return a + self.index_args()


def build_request(m: Matrix, cell: Cell, exclude_newer: datetime.datetime | None) -> Request:
    """The requirements and constraints a cell stands for."""
    engine = engine_package(m, cell)
    reqs: list[str] = []
    cons: list[str] = list(m.resolve.constraints)
    for name, value in cell.requirements().items():
        if value == NONE:
            cons.append(f"{name}<0")  # forbids it; uv explains which package needs it
        elif value == RESOLVER:
            if name == engine:
                reqs.append(name)
        else:
            reqs.append(f"{name}=={value}")
    reqs += list(m.resolve.extra)
    return Request(
        requirements=tuple(reqs), constraints=tuple(cons), python=cell.python,
        platform="x86_64-manylinux_{}_{}".format(*cell.glibc.split(".")),
        exclude_newer=exclude_newer.strftime("%Y-%m-%dT%H:%M:%SZ") if exclude_newer else None,
        indexes=indexconfig.configured(m.resolve.indexes), find_links=m.resolve.find_links,
    )  # fmt: skip


def as_of_date(ctx: RunContext, cell: Cell, mode: str | None = None) -> tuple[datetime.datetime | None, str]:
    """The ``--exclude-newer`` date for a cell and a sentence saying where it came from."""
    mode = mode or ctx.matrix.resolve.as_of
    if mode == "fresh":
        return None, "fresh (today's index)"
    if mode != "release":
        return parse_as_of(mode, str(ctx.matrix.path), "[resolve].as_of"), f"as of {mode}"
    engine = engine_package(ctx.matrix, cell)
    version = cell.requirements().get(engine, RESOLVER)
    if version in (RESOLVER, NONE):
        return None, f"fresh ({engine} is {version!r}, no release date to anchor to)"
    idx = index_client(ctx)
    if idx is None:
        return None, f"fresh (no index to read release dates from: {indexconfig.HOW_TO_SET})"
    try:
        uploaded = idx.release_time(engine, version)
    except IndexUnreachable as e:
        raise StageFailure(Status.ERROR, Reason.NETWORK, f"cannot read {engine}'s release date: {e}") from None
    except ProjectNotFound:
        raise StageFailure(Status.FAIL, Reason.UNSATISFIABLE,
                           f"{engine} {version} does not exist on {idx.url}") from None  # fmt: skip
    if uploaded is None:
        return None, f"fresh ({idx.url} gives no upload-time for {engine} {version})"
    when = uploaded + datetime.timedelta(days=1)
    return when, f"as of {engine} {version}'s release ({uploaded:%Y-%m-%d %H:%M} UTC) + 1 day"


def cuda_index(ctx: RunContext, cuda: str) -> str | None:
    """The extra index of ``cuda``'s builds: ``[resolve] cuda_indexes``, else the run's template; None if unset."""
    if cuda in ctx.matrix.resolve.cuda_indexes:
        return ctx.matrix.resolve.cuda_indexes[cuda]
    template = ctx.options.cuda_index
    return template.format(nodot=cuda.replace(".", "")) if template else None


def index_client(ctx: RunContext) -> SimpleIndex | None:
    """The PEP 691 client of the configured index (else pip's default); None when there is neither."""
    url = indexconfig.read_url(ctx.matrix.resolve.indexes)
    if url is None:
        return None
    retries = 3 if ctx.options.retries is None else ctx.options.retries
    return SimpleIndex(url, ctx.workspace.cache / "index", retries=retries,
                       backoff_s=ctx.options.backoff_s, timeout_s=ctx.options.index_timeout_s)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Compiled:
    lock: lock.Lock | None
    stderr: str
    argv: list[str]
    seconds: float


def compile_lock(req: Request, dest: Path, *, timeout_s: float, retries: int = 1, backoff_s: float = 1.0,
                 workdir: Path | None = None) -> Compiled:  # fmt: skip
    """Run ``uv pip compile``; on success the lock is atomically written to ``dest``.

    Network failures are retried with exponential backoff; resolution failures are not. ``timeout_s``
    bounds the whole call, retries included: a hanging uv (and everything it started) is killed then.
    uv runs as its own process group that dies with envbuilder; its scratch folder lives under
    ``<workdir>/tmp`` (default: the lock's folder's workdir) and is removed on every way out.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    with children.temp_dir(workdir or _workdir_of(dest), "resolve") as t:
        req_file = t / "requirements.in"
        req_file.write_text("\n".join(req.requirements) + "\n")
        cons_file = None
        if req.constraints:
            cons_file = t / "constraints.txt"
            cons_file.write_text("\n".join(req.constraints) + "\n")
        out = t / "pylock.toml"
        argv = req.argv(out, req_file, cons_file)
        stderr = ""
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(backoff_s * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic())))
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                p = children.run(argv, timeout_s=left)
            except subprocess.TimeoutExpired:
                stderr = f"uv pip compile timed out after {timeout_s:.0f} s"
                break
            stderr = p.stderr
            if p.returncode == 0:
                atomic.write_bytes(dest, out.read_bytes())
                return Compiled(lock=lock.read(dest), stderr=stderr, argv=argv, seconds=time.monotonic() - start)
            if p.returncode < 0:  # killed by a signal that was not ours: undecided, never a verdict
                stderr = f"uv pip compile was killed by signal {-p.returncode}\n{stderr}"
                break
            if not _NETWORK.search(stderr) or "No solution found" in stderr:
                break
        return Compiled(lock=None, stderr=stderr, argv=argv, seconds=time.monotonic() - start)


def _workdir_of(dest: Path) -> Path:
    """``<workdir>`` of ``<workdir>/locks/<cell>/…/pylock.toml`` (else the lock's own folder)."""
    for parent in dest.parents:
        if parent.name == "locks":
            return parent.parent
    return dest.parent


def explain_failure(stderr: str, cell: Cell, req: Request, idx: SimpleIndex | None) -> StageFailure:
    """Turn uv's error output into a decided status, a reason slug and one sentence."""
    text = " ".join(line.strip() for line in stderr.splitlines())
    if stderr.startswith("uv pip compile was killed by signal"):
        return StageFailure(Status.ERROR, Reason.INTERNAL_ERROR, stderr.splitlines()[0], {"uv_stderr": stderr[-3000:]})
    if "No solution found" not in text and (_NETWORK.search(text) or "timed out after" in text):
        last = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        url = re.search(r"Failed to fetch: `?([^`\s]+)", stderr)
        where = f"{url.group(1)}: " if url else ""
        return StageFailure(Status.ERROR, Reason.NETWORK,
                            f"index unreachable: {where}{last[-1] if last else 'no answer'}",
                            {"uv_stderr": stderr[-3000:]})  # fmt: skip
    if m := re.search(r"Because (\S+?)==(\S+) has no wheels with a matching (platform|Python ABI|Python) tag"
                      r"(?: \(e\.g\., `([^`]+)`\))?", text):  # fmt: skip
        name, version, kind, tag = m.group(1), m.group(2), m.group(3), m.group(4)
        available = re.search(
            r"Wheels are available for `[^`]+` \(v[^)]+\) on the following platforms: (.+?)(?:$|hint:)", text
        )
        if available:
            plats = re.findall(r"`([^`]+)`", available.group(1))
        elif idx is not None:
            try:
                plats = idx.platforms(name, version)
            except (IndexUnreachable, ProjectNotFound):
                plats = []
        else:
            plats = []
        wanted = tag or req.platform
        msg = (f"{name} {version} has no wheel for {wanted} ({cell.os}, glibc {cell.glibc}, Python {cell.python})"
               + (f"; wheels exist for {', '.join(plats)}" if plats else ""))  # fmt: skip
        return StageFailure(Status.FAIL, Reason.NO_WHEEL_FOR_PLATFORM, msg,
                            {"available_platforms": plats, "uv_stderr": stderr[-3000:], "kind": kind})  # fmt: skip
    if "No solution found" in text or "unsatisfiable" in text:
        return StageFailure(Status.FAIL, Reason.UNSATISFIABLE, condense_conflict(text, cell),
                            {"uv_stderr": stderr[-3000:]})  # fmt: skip
    last = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return StageFailure(Status.ERROR, Reason.INTERNAL_ERROR, f"uv pip compile failed: {last[-1] if last else '?'}",
                        {"uv_stderr": stderr[-3000:]})  # fmt: skip


def condense_conflict(text: str, cell: Cell) -> str:
    """uv's derivation tree condensed to the blocking requirement.

    e.g. ``sglang 0.5.11 requires flash-attn-4>=4.0.0b9; cell pins flash-attn-4==4.0.0b4``.
    """
    reqs = cell.requirements()
    dep = re.search(r"Because (?:all versions of |only )?([A-Za-z0-9._-]+?)(?:[=<>!~]=?(\S+?))? depends? on (\S+?)"
                    r"(,| and| which|$)", text)
    if dep:
        parent, requirement = dep.group(1), dep.group(3)
        parent_v = reqs.get(parent, dep.group(2) or "")
        req_name = re.split(r"[=<>!~;\[ ]", requirement, maxsplit=1)[0]
        if reqs.get(req_name) == NONE:
            return f"{parent} {parent_v} requires {req_name}; the cell forbids it (axis value none)".replace("  ", " ")
        pins = re.findall(r"you require (\S+?)[,.]?(?:\s|$)", text)
        pin = next((p for p in pins if p.startswith(req_name) and p != requirement), None)
        if pin:
            return f"{parent} {parent_v} requires {requirement}; cell pins {pin}".replace("  ", " ")
        return f"{parent} {parent_v} requires {requirement}, which conflicts with the cell's other pins".replace(
            "  ", " ")  # fmt: skip
    causes = re.findall(r"cause: (.+?)(?= cause: |$)", text)
    return (causes[-1] if causes else text)[:400]


class ResolveStage:
    """``resolve``: writes ``<workdir>/locks/<cell-id>/pylock.toml``."""

    name = "resolve"
    requires: tuple[str, ...] = ()

    def __init__(self, *, drift: bool = False, jobs: int = 0) -> None:
        self.drift = drift
        self.max_workers = jobs or default_jobs()

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        when, _ = as_of_date(ctx, cell)
        req = build_request(ctx.matrix, cell, when)
        return {"request": req.__dict__, "cuda": cell.cuda, "drift": self.drift,
                "cuda_index": cuda_index(ctx, cell.cuda)}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        path = ctx.workspace.locks(cell.id) / "pylock.toml"
        if old.status is not Status.PASS:
            return True
        try:  # a truncated or foreign lock is derived data: resolved again
            return (path.exists() and isinstance(old.artifact, ResolvedLock)
                    and lock.read(path).sha256 == old.artifact.sha256)  # fmt: skip
        except InputError:
            return False

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        m = ctx.matrix
        when, how = as_of_date(ctx, cell)
        req = build_request(m, cell, when)
        dest = ctx.workspace.locks(cell.id) / "pylock.toml"
        idx = index_client(ctx)
        retries = 1 if ctx.options.retries is None else ctx.options.retries
        backoff = ctx.options.backoff_s
        res = compile_lock(req, dest, timeout_s=m.resolve.timeout_s, retries=retries, backoff_s=backoff)
        tried = [res]
        if res.lock is None:
            raise self._failure(ctx, cell, res, req, idx)
        carried = res.lock.cuda()
        notes: list[str] = []
        if cell.cuda != NONE and carried != cell.cuda:
            extra = cuda_index(ctx, cell.cuda)
            if extra is None:
                raise StageFailure(Status.ERROR, Reason.CUDA_MISMATCH,
                                   f"the default build carries CUDA {carried or 'none'}, the cell asks for {cell.cuda} "
                                   f"and no index is configured for it: add [resolve] cuda_indexes = "
                                   f"{{\"{cell.cuda}\" = \"<url>\"}}", self._details(cell, res, how, when, notes))  # fmt: skip
            notes.append(f"the default build carries CUDA {carried}; resolved again with {redact(extra)}")
            req = Request(**{**req.__dict__, "extra_indexes": (extra,)})
            res = compile_lock(req, dest, timeout_s=m.resolve.timeout_s, retries=retries, backoff_s=backoff)
            tried.append(res)
            if res.lock is None:
                raise self._failure(ctx, cell, res, req, idx)
            carried = res.lock.cuda()
            if carried != cell.cuda:
                raise StageFailure(Status.FAIL, Reason.CUDA_MISMATCH,
                                   f"the lock carries CUDA {carried or 'none'}, the cell asks for {cell.cuda}",
                                   self._details(cell, res, how, when, notes))  # fmt: skip
        assert res.lock is not None
        details = self._details(cell, res, how, when, notes)
        details["index_args"] = req.index_args()
        if self.drift and when is not None:
            details["drift"] = self._drift(ctx, cell, req, res.lock)
        atomic.write_text(ctx.workspace.locks(cell.id) / "requirements.in", "\n".join(req.requirements) + "\n")
        n = len(res.lock.packages)
        key = ", ".join(f"{k} {v}" for k, v in details["key_packages"].items())
        msg = f"{n} packages, CUDA {carried or 'none'}, {how}: {key}"
        resolved = ResolvedLock(path=str(res.lock.path), sha256=res.lock.sha256, packages=res.lock.versions(),
                                index_args=tuple(req.index_args()), cuda=carried)  # fmt: skip
        return StageResult(name=self.name, status=Status.PASS, message=msg, details=details, artifact=resolved)

    def _failure(self, ctx: RunContext, cell: Cell, res: Compiled, req: Request, idx: SimpleIndex | None) -> StageFailure:
        """uv's failure explained; a verdict only when every index answers as a package index."""
        failure = explain_failure(res.stderr, cell, req, idx)
        if "timed out after" in res.stderr or "killed by signal" in res.stderr:
            return failure
        engine = engine_package(ctx.matrix, cell)
        for url in req.indexes:
            probe = SimpleIndex(url, None, retries=0, timeout_s=ctx.options.index_timeout_s)
            try:
                probe.project(engine)
            except ProjectNotFound:
                continue
            except IndexUnreachable as e:
                if NOT_AN_INDEX in str(e) or failure.status is Status.FAIL:
                    return StageFailure(Status.ERROR, Reason.NETWORK, f"cannot decide: {e}",
                                        {"uv_stderr": res.stderr[-3000:]})  # fmt: skip
        return failure

    def _details(self, cell: Cell, res: Compiled, how: str, when: datetime.datetime | None,
                 notes: list[str]) -> dict[str, Any]:  # fmt: skip
        assert res.lock is not None
        versions = res.lock.versions()
        return {
            "lock": str(res.lock.path), "lock_sha256": res.lock.sha256, "cuda": res.lock.cuda(),
            "as_of": when.isoformat() if when else None, "as_of_policy": how,
            "platform": f"{cell.os} (glibc {cell.glibc})",
            "command": " ".join(res.argv[1:]), "seconds": round(res.seconds, 2), "notes": notes,
            "key_packages": {k: versions[k] for k in KEY_PACKAGES if k in versions}, "packages": versions,
        }  # fmt: skip

    def _drift(self, ctx: RunContext, cell: Cell, req: Request, as_of_lock: lock.Lock) -> list[dict[str, str | None]]:
        fresh_req = Request(**{**req.__dict__, "exclude_newer": None})
        dest = ctx.workspace.locks(cell.id) / "fresh" / "pylock.toml"
        res = compile_lock(fresh_req, dest, timeout_s=ctx.matrix.resolve.timeout_s)
        if res.lock is None:
            return [{"name": "(fresh resolution failed)", "old": None, "new": res.stderr.strip().splitlines()[-1]}]
        return [{"name": d["name"], "as_of": d["old"], "fresh": d["new"]}
                for d in lock.diff(as_of_lock.versions(), res.lock.versions())]  # fmt: skip
