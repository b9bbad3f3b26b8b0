"""The command line. It owns all output; the library below it never prints.

Exit codes: 0 every selected cell passed or was skipped as not applicable here, 1 some cell failed
or could not be decided, 2 usage or input error (one line naming the file and key).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console, RenderableType
from rich.constrain import Constrain
from rich.markup import escape
from rich.table import Table

from envbuilder import __version__, errors
from envbuilder import matrix as matrix_mod
from envbuilder.errors import EnvbuilderError, InputError
from envbuilder.pipeline import RunContext, Stage, StageEvent, Workspace, run_pipeline
from envbuilder.results import CellResult, Status

STATUS_STYLE = {"pass": "green", "fail": "red", "error": "magenta", "skip": "yellow"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit 2 (never a traceback)."""

    def error(self, message: str) -> NoReturn:
        raise InputError("command line", None, f"{message} (see `{self.prog} --help`)")


def _in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


@dataclass(frozen=True)
class Ui:
    """Where the CLI writes: results to stdout, progress and messages to stderr."""

    out: Console
    err: Console
    json: bool
    verbose: bool

    def group(self, title: str) -> None:
        """Open a fold in CI logs (GitHub Actions ``::group::``); nothing elsewhere."""
        if _in_github_actions():
            print(f"::group::{title}", file=sys.stderr, flush=True)

    def endgroup(self) -> None:
        if _in_github_actions():
            print("::endgroup::", file=sys.stderr, flush=True)

    def print_json(self, obj: Any) -> None:
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")
        sys.stdout.flush()


def _consoles(json_mode: bool) -> tuple[Console, Console]:
    # rich honours NO_COLOR and drops styling when the stream is not a terminal.
    width = None if sys.stdout.isatty() else 200
    return (Console(soft_wrap=json_mode, highlight=False, width=width),
            Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200))  # fmt: skip


def _common(suppress: bool) -> _Parser:
    """Global options, accepted before and after the sub-command (sub-parsers must not reset them)."""
    d: Callable[[Any], Any] = (lambda _v: argparse.SUPPRESS) if suppress else (lambda v: v)
    c = _Parser(add_help=False)
    c.add_argument("--matrix", type=Path, default=d(Path("matrix.toml")), help="matrix file (default: ./matrix.toml)")
    c.add_argument("--workdir", type=Path, default=d(Path(".envbuilder")), help="work folder (default: .envbuilder/)")
    c.add_argument("--json", action="store_true", default=d(False), help="print results as JSON")
    c.add_argument("-v", "--verbose", action="store_true", default=d(False), help="stream logs live")
    return c


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="envbuilder", description=__doc__, parents=[_common(False)],
                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--version", action="version", version=f"envbuilder {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub_common = _common(True)
    for name, (help_text, configure, _handler) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text, parents=[sub_common])
        configure(sp)
    return p


def _add_cells(p: argparse.ArgumentParser) -> None:
    p.add_argument("cells", nargs="*", metavar="CELL",
                   help="cell filters: a glob on the cell id or axis=value[,axis=value]")  # fmt: skip


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def cmd_expand(args: argparse.Namespace, ui: Ui) -> int:
    m = matrix_mod.load(args.matrix)
    cells = matrix_mod.select(m.cells(), args.cells)
    if ui.json:
        ui.print_json([{"id": c.id, "axes": c.axes, "hash": c.hash} for c in cells])
        return errors.EXIT_OK
    t = Table(title=f"{len(cells)} cell(s) from {args.matrix}")
    t.add_column("cell id", no_wrap=True)
    for axis in cells[0].axes if cells else []:
        t.add_column(axis)
    for c in cells:
        t.add_row(c.id, *c.axes.values())
    ui.out.print(t)
    return errors.EXIT_OK


def run_stages(args: argparse.Namespace, ui: Ui, stages: Sequence[Stage], **options: Any) -> int:
    """Shared by every command that runs stages: select cells, run, print, exit 0/1."""
    m = matrix_mod.load(args.matrix)
    cells = matrix_mod.select(m.cells(), args.cells)
    host_facts = _host_facts(args)
    force = set(getattr(args, "force_stage", None) or [])
    if getattr(args, "force", False):
        force |= {s.name for s in stages}
    ctx = RunContext(matrix=m, workspace=Workspace(args.workdir), host_facts=host_facts,
                     force_stages=frozenset(force), options=options, events=_progress(ui))  # fmt: skip
    try:
        results = run_pipeline(ctx, cells, stages)
    finally:
        ui.endgroup()  # closes the last stage's fold (a no-op outside CI)
    names = [s.name for s in stages]
    if ui.json:
        ui.print_json([r.to_json() for r in results])
    else:
        ui.out.print(results_table(results, names))
    return exit_code(results, names)


def exit_code(results: Sequence[CellResult], stage_names: Sequence[str]) -> int:
    bad = any(s.status in (Status.FAIL, Status.ERROR) for r in results for s in r.stages if s.name in stage_names)
    return errors.EXIT_CELLS_FAILED if bad else errors.EXIT_OK


def results_table(results: Sequence[CellResult], stage_names: Sequence[str]) -> RenderableType:
    """The matrix view of what these stages decided (their checks included), within 120 columns."""
    from envbuilder.report import grid, terminal

    ran = [r.without_stages({s.name for s in r.stages if s.name.split(".")[0] not in stage_names}) for r in results]
    return Constrain(terminal.render(ran, grid.build(ran)), width=terminal.WIDTH)


def _progress(ui: Ui) -> Callable[[StageEvent], None]:
    folded: list[str] = []  # the stage whose lines the CI log folds now (stages run one after another)

    def on_event(ev: StageEvent) -> None:
        if ev.result is None:
            if folded[-1:] != [ev.stage]:
                if folded:
                    ui.endgroup()
                folded.append(ev.stage)
                ui.group(f"envbuilder {ev.stage}")
            return
        if ui.json:
            return
        r = ev.result
        style = STATUS_STYLE[r.status.value]
        cached = " (cached)" if ev.cached else ""
        msg = f" — {escape(r.message)}" if r.message and r.status is not Status.PASS else ""
        ui.err.print(f"[{style}]{r.status.value:5}[/] {r.name:9} {ev.cell_id} {r.duration_s:6.1f}s{cached}{msg}")

    return on_event


def _host_facts(args: argparse.Namespace) -> dict[str, Any]:
    """``--host-facts FILE`` when given, else this machine's own facts (probed live, never raising)."""
    from envbuilder import doctor

    path: Path | None = getattr(args, "host_facts", None)
    if path is not None:
        return doctor.load_facts(path)
    if not hasattr(args, "host_facts"):
        return {}
    return doctor.collect()


def cmd_run(args: argparse.Namespace, ui: Ui) -> int:
    from envbuilder.stages import all_stages

    return run_stages(args, ui, all_stages(args), **stage_options(args))


def stage_options(args: argparse.Namespace) -> dict[str, Any]:
    """Per-run options the stages read from ``RunContext.options``."""
    opts: dict[str, Any] = {}
    for name in ("base_image", "base_url", "startup_timeout_s", "stall_timeout_s", "no_cache", "find_links",
                 "provided", "python"):
        value = getattr(args, name, None)
        if value is not None:
            opts[name] = value
    return opts


def add_run_options(p: argparse.ArgumentParser, *, smoke: bool = True) -> None:
    """Options shared by `run`, `build`, `smoke`."""
    p.add_argument("--host-facts", type=Path, help="runner facts from `envbuilder doctor --json` (default: probe here)")
    p.add_argument("--force", action="store_true", help="re-run every stage even when its inputs are unchanged")
    p.add_argument("--force-stage", action="append", metavar="STAGE", help="re-run this stage (repeatable)")
    p.add_argument("--runner", choices=["docker", "venv"], help="override [build] runner")
    p.add_argument("--base-image", help="override [build] base_image")
    p.add_argument("--no-cache", action="store_true", default=None, help="build images without Docker's layer cache")
    p.add_argument("--find-links", action="append", metavar="DIR",
                   help="venv runner: install only from these wheel folders, no index (an air-gapped runner)")
    p.add_argument("--provided", metavar="FREEZE",
                   help="venv runner: packages this interpreter already has (a `pip freeze`): used, not installed")
    p.add_argument("--python", help="venv runner: the interpreter venvs are made from (default: the cell's python)")
    if smoke:
        p.add_argument("--checks", help="smoke checks: all (default), none, or a list: golden,degeneracy,spec,speed,"
                                        "long-context")  # fmt: skip
        p.add_argument("--base-url", help="check a server that is already running (external runner)")
        p.add_argument("--startup-timeout", dest="startup_timeout_s", type=float, help="seconds until not ready = failure")
        p.add_argument("--stall-timeout", dest="stall_timeout_s", type=float, help="seconds without log output = stall")


def _configure_run(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    add_run_options(p)


Handler = Callable[[argparse.Namespace, Ui], int]
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {
    "expand": ("list the cells of the matrix", _add_cells, cmd_expand),
    "run": ("run every stage for the selected cells (what `nox -s matrix` calls)", _configure_run, cmd_run),
}


def register(name: str, help_text: str, configure: Callable[[argparse.ArgumentParser], None],
             handler: Handler) -> None:  # fmt: skip
    """Add a sub-command (used by the stage modules' CLI glue in :mod:`envbuilder.commands`)."""
    COMMANDS[name] = (help_text, configure, handler)


def main(argv: Sequence[str] | None = None) -> int:
    from envbuilder import commands  # noqa: F401  (registers the stage commands)

    json_mode = "--json" in (argv if argv is not None else sys.argv[1:])
    out, err = _consoles(json_mode)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return errors.EXIT_INPUT
        ui = Ui(out=out, err=err, json=args.json, verbose=args.verbose)
        handler = COMMANDS[args.command][2]
        return handler(args, ui)
    except EnvbuilderError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except BrokenPipeError:  # `envbuilder ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return errors.EXIT_OK
