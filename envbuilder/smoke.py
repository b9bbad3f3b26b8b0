"""smoke: start the cell's engine once, watch it become ready (or classify why not), run the checks
against that one server, and always tear it down.

Where the server runs: a custom ``[server] command`` (with ``{host}``, ``{port}``, ``{model}``), an
external server (``[server] base_url`` without a command, or ``--base-url``), the cell's venv, or the
cell's Docker image.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envbuilder import engines
from envbuilder.backends import Backend, ExternalBackend, LocalBackend, for_environment
from envbuilder.checks import run_checks
from envbuilder.client import EngineClient, ready_probe
from envbuilder.engines import EngineSpec
from envbuilder.errors import InputError, StageFailure, did_you_mean
from envbuilder.matrix import NONE, Cell, Matrix
from envbuilder.monitor import LaunchOutcome, LogLine, WatchLimits, watch
from envbuilder.pipeline import RunContext
from envbuilder.results import CellResult, Reason, StageResult, Status
from envbuilder.runners import free_port

SUITE_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Launch:
    """Everything needed to start one server of a cell."""

    argv: list[str]
    env: dict[str, str]
    base_url: str
    backend: Backend  # where it runs: this machine, the cell's image, or an external server
    model: str
    image: str | None = None


FIND_IN_SITE = ("import glob, os, site, sys\n"
                "hits = [h for r in site.getsitepackages() for h in sorted(glob.glob(os.path.join(r, sys.argv[1])))]\n"
                "print(hits[0] if hits else '')")  # fmt: skip
RunPython = Callable[[list[str]], tuple[int, str]]


def python_runner(python: str) -> RunPython:
    """Run ``python <argv>`` here; (exit status, output)."""

    def run(argv: list[str]) -> tuple[int, str]:
        import subprocess

        p = subprocess.run([python, *argv], capture_output=True, text=True, check=False, timeout=120)
        return p.returncode, p.stdout

    return run


def resolve_model_path(m: Matrix, run: RunPython) -> str:
    """``[model] path``: a local path, a hub id, or ``pkg:<glob>`` inside the environment's site-packages
    (found by the environment's own Python: a venv's, or the image's in a container)."""
    path = m.model.path
    if path.startswith("pkg:"):
        pattern = path[4:]
        code, out = run(["-c", FIND_IN_SITE, pattern])
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if code == 0 and lines:
            return lines[-1]
        raise StageFailure(Status.FAIL, Reason.CRASH,
                           f"model {path}: nothing matches {pattern!r} in the environment's site-packages")  # fmt: skip
    local = (m.path.parent / path).expanduser()
    return str(local) if local.exists() else path


def plan_launch(ctx: RunContext, cell: Cell, prior: CellResult, *, extra_args: tuple[str, ...] = (),
                drop_args: tuple[str, ...] = ()) -> Launch:  # fmt: skip
    """How this cell's server is started (custom command, external, venv or image)."""
    m = ctx.matrix
    spec = release_spec(ctx, cell)  # the release's own flag spellings when its wheel was read
    host = m.server.host
    base_url = ctx.options.base_url or (m.server.base_url if m.server.command is None else None)
    env = {**os.environ, **m.server.env}
    if base_url:
        return Launch(argv=[], env=env, base_url=str(base_url), backend=ExternalBackend(), model=m.model.path)
    port = m.server.port or free_port(host)
    run_dir = ctx.workspace.root / "run"
    user_args = engines.drop_flags(m.server.args, lambda flag: flag in drop_args) + list(extra_args)
    if m.server.command is not None:  # [server] args are appended to a custom command
        model = resolve_model_path(m, python_runner(sys.executable))
        argv = [a.format(host=host, port=port, model=model) for a in m.server.command] + user_args
        return Launch(argv=argv, env=env, base_url=m.server.base_url or f"http://{host}:{port}",
                      backend=LocalBackend(python=sys.executable, run_dir=run_dir), model=model)  # fmt: skip
    built = prior.environment()
    if built is None:
        raise StageFailure(Status.SKIP, Reason.PREREQUISITE_FAILED, "no built environment for this cell")
    model = resolve_model_path(m, lambda argv: for_environment(built, run_dir=run_dir).run_python(argv, 120))
    local_model = Path(model).exists()
    backend = for_environment(built, run_dir=run_dir, labels={"envbuilder.cell": cell.id},
                              model_dir=model if local_model else None,
                              gpus=(m.model.tp or -1) if cell.cuda != NONE else None, driver=cell.driver)  # fmt: skip
    python, bind, seen_model, server_env = backend.server_view(host, model, m.server.env)
    argv = spec.launch_argv(python, seen_model, bind, port, user_args, tp=m.model.tp, context_length=_ctx_len(m))
    return Launch(argv=argv, env=server_env, base_url=f"http://{host}:{port}", backend=backend, model=model,
                  image=built.image)  # fmt: skip


def release_spec(ctx: RunContext, cell: Cell) -> EngineSpec:
    """The engine adapter with the start-up formats of this cell's release, read from its wheel (cached per
    version by the import stage, ``watch`` or ``engine-facts``; when not cached — an air-gapped runner, a
    custom command — the hand-kept patterns, which cover 0.5.9-0.5.23)."""
    from envbuilder.engines import facts

    spec = engines.engine(ctx.matrix.server.engine)
    version = cell.requirements().get(spec.package)
    known = facts.cached(spec.package, version, ctx.workspace.cache) if spec.wheel_facts and version else None
    if known is None:
        return spec
    derived: EngineSpec = facts.engine_spec(spec, known)
    return derived


def _ctx_len(m: Matrix) -> int | None:
    return m.model.context_length if m.model.context_length else None


@dataclass
class Running:
    """A started server as the checks see it."""

    outcome: LaunchOutcome
    client: EngineClient
    lines: list[str]  # every log line so far (kept up to date after ready)


@contextmanager
def started(ctx: RunContext, cell: Cell, launch: Launch, *, name: str,
            echo: Callable[[str], None] | None = None) -> Iterator[Running]:  # fmt: skip
    """Start a server, watch it to ready or failure, yield it; always tear down (even if the start fails)."""
    m = ctx.matrix
    spec = release_spec(ctx, cell)
    log_path = ctx.workspace.logs(cell.id) / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    client = EngineClient(launch.base_url, timeout_s=m.smoke.request_timeout_s)
    limits = WatchLimits(startup_timeout_s=ctx.options.startup_timeout_s or m.server.startup_timeout_s,
                         stall_timeout_s=ctx.options.stall_timeout_s or m.server.stall_timeout_s)  # fmt: skip
    runner_cm = launch.backend.serve(launch.argv, env=launch.env, base_url=launch.base_url, name=f"{cell.id}-{name}")
    with log_path.open("w") as log, runner_cm as handle:
        log.write("CMD " + " ".join(launch.argv) + "\n")
        lines: list[str] = []
        outcome = watch(handle.events, spec, log=log, echo=echo, ready_check=lambda: ready_probe(client),
                        http_only=not launch.backend.logs, limits=limits, sink=lines)  # fmt: skip
        stop = threading.Event()

        def drain() -> None:  # after ready the server keeps logging (decode lines, token usage)
            while not stop.is_set():
                try:
                    ev = handle.events.get(timeout=0.1)
                except queue.Empty:
                    continue
                if isinstance(ev, LogLine):
                    lines.append(ev.text)
                    log.write(ev.text + "\n")
                    if echo is not None:
                        echo(ev.text)

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        try:
            yield Running(outcome=outcome, client=client, lines=lines)
        finally:
            stop.set()
            t.join(2)


def needs_gpu(m: Matrix, cell: Cell) -> bool:
    return engines.engine(m.server.engine).needs_gpu and m.server.command is None and cell.cuda != NONE


class SmokeStage:
    """``smoke``: one server start per cell, the selected checks against it, teardown always."""

    name = "smoke"
    requires: tuple[str, ...] = ("resolve", "precheck", "build", "import")
    max_workers = 1  # one GPU job at a time; the server is started from this (main) thread

    def __init__(self, checks: tuple[str, ...] | None = None, echo: Callable[[str], None] | None = None) -> None:
        self.checks = checks
        self.echo = echo

    def selected(self, ctx: RunContext) -> tuple[str, ...]:
        return self.checks if self.checks is not None else ctx.matrix.smoke.checks

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        b = prior.stage("build")
        facts = {k: v for k, v in ctx.host_facts.key().items() if k in ("gpus", "driver")}
        return {"checks": list(self.selected(ctx)), "suite": SUITE_VERSION, "build": b.inputs if b else None,
                "model": asdict(ctx.matrix.model), "server": asdict(ctx.matrix.server),
                "smoke": asdict(ctx.matrix.smoke), "facts": facts, "base_url": ctx.options.base_url}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        return True

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        m = ctx.matrix
        if needs_gpu(m, cell) and not ctx.options.base_url and not ctx.host_facts.gpus:
            return StageResult(name=self.name, status=Status.SKIP, reason=Reason.NO_GPU,
                               message="no GPU on this machine: run the smoke stage on the GPU runner")  # fmt: skip
        launch = plan_launch(ctx, cell, prior)

        def reference() -> AbstractContextManager[Running]:  # the same cell without speculation, for smoke.spec
            plain = plan_launch(ctx, cell, prior, drop_args=engines.engine(m.server.engine).spec_flags)
            return started(ctx, cell, plain, name="reference")

        with started(ctx, cell, launch, name="server", echo=self.echo) as srv:
            outcome, client = srv.outcome, srv.client
            details: dict[str, Any] = {"launch": outcome.to_json(), "command": launch.argv, "runner": launch.backend.name,
                                       "base_url": launch.base_url,
                                       "log": str(ctx.workspace.logs(cell.id) / "server.log")}  # fmt: skip
            if not outcome.ready:
                return StageResult(name=self.name, status=outcome.status, reason=outcome.reason,
                                   message=outcome.message, details=details)  # fmt: skip
            phases = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.phases.items())
            checks = self.selected(ctx)
            if not checks:
                return StageResult(name=self.name, status=Status.PASS,
                                   message=f"ready in {outcome.ready_s:.1f} s ({phases}); no checks selected",
                                   details=details)  # fmt: skip
            return run_checks(ctx, reference, client, checks, details, srv.lines)


def parse_checks(text: str) -> tuple[str, ...]:
    """``--checks all|none|golden,spec,...``."""
    known = ("golden", "degeneracy", "spec", "speed", "long-context")
    if text == "all":
        return known
    if text == "none":
        return ()
    out = tuple(c.strip() for c in text.split(",") if c.strip())
    for c in out:
        if c not in known:
            raise InputError("command line", "--checks", f"unknown check {c!r}{did_you_mean(c, known)}")
    return out
