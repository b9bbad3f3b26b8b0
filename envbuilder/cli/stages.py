"""`expand` and the stage commands: resolve, doctor, precheck, build, smoke, run, gc."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from envbuilder import atomic, doctor, errors, validate
from envbuilder import matrix as matrix_mod
from envbuilder.build import BuildStage
from envbuilder.cli.options import (
    Command,
    add_cells,
    add_run_options,
    run_stages,
    stage_options,
)
from envbuilder.cli.ui import Ui
from envbuilder.importcheck import ImportStage
from envbuilder.pipeline import Stage, Workspace
from envbuilder.precheck import PrecheckStage
from envbuilder.resolve import ResolveStage
from envbuilder.runners import gc
from envbuilder.runners.docker import gc_containers
from envbuilder.smoke import SmokeStage, parse_checks
from envbuilder.stages import all_stages


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


def _configure_resolve(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    p.add_argument("--drift", action="store_true", help="also resolve against today and list what differs")
    p.add_argument("--jobs", type=validate.int_arg(0), default=0, help="cells resolved at once (default: cores x 2)")
    p.add_argument("--force", action="store_true", help="re-resolve even when the inputs are unchanged")


def cmd_resolve(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(drift=args.drift, jobs=args.jobs)])


def _configure_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save", type=Path, help="also write the facts to this file (default: <workdir>/doctor.json)")


def cmd_doctor(args: argparse.Namespace, ui: Ui) -> int:
    save = validate.output_file(args.save, "--save") if args.save else args.workdir / "doctor.json"
    facts = doctor.collect()
    try:
        atomic.write_json(save, facts)
    except OSError as e:
        raise errors.InputError(str(save), "--save" if args.save else "--workdir",
                                f"cannot write ({e.strerror or e})") from None
    if ui.json:
        ui.print_json(facts)
        return errors.EXIT_OK
    t = Table(title="runner facts", show_header=False)
    drv = facts["driver"]
    gpus = facts["gpus"]
    rows = [
        ("GPUs", "; ".join(f"{g['index']}: {g['name']}, {g['memory_mib']} MiB, sm {g['compute_capability']}"
                           for g in gpus) or "none"),
        ("kernel module", f"{drv.get('kernel_module', 'unknown')} ({drv.get('kernel_module_flavor', '-')})"),
        ("userspace", ", ".join(drv.get("userspace_versions", [])) or "unknown"),
        ("CUDA (driver)", drv.get("cuda_supported", "unknown")),
        ("glibc", facts.get("glibc") or "unknown"),
        ("OS", facts.get("os", {}).get("pretty_name", "unknown")),
        ("Docker", "yes" + (" (nvidia runtime)" if facts["docker"].get("nvidia_runtime") else "")
         if facts["docker"].get("available") else "no"),
    ]  # fmt: skip
    for k, v in rows:
        t.add_row(k, escape(str(v)))
    for k, why in facts["unknown"].items():
        t.add_row(f"[dim]{k}[/]", f"[dim]unknown: {escape(why)}[/]")
    ui.out.print(t)
    return errors.EXIT_OK


def _configure_precheck(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    p.add_argument("--host-facts", type=Path, help="runner facts from `envbuilder doctor --json` (default: probe here)")
    p.add_argument("--force", action="store_true", help="re-run even when the inputs are unchanged")


def cmd_precheck(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(), PrecheckStage()])


def _configure_build(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    add_run_options(p, smoke=False)


def cmd_build(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(), BuildStage(runner=args.runner), ImportStage()], stage_options(args))


def _configure_smoke(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    add_run_options(p)


def cmd_smoke(args: argparse.Namespace, ui: Ui) -> int:
    checks = parse_checks(args.checks) if args.checks else None
    echo = (lambda line: ui.err.print(escape(line), style="dim", soft_wrap=True)) if args.verbose else None

    m = matrix_mod.load(args.matrix)
    if m.server.command is not None or args.base_url or m.server.base_url:
        # the server is started by a custom command or already runs: no environment to resolve or build
        stages: list[Stage] = [PrecheckStage(), SmokeStage(checks=checks, echo=echo)]
    else:
        stages = [ResolveStage(), PrecheckStage(), BuildStage(runner=args.runner), ImportStage(),
                  SmokeStage(checks=checks, echo=echo)]  # fmt: skip

    gc(Workspace(args.workdir).root / "run")  # servers a killed run left behind
    return run_stages(args, ui, stages, stage_options(args))


def _configure_run(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    add_run_options(p)


def cmd_run(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, all_stages(args), stage_options(args))


def _configure_gc(p: argparse.ArgumentParser) -> None:
    """`gc` takes no arguments of its own."""


def cmd_gc(args: argparse.Namespace, ui: Ui) -> int:
    removed = gc(Workspace(args.workdir).root / "run") + gc_containers()
    if ui.json:
        ui.print_json({"removed": removed})
    else:
        ui.out.print("\n".join(removed) if removed else "nothing left running")
    return errors.EXIT_OK


COMMANDS = {
    "expand": Command("list the cells of the matrix", add_cells, cmd_expand),
    "resolve": Command("lock every selected cell with uv (pylock.toml)", _configure_resolve, cmd_resolve),
    "doctor": Command("capture this runner's facts (GPUs, driver, CUDA, glibc, OS, Docker)", _configure_doctor, cmd_doctor),
    "precheck": Command("check every selected cell against the runner's NVIDIA stack", _configure_precheck, cmd_precheck),
    "build": Command("build each selected cell's environment (Docker image or venv) and import-smoke it", _configure_build, cmd_build),
    "smoke": Command("start each selected cell's engine and run the smoke checks (--checks none: start and stop)", _configure_smoke, cmd_smoke),
    "run": Command("run every stage for the selected cells (what `nox -s matrix` calls)", _configure_run, cmd_run),
    "gc": Command("stop servers and remove containers a killed run left behind", _configure_gc, cmd_gc),
}
