"""Air-gapped GPU runners: wheelhouse (a cell's locked wheels), bisect (which newer package broke a cell)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from envbuilder import atomic, bisect, errors, lock, validate, wheelhouse
from envbuilder.cli.options import (
    Command,
    one_cell,
)
from envbuilder.cli.ui import Ui
from envbuilder.errors import StageFailure
from envbuilder.pipeline import RunContext, Workspace, run_pipeline
from envbuilder.resolve import ResolveStage
from envbuilder.results import Status


def _configure_wheelhouse(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="the cell (an id or a filter matching one cell)")
    p.add_argument("dir", type=Path, help="where the wheels go")
    p.add_argument("--exclude-from", type=Path, help="a `pip freeze` of the target: packages it has are left out")
    p.add_argument("--lock", type=Path, help="use this pylock.toml instead of the cell's (e.g. its fresh lock)")


def cmd_wheelhouse(args: argparse.Namespace, ui: Ui) -> int:
    _m, cell = one_cell(args)
    lock_path = args.lock or Workspace(args.workdir).locks(cell.id) / "pylock.toml"
    if not lock_path.exists():
        raise errors.InputError(str(lock_path), None, "no lock: run `envbuilder resolve` first")
    exclude = wheelhouse.read_freeze(args.exclude_from) if args.exclude_from else None
    got = wheelhouse.fetch(lock_path, args.dir, exclude=exclude, python=cell.python,
                           progress=lambda name, size: ui.err.print(f"  {name} ({size / 2**20:.1f} MiB)"))  # fmt: skip
    summary = {"dir": str(args.dir), "files": len(got.files), "bytes": got.bytes, "skipped": got.skipped}
    if ui.json:
        ui.print_json(summary)
    else:
        ui.out.print(f"{len(got.files)} files, {got.bytes / 2**20:.1f} MiB in {args.dir}; "
                     f"{len(got.skipped)} left out (already in the freeze)")  # fmt: skip
    return errors.EXIT_OK


def _configure_bisect(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="the cell (an id or a filter matching one cell)")
    p.add_argument("--test", metavar="CMD", help="shell command run in each trial's venv, exit 0 = good "
                                                 "(default: the import smoke of the cell's key modules)")  # fmt: skip
    p.add_argument("--find-links", action="append", metavar="DIR",
                   help="resolve and install only from these wheel folders (offline: no index)")  # fmt: skip
    p.add_argument("--provided", type=Path, metavar="FREEZE",
                   help="packages the interpreter already has (a `pip freeze`): kept out of resolution, used as is")  # fmt: skip
    p.add_argument("--python", help="the interpreter trial venvs are made from (default: the cell's python)")
    p.add_argument("--good", type=Path, metavar="LOCK", help="the lock that passes (default: the cell's as-of lock)")
    p.add_argument("--bad", type=Path, metavar="LOCK",
                   help="the lock that fails (default: the fresh lock `resolve --drift` wrote)")  # fmt: skip
    p.add_argument("--jobs", type=validate.int_arg(1), default=2, help="trials run at once (default: 2)")


def cmd_bisect(args: argparse.Namespace, ui: Ui) -> int:
    """Name the package(s) whose newer version breaks the cell, and the constraint that fixes it."""
    m, cell = one_cell(args)
    ws = Workspace(args.workdir)
    good = args.good or ws.locks(cell.id) / "pylock.toml"
    bad = args.bad or ws.locks(cell.id) / "fresh" / "pylock.toml"
    for flag, path in (("--good", args.good), ("--bad", args.bad)):
        if path is not None and not path.exists():
            raise errors.InputError("command line", flag, f"{path} does not exist")
    if not (good.exists() and bad.exists()):
        if args.find_links:
            raise errors.InputError("command line", "--find-links", f"offline bisection needs both locks in "
                                    f"{ws.locks(cell.id)}: run `envbuilder resolve --drift` where the index is reachable")  # fmt: skip
        ui.err.print(f"resolving {cell.id} as of its release and as of today (resolve --drift)")
        (res,) = run_pipeline(RunContext(matrix=m, workspace=ws), [cell], [ResolveStage(drift=True)])
        s = res.stage("resolve")
        if s is None or s.status is not Status.PASS or not bad.exists():
            ui.err.print(f"[red]cannot bisect:[/] resolve ended {s.status if s else '?'}: {escape(s.message if s else '')}")
            return errors.EXIT_CELLS_FAILED
    as_of, fresh = lock.read(good).versions(), lock.read(bad).versions()
    box = bisect.sandbox_for(m, cell, ws.root / "bisect" / cell.id, as_of, python=args.python,
                             find_links=args.find_links, provided=args.provided, test_command=args.test)  # fmt: skip

    def on_trial(t: bisect.Trial) -> None:
        if ui.json:
            return
        style = {"good": "green", "bad": "red", "unresolved": "yellow"}[t.outcome.value]
        ui.err.print(f"[{style}]{t.outcome.value:10}[/] {t.seconds:6.1f}s  {escape(t.describe())}"
                     f" — {escape(t.message[:160])}")  # fmt: skip

    out = ws.root / "bisect" / cell.id / "bisect.json"
    ui.err.print(f"bisecting {cell.id}: {len(bisect.drifted(as_of, fresh, box.provided))} drifted packages, "
                 f"test `{escape(box.describe_test())}`")  # fmt: skip
    try:
        result = bisect.bisect(cell.id, box, as_of, fresh, jobs=args.jobs, on_trial=on_trial)
    except StageFailure as e:
        if "bisection" in e.details:
            atomic.write_json(out, {**e.details["bisection"], "verdict": e.message})
        ui.err.print(f"[red]cannot bisect:[/] {escape(e.message)}")
        return errors.EXIT_CELLS_FAILED
    atomic.write_json(out, result.to_json())
    if ui.json:
        ui.print_json(result.to_json())
    else:
        ui.out.print(escape(result.verdict))
        if result.fix:
            state = {True: "verified: today's resolution with it passes", False: "today's resolution still fails with it",
                     None: "not verified"}[result.verified]  # fmt: skip
            ui.out.print(escape(f"fix: add to [resolve] constraints: {', '.join(repr(f) for f in result.fix)}  ({state})"))
        ui.out.print(f"{len(result.trials)} trials in {result.seconds:.0f} s; details in {out}")
    return errors.EXIT_OK if result.decided else errors.EXIT_CELLS_FAILED


COMMANDS = {
    "wheelhouse": Command("download a cell's locked wheels (hash-checked) for an air-gapped runner", _configure_wheelhouse, cmd_wheelhouse),
    "bisect": Command("name the package whose newer version breaks a cell (and the constraint that fixes it)", _configure_bisect, cmd_bisect),
}
