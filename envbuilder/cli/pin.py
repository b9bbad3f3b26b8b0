"""The production pin and the upgrade watch: pin, watch."""

from __future__ import annotations

import argparse
from dataclasses import replace

from rich.markup import escape

from envbuilder import atomic, errors, indexconfig, lock, pin, report, validate, watch
from envbuilder import matrix as matrix_mod
from envbuilder.cli.options import (
    Command,
    add_run_options,
    one_cell,
    read_host_facts,
    stage_options,
)
from envbuilder.cli.ui import Ui, progress, results_table
from envbuilder.pipeline import RunContext, Workspace, run_pipeline
from envbuilder.report import upgrade as upgrade_view
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


def _show_watch(ws: Workspace, ui: Ui) -> int:
    """The stored upgrade summary and its cells' stored results, as ``watch`` printed them."""
    path = ws.root / "watch" / "summary.json"
    summary = watch.load_summary(path)
    if summary is None:
        if path.exists():
            raise errors.InputError(str(path), None, "not a watch summary (unreadable or corrupt): run `envbuilder watch` again")
        raise errors.InputError(str(path), None, "no watch summary: run `envbuilder watch` first")
    if ui.json:
        ui.print_json(summary.to_json())
        return errors.EXIT_OK
    results = [r for v in summary.releases if (r := ws.results.load(v.cell)) is not None]
    ui.out.print(results_table(results, report.stage_columns(results)))
    for line in summary.render():
        ui.out.print(escape(line))
    return errors.EXIT_OK


def _configure_watch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="only list the candidate releases")
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    p.add_argument("--only", action="append", metavar="VERSION", help="judge only these candidate releases")
    p.add_argument("--keep-envs", action="store_true", help="keep each candidate's venv (~10 GB each) after its stages")
    p.add_argument("--show", action="store_true", help="print the stored verdicts (<workdir>/watch/summary.json), run nothing")
    p.add_argument("--tolerance", type=validate.fraction_arg, default=0.10,
                   help="speculation acceptance, decode tok/s and TTFT may be this much worse than the pin's")
    add_run_options(p)


def cmd_watch(args: argparse.Namespace, ui: Ui) -> int:
    import datetime
    import shutil
    import time

    from packaging.version import Version

    from envbuilder.engines import facts as facts_mod

    ws = Workspace(args.workdir)
    if args.show:
        return _show_watch(ws, ui)
    prov = pin.read_provenance(ws)
    m = matrix_mod.load(args.matrix)
    pinned = pin.pinned_cell(m, prov)
    package = engine_package(m, pinned)
    axis = next(a for a, _ in pinned.packages if a.replace("_", "-") == package)
    cands = watch.candidates(m, ws, pinned, package, include_prereleases=args.pre)
    every_version = [dict(c.packages)[axis] for c, _ in cands]  # flag history spans the releases not judged too
    if args.only:
        cands = [(c, w) for c, w in cands if dict(c.packages)[axis] in args.only]
    if args.dry_run or not cands:
        rows = [{"cell": c.id, package: dict(c.packages)[axis], "uploaded": when} for c, when in cands]
        if ui.json:
            ui.print_json({"pinned": prov["cell"], "candidates": rows})
        else:
            ui.out.print(f"pinned: {prov['cell']}")
            ui.out.print("\n".join(f"candidate: {r['cell']} (uploaded {r['uploaded']})" for r in rows) or "no newer release")
        return errors.EXIT_OK
    baseline = dict(prov.get("baseline") or {})
    args.drift = True  # resolve as of the release day and today, with the drift
    stages = all_stages(args)
    force = set(args.force_stage or []) | ({s.name for s in stages} if args.force else set())
    ctx = RunContext(matrix=m, workspace=ws, host_facts=read_host_facts(args), force_stages=frozenset(force),
                     options=replace(stage_options(args), baseline_speed=baseline.get("decode_tokens_per_s")),
                     events=progress(ui))  # fmt: skip
    gpu = bool(ctx.host_facts.gpus)
    pinned_version = dict(pinned.packages)[axis]
    launch = list(m.server.args)
    index_url = indexconfig.require_read_url(m.resolve.indexes, str(m.path))
    # the engine's own knowledge, read from each release's wheel (cached per version)
    known: dict[str, facts_mod.EngineFacts] = {}
    for v in [pinned_version, *every_version]:
        try:
            known[v] = facts_mod.facts_for(package, v, ws.cache, index_url)
        except facts_mod.EngineFactsError as e:
            ui.err.print(escape(f"{package} {v}: no engine facts ({e})"))
    pinned_versions = lock.read(pin.production_dir(ws) / "pylock.toml").versions()
    verdicts: list[watch.ReleaseVerdict] = []
    results = []
    summary_path = ws.root / "watch" / "summary.json"
    earlier = watch.load_summary(summary_path)  # releases judged by an earlier run (--only) against the same pin
    kept = list(earlier.releases if earlier and earlier.pinned_cell == prov["cell"] else ())
    for cell, when in cands:
        version = dict(cell.packages)[axis]
        t0 = time.monotonic()
        r = run_pipeline(ctx, [cell], stages)[0]
        results.append(r)
        verdict, reasons, fixes = watch.decide(r, gpu=gpu, baseline=baseline, tolerance=args.tolerance)
        notes: list[str] = []
        changes: list[str] = []
        f = known.get(version)
        if f is not None:
            history = [h for hv, h in known.items() if Version(hv) < Version(version)]
            check = facts_mod.check_flags(f, launch, history)
            notes += [n.message for n in check.notes]
            for prob in check.problems:
                if prob.replacement:
                    fixes.append(f"replace {prob.flag} with {prob.replacement}")
                if not any(prob.flag in x for x in reasons):  # e.g. the build failed before the import stage's check
                    reasons.append(f"flags ({f.wheel}): bad-flag — {prob.message}")
            if check.problems and verdict != watch.BLOCKED:
                verdict = watch.BLOCKED
            if pinned_version in known:
                moved = facts_mod.flag_changes(known[pinned_version], f)
                used = {a.split("=", 1)[0] for a in launch if a.startswith("--")}
                changes += [c for c in moved if c.split()[1] in used]
        lp = ws.locks(cell.id) / "pylock.toml"
        if lp.exists():
            changes += watch.key_changes(pinned_versions, lock.read(lp).versions())
        res = r.stage("resolve")
        drift = len(res.details.get("drift", []) or []) if res is not None and "drift" in res.details else None
        build = r.stage("build")
        ran_with = None
        imp = r.stage("import")
        if imp is not None:
            ran_with = (imp.details.get("probe") or {}).get("python")
            lc = imp.details.get("launch_check") or {}
            notes += [str(n) for n in lc.get("notes", [])][:5]
        venv_gib = None
        venv = ws.venvs(cell.id)
        if build is not None and venv.exists():
            venv_gib = round(sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
                             / 2**30, 2)  # fmt: skip
            if not args.keep_envs:
                shutil.rmtree(venv, ignore_errors=True)
        verdicts.append(watch.ReleaseVerdict(
            version=version, cell=cell.id, uploaded=when, verdict=verdict, reasons=tuple(reasons),
            fixes=tuple(dict.fromkeys(fixes)), changes=tuple(changes), notes=tuple(dict.fromkeys(notes)),
            stages=tuple((s.name, s.status.value, s.reason.value) for s in r.stages), ran_with=ran_with,
            duration_s=time.monotonic() - t0, venv_gib=venv_gib, drift=drift))  # fmt: skip
        summary = watch.UpgradeSummary(package=package, pinned_cell=prov["cell"], pinned_version=pinned_version,
                                       launch_args=tuple(launch), gpu=gpu,
                                       releases=tuple(sorted([*(r for r in kept if r.version not in
                                                                  {v.version for v in verdicts}), *verdicts],
                                                                key=lambda r: Version(r.version))),
                                       created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))  # fmt: skip
        atomic.write_json(summary_path, summary.to_json())
    if ui.json:
        ui.print_json(summary.to_json())
    else:
        ui.out.print(results_table(results, report.stage_columns(results)))
        for line in summary.render():
            ui.out.print(escape(line))
        for up in upgrade_view.from_summary(summary, ws.root):  # pin vs each release, side by side
            ui.out.print(upgrade_view.table(up), width=min(ui.out.width, 120))
        ui.out.print(f"summary: {summary_path} (`envbuilder report --format html` shows it too)")
    return errors.EXIT_OK if all(v.verdict == watch.SAFE_TO_UPGRADE for v in verdicts) else errors.EXIT_CELLS_FAILED


COMMANDS = {
    "pin": Command("make a passing cell's lock the production pin (--check: does it still hold?)", _configure_pin, cmd_pin),
    "watch": Command("is a newer SGLang release safe to upgrade to? (--dry-run lists candidates)", _configure_watch, cmd_watch),
}
