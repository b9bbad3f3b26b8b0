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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from envbuilder import engines, launchargs, memory, ports
from envbuilder.backends import Backend, ExternalBackend, LocalBackend, for_environment
from envbuilder.checks import finish_spec, run_checks, summarise
from envbuilder.client import EngineClient, ready_probe
from envbuilder.engines import EngineSpec
from envbuilder.errors import InputError, StageFailure, did_you_mean
from envbuilder.matrix import NONE, Cell, Matrix
from envbuilder.monitor import LaunchOutcome, LogLine, WatchLimits, watch
from envbuilder.pipeline import RunContext
from envbuilder.redact import redact
from envbuilder.results import CellResult, Reason, StageResult, Status

SUITE_VERSION = 2
PORT_ATTEMPTS = 3  # launches that die of envbuilder's own port choice are retried on another port


@dataclass(frozen=True, kw_only=True)
class Launch:
    """Everything needed to start one server of a cell."""

    argv: list[str]
    env: dict[str, str]
    base_url: str
    backend: Backend  # where it runs: this machine, the cell's image, or an external server
    model: str
    image: str | None = None
    port: int | None = None  # the port envbuilder picked (None: given by the user, or an external server)


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


def engine_version(ctx: RunContext, cell: Cell) -> str | None:
    return cell.requirements().get(engines.engine(ctx.matrix.server.engine).package)


def speculative(ctx: RunContext, cell: Cell, argv: list[str]) -> str | None:
    """The speculative algorithm the final launch argv turns on (any form argparse accepts), or None."""
    if engines.engine(ctx.matrix.server.engine).sglang_rules:
        return launchargs.speculative_algorithm(argv, launchargs.options_for(engine_version(ctx, cell)))
    flags = engines.engine(ctx.matrix.server.engine).spec_flags
    return "draft" if any(a.split("=", 1)[0] in flags for a in argv) else None


def without_speculation(ctx: RunContext, cell: Cell, argv: list[str]) -> list[str]:
    """The final launch argv with exactly its speculative-decoding flags dropped."""
    if engines.engine(ctx.matrix.server.engine).sglang_rules:
        return launchargs.without_speculation(argv, launchargs.options_for(engine_version(ctx, cell)))
    return engines.drop_flags(argv, lambda flag: flag in engines.engine(ctx.matrix.server.engine).spec_flags)


def plan_launch(ctx: RunContext, cell: Cell, prior: CellResult, *, extra_args: tuple[str, ...] = (),
                drop_args: tuple[str, ...] = (), no_speculation: bool = False,
                avoid_ports: tuple[int, ...] = ()) -> Launch:  # fmt: skip
    """How this cell's server is started (custom command, external, venv or image).

    ``no_speculation``: the final argv (custom command and args alike) without its speculative flags.
    The port is one whose derived ports (per engine release) are valid and free, unless ``[server] port``.
    """
    launch = _plan_launch(ctx, cell, prior, extra_args=extra_args, drop_args=drop_args, avoid_ports=avoid_ports)
    if no_speculation and launch.argv:
        launch = replace(launch, argv=without_speculation(ctx, cell, launch.argv))
    return launch


def _pick_port(ctx: RunContext, cell: Cell, avoid: tuple[int, ...]) -> int:
    m = ctx.matrix
    derived = ports.offsets(m.server.engine, engine_version(ctx, cell), [*(m.server.command or ()), *m.server.args])
    return ports.pick(m.server.host, derived, avoid=avoid)


def _plan_launch(ctx: RunContext, cell: Cell, prior: CellResult, *, extra_args: tuple[str, ...],
                 drop_args: tuple[str, ...], avoid_ports: tuple[int, ...]) -> Launch:  # fmt: skip
    m = ctx.matrix
    spec = release_spec(ctx, cell)  # the release's own flag spellings when its wheel was read
    host = m.server.host
    base_url = ctx.options.base_url or (m.server.base_url if m.server.command is None else None)
    env = {**os.environ, **m.server.env}
    if base_url:
        return Launch(argv=[], env=env, base_url=str(base_url), backend=ExternalBackend(), model=m.model.path)
    picked = None if m.server.port else _pick_port(ctx, cell, avoid_ports)
    port = m.server.port or picked or 0
    run_dir = ctx.workspace.root / "run"
    user_args = engines.drop_flags(m.server.args, lambda flag: flag in drop_args) + list(extra_args)
    if m.server.command is not None:  # [server] args are appended to a custom command
        model = resolve_model_path(m, python_runner(sys.executable))
        argv = [a.format(host=host, port=port, model=model) for a in m.server.command] + user_args
        return Launch(argv=argv, env=env, base_url=m.server.base_url or f"http://{host}:{port}",
                      backend=LocalBackend(python=sys.executable, run_dir=run_dir), model=model, port=picked)  # fmt: skip
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
                  image=built.image, port=picked)  # fmt: skip


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
    argv: list[str]  # the command launched


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
        log.write(redact("CMD " + " ".join(launch.argv)) + "\n")
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
                    log.write(redact(ev.text) + "\n")
                    if echo is not None:
                        echo(ev.text)

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        try:
            yield Running(outcome=outcome, client=client, lines=lines, argv=list(launch.argv))
        finally:
            stop.set()
            t.join(2)


def port_failure(srv: Running) -> bool:
    """Whether the start failed because of the port envbuilder picked (another port would start)."""
    return ports.is_env_failure(srv.outcome.message) or any(ports.is_env_failure(ln) for ln in srv.lines[-200:])


@contextmanager
def started_retrying(ctx: RunContext, cell: Cell, prior: CellResult, *, name: str, no_speculation: bool = False,
                     echo: Callable[[str], None] | None = None) -> Iterator[tuple[Launch, Running]]:  # fmt: skip
    """:func:`started` on a port envbuilder picks; a start that dies of that port (taken, or a derived port out
    of range) is retried on another one, up to ``PORT_ATTEMPTS`` times. Yields exactly once."""
    avoid: list[int] = []
    for attempt in range(PORT_ATTEMPTS):
        launch = plan_launch(ctx, cell, prior, no_speculation=no_speculation, avoid_ports=tuple(avoid))
        with started(ctx, cell, launch, name=name, echo=echo) as srv:
            retry = (not srv.outcome.ready and launch.port is not None and port_failure(srv)
                     and attempt + 1 < PORT_ATTEMPTS)  # fmt: skip
            if not retry:
                yield launch, srv
                return
        avoid.append(launch.port or 0)


@contextmanager
def _reference(ctx: RunContext, cell: Cell, prior: CellResult) -> Iterator[Running]:
    with started_retrying(ctx, cell, prior, name="reference", no_speculation=True) as (_, srv):
        yield srv


def kv_comparison(ctx: RunContext, cell: Cell, launch: Launch, outcome: LaunchOutcome) -> dict[str, Any] | None:
    """Predicted (SGLang's sizing, rules/sglang_memory.toml) vs logged ``max_total_num_tokens`` for this launch."""
    if not engines.engine(ctx.matrix.server.engine).sglang_rules or not launch.argv:
        return None
    logged = next((int(m.values["tokens"]) for m in outcome.milestones if m.name == "max_tokens"), None)
    if logged is None:
        logged = next((int(m.values["tokens"]) for m in outcome.milestones if m.name == "kv_cache"), None)
    try:
        plan = memory.predict_for_cell(ctx.matrix, cell, ctx.host_facts, launch.argv, model_path=launch.model)
    except (InputError, memory.BadLaunchFlag) as e:
        plan = str(e)
    if isinstance(plan, str):
        return {"predicted": None, "logged": logged, "why_no_prediction": plan}
    return memory.KvComparison.of(plan, logged).to_json()


def with_kv_note(result: StageResult) -> StageResult:
    """A prediction more than 15 % off SGLang's logged KV tokens is a note in the stage's message."""
    kv = result.details.get("kv_tokens") or {}
    if kv.get("within_tolerance") is not False:
        return result
    note = (f"note: KV tokens predicted {kv['predicted']} vs logged {kv['logged']} ({kv['off']:+.0%}, more than "
            f"{kv['tolerance']:.0%} off)")
    return replace(result, message=f"{result.message}; {note}")


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
                "smoke": asdict(ctx.matrix.smoke), "facts": facts, "base_url": ctx.options.base_url,
                "memory_rules": memory.rules()["version"]}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        return True

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        m = ctx.matrix
        if needs_gpu(m, cell) and not ctx.options.base_url and not ctx.host_facts.gpus:
            return StageResult(name=self.name, status=Status.SKIP, reason=Reason.NO_GPU,
                               message="no GPU on this machine: run the smoke stage on the GPU runner")  # fmt: skip
        pending = None
        with started_retrying(ctx, cell, prior, name="server", echo=self.echo) as (launch, srv):
            outcome, client = srv.outcome, srv.client
            details: dict[str, Any] = {"launch": outcome.to_json(), "command": launch.argv, "runner": launch.backend.name,
                                       "base_url": launch.base_url,
                                       "log": str(ctx.workspace.logs(cell.id) / "server.log")}  # fmt: skip
            kv = kv_comparison(ctx, cell, launch, outcome)
            if kv is not None:
                details["kv_tokens"] = kv
            if not outcome.ready:
                if launch.port is not None and port_failure(srv):  # envbuilder's environment, not the cell
                    return StageResult(name=self.name, status=Status.ERROR, reason=Reason.INTERNAL_ERROR,
                                       message=f"no port envbuilder picked let the server start ({PORT_ATTEMPTS} "
                                               f"tries): {outcome.message}", details=details)  # fmt: skip
                return StageResult(name=self.name, status=outcome.status, reason=outcome.reason,
                                   message=outcome.message, details=details)  # fmt: skip
            phases = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.phases.items())
            checks = self.selected(ctx)
            if not checks:
                return StageResult(name=self.name, status=Status.PASS,
                                   message=f"ready in {outcome.ready_s:.1f} s ({phases}); no checks selected",
                                   details=details)  # fmt: skip
            algorithm = speculative(ctx, cell, launch.argv) if launch.argv else None
            if not launch.argv and algorithm is None:  # an external server: what [server] args say
                algorithm = speculative(ctx, cell, list(m.server.args))
            run = run_checks(ctx, client, checks, srv.lines, speculative=algorithm)
            pending = run.pending_spec
        if pending is not None:  # the first server has stopped: now the reference launch
            t = time.monotonic()
            r = finish_spec(ctx, pending, lambda: _reference(ctx, cell, prior))
            run.results.insert(run.spec_position, replace(r, duration_s=time.monotonic() - t))
        return with_kv_note(summarise(run.results, details))


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
