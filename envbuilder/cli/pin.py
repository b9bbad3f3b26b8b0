"""The production pin and the upgrade watch: pin, watch."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from rich.markup import escape

from envbuilder import errors, lock, pin, watch
from envbuilder import matrix as matrix_mod
from envbuilder.cli.options import (
    Command,
    add_run_options,
    one_cell,
    read_host_facts,
    stage_options,
)
from envbuilder.cli.ui import Ui
from envbuilder.pipeline import RunContext, Workspace, run_pipeline
from envbuilder.resolve import engine_package
from envbuilder.stages import all_stages


def _configure_pin(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", nargs="?", help="the cell to pin (an id or filter matching one cell)")
    p.add_argument("--force", action="store_true", help="pin a cell that did not pass every stage (recorded)")
    p.add_argument("--check", action="store_true", help="exit 1 if the pin no longer matches a fresh as-of resolution")


def cmd_pin(args: argparse.Namespace, ui: Ui) -> int:
    ws = Workspace(args.workdir)
    if args.check:
        prov = pin.read_provenance(ws)
        m = matrix_mod.load(args.matrix)
        ctx = RunContext(matrix=m, workspace=ws)
        diff = pin.check_pin(ctx, pin.pinned_cell(m, prov))
        if ui.json:
            ui.print_json({"cell": prov["cell"], "matches": not diff, "diff": diff})
        elif diff:
            ui.out.print(f"the production pin ({prov['cell']}) no longer matches its as-of resolution:")
            for d in diff:
                ui.out.print(f"  {d['name']}: {d['old']} -> {d['new']}")
        else:
            ui.out.print(f"the production pin ({prov['cell']}) matches its as-of resolution")
        return errors.EXIT_CELLS_FAILED if diff else errors.EXIT_OK
    if not args.cell:
        raise errors.InputError("command line", None, "name the cell to pin (or use --check)")
    _m, cell = one_cell(args)
    result = ws.results.load(cell.id)
    if result is None:
        raise errors.InputError(str(ws.results.path(cell.id)), None, "no results: run the cell first")
    prov = pin.write_pin(ws, cell, result, force=args.force)
    if ui.json:
        ui.print_json(prov)
    else:
        forced = " (forced: " + ", ".join(prov["not_passed"]) + ")" if prov["forced"] else ""
        ui.out.print(f"pinned {prov['cell']} -> {pin.production_dir(ws)}/pylock.toml{forced}")
    return errors.EXIT_OK


def _configure_watch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="only list the candidate releases")
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    add_run_options(p)


def cmd_watch(args: argparse.Namespace, ui: Ui) -> int:
    ws = Workspace(args.workdir)
    prov = pin.read_provenance(ws)
    m = matrix_mod.load(args.matrix)
    pinned = pin.pinned_cell(m, prov)
    package = engine_package(m, pinned)
    cands = watch.candidates(m, ws, pinned, package, include_prereleases=args.pre)
    if args.dry_run or not cands:
        rows = [{"cell": c.id, package: dict(c.packages)[next(a for a, _ in c.packages if a.replace('_', '-') == package)],
                 "uploaded": when} for c, when in cands]  # fmt: skip
        if ui.json:
            ui.print_json({"pinned": prov["cell"], "candidates": rows})
        else:
            ui.out.print(f"pinned: {prov['cell']}")
            ui.out.print("\n".join(f"candidate: {r['cell']} (uploaded {r['uploaded']})" for r in rows) or "no newer release")
        return errors.EXIT_OK
    baseline = (prov.get("baseline") or {}).get("decode_tokens_per_s")
    ctx = RunContext(matrix=m, workspace=ws, host_facts=read_host_facts(args), options=replace(stage_options(args), baseline_speed=baseline))
    results = run_pipeline(ctx, [c for c, _ in cands], all_stages(args))
    pinned_versions = lock.read(pin.production_dir(ws) / "pylock.toml").versions()
    out: list[dict[str, Any]] = []
    for r in results:
        lp = ws.locks(r.id) / "pylock.toml"
        diff = lock.diff(pinned_versions, lock.read(lp).versions()) if lp.exists() else []
        safe, reasons = watch.verdict(r)
        out.append({"cell": r.id, "safe": safe, "reasons": reasons, "lock_diff": diff})
    if ui.json:
        ui.print_json({"pinned": prov["cell"], "releases": out})
    else:
        for o in out:
            ui.out.print(f"{o['cell']}: {'safe to upgrade' if o['safe'] else 'NOT safe'}")
            for why in o["reasons"]:
                ui.out.print(f"  - {escape(why)}")
            ui.out.print(f"  lock diff vs production: {len(o['lock_diff'])} package(s) differ")
    return errors.EXIT_OK if all(o["safe"] for o in out) else errors.EXIT_CELLS_FAILED


COMMANDS = {
    "pin": Command("make a passing cell's lock the production pin (--check: does it still hold?)", _configure_pin, cmd_pin),
    "watch": Command("is a newer SGLang release safe to upgrade to? (--dry-run lists candidates)", _configure_watch, cmd_watch),
}
