"""What several commands share: cell filters, the run options, running stages over the selected cells."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder import doctor, errors, validate
from envbuilder import matrix as matrix_mod
from envbuilder.artifacts import HostFacts
from envbuilder.cli.ui import Ui, exit_code, progress, results_table
from envbuilder.pipeline import RunContext, RunOptions, Stage, Workspace, run_pipeline
from envbuilder.results import CellResult

Handler = Callable[[argparse.Namespace, Ui], int]


@dataclass(frozen=True)
class Command:
    """A sub-command: its help line, how it adds its arguments, and what runs it."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    handler: Handler


def add_cells(p: argparse.ArgumentParser) -> None:
    p.add_argument("cells", nargs="*", metavar="CELL",
                   help="cell filters: a glob on the cell id or axis=value[,axis=value]")  # fmt: skip


def run_stages(args: argparse.Namespace, ui: Ui, stages: Sequence[Stage], options: RunOptions | None = None) -> int:
    """Shared by every command that runs stages: select cells, run, print, exit 0/1."""
    m = matrix_mod.load(args.matrix)
    cells = matrix_mod.select(m.cells(), args.cells)
    host_facts = read_host_facts(args)
    force = set(getattr(args, "force_stage", None) or [])
    if getattr(args, "force", False):
        force |= {s.name for s in stages}
    ctx = RunContext(matrix=m, workspace=Workspace(args.workdir), host_facts=host_facts,
                     force_stages=frozenset(force), options=options or RunOptions(), events=progress(ui))  # fmt: skip
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


def read_host_facts(args: argparse.Namespace) -> HostFacts:
    """``--host-facts FILE`` when given, else this machine's own facts (probed live, never raising)."""
    path: Path | None = getattr(args, "host_facts", None)
    if path is not None:
        return HostFacts.from_json(doctor.load_facts(path))
    if not hasattr(args, "host_facts"):
        return HostFacts()
    return HostFacts.from_json(doctor.collect())


def stage_options(args: argparse.Namespace) -> RunOptions:
    """Per-run options the stages read from ``RunContext.options``."""
    return RunOptions(base_image=getattr(args, "base_image", None), base_url=getattr(args, "base_url", None),
                      startup_timeout_s=getattr(args, "startup_timeout_s", None),
                      stall_timeout_s=getattr(args, "stall_timeout_s", None), no_cache=bool(getattr(args, "no_cache", None)),
                      find_links=tuple(getattr(args, "find_links", None) or ()), provided=getattr(args, "provided", None),
                      python=getattr(args, "python", None))  # fmt: skip


def add_run_options(p: argparse.ArgumentParser, *, smoke: bool = True) -> None:
    """Options shared by `run`, `build`, `smoke`."""
    p.add_argument("--host-facts", type=Path, help="runner facts from `envbuilder doctor --json` (default: probe here)")
    p.add_argument("--force", action="store_true", help="re-run every stage even when its inputs are unchanged")
    p.add_argument("--force-stage", action="append", metavar="STAGE", help="re-run this stage (repeatable)")
    p.add_argument("--runner", choices=["docker", "venv"], help="override [build] runner")
    p.add_argument("--base-image", type=_image_arg, help="override [build] base_image")
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
        p.add_argument("--startup-timeout", dest="startup_timeout_s", type=validate.positive_float_arg,
                       help="seconds until not ready = failure")  # fmt: skip
        p.add_argument("--stall-timeout", dest="stall_timeout_s", type=validate.positive_float_arg,
                       help="seconds without log output = stall")  # fmt: skip


def _image_arg(text: str) -> str:
    try:
        return validate.image_reference(text, "command line", "--base-image")
    except errors.InputError as e:
        raise argparse.ArgumentTypeError(e.problem) from None


def load_results(args: argparse.Namespace) -> list[CellResult]:
    """The stored results of the selected cells (every stored result when the matrix is absent)."""
    store = Workspace(args.workdir).results
    if args.matrix.exists():

        cells = matrix_mod.select(matrix_mod.load(args.matrix).cells(), args.cells)
        return [r for r in (store.load(c.id) for c in cells) if r is not None]
    return store.all()


def one_cell(args: argparse.Namespace) -> tuple[Any, Any]:
    m = matrix_mod.load(args.matrix)
    cells = matrix_mod.select(m.cells(), [args.cell])
    if len(cells) != 1:
        raise errors.InputError("command line", args.cell, f"matches {len(cells)} cells; name exactly one")
    return m, cells[0]
