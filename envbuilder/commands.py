"""Registers the stage commands with the CLI (kept apart so cli.py stays the plumbing)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from envbuilder import atomic, doctor, errors
from envbuilder.build import BuildStage
from envbuilder.cli import Ui, _add_cells, _host_facts, add_run_options, register, run_stages, stage_options
from envbuilder.importcheck import ImportStage
from envbuilder.pipeline import Stage, Workspace
from envbuilder.precheck import PrecheckStage
from envbuilder.resolve import ResolveStage
from envbuilder.results import CellResult, Status
from envbuilder.smoke import SmokeStage, parse_checks


def _configure_resolve(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    p.add_argument("--drift", action="store_true", help="also resolve against today and list what differs")
    p.add_argument("--jobs", type=int, default=0, help="cells resolved at once (default: cores x 2)")
    p.add_argument("--force", action="store_true", help="re-resolve even when the inputs are unchanged")


def cmd_resolve(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(drift=args.drift, jobs=args.jobs)])


register("resolve", "lock every selected cell with uv (pylock.toml)", _configure_resolve, cmd_resolve)


def _configure_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save", type=Path, help="also write the facts to this file (default: <workdir>/doctor.json)")


def cmd_doctor(args: argparse.Namespace, ui: Ui) -> int:
    facts = doctor.collect()
    atomic.write_json(args.save or args.workdir / "doctor.json", facts)
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
    _add_cells(p)
    p.add_argument("--host-facts", type=Path, help="runner facts from `envbuilder doctor --json` (default: probe here)")
    p.add_argument("--force", action="store_true", help="re-run even when the inputs are unchanged")


def cmd_precheck(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(), PrecheckStage()])


register("doctor", "capture this runner's facts (GPUs, driver, CUDA, glibc, OS, Docker)", _configure_doctor, cmd_doctor)
register("precheck", "check every selected cell against the runner's NVIDIA stack", _configure_precheck, cmd_precheck)


def _configure_build(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    add_run_options(p, smoke=False)


def cmd_build(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(), BuildStage(runner=args.runner), ImportStage()], **stage_options(args))


def _configure_smoke(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    add_run_options(p)


def cmd_smoke(args: argparse.Namespace, ui: Ui) -> int:
    checks = parse_checks(args.checks) if args.checks else None
    echo = (lambda line: ui.err.print(escape(line), style="dim", soft_wrap=True)) if args.verbose else None
    from envbuilder import matrix as matrix_mod

    m = matrix_mod.load(args.matrix)
    if m.server.command is not None or args.base_url or m.server.base_url:
        # the server is started by a custom command or already runs: no environment to resolve or build
        stages: list[Stage] = [PrecheckStage(), SmokeStage(checks=checks, echo=echo)]
    else:
        stages = [ResolveStage(), PrecheckStage(), BuildStage(runner=args.runner), ImportStage(),
                  SmokeStage(checks=checks, echo=echo)]  # fmt: skip
    from envbuilder.runners import gc

    gc(Workspace(args.workdir).root / "run")  # servers a killed run left behind
    return run_stages(args, ui, stages, **stage_options(args))


def cmd_gc(args: argparse.Namespace, ui: Ui) -> int:
    from envbuilder.runners import gc
    from envbuilder.runners.docker import gc_containers

    removed = gc(Workspace(args.workdir).root / "run") + gc_containers()
    if ui.json:
        ui.print_json({"removed": removed})
    else:
        ui.out.print("\n".join(removed) if removed else "nothing left running")
    return errors.EXIT_OK


register("build", "build each selected cell's environment (Docker image or venv) and import-smoke it",
         _configure_build, cmd_build)  # fmt: skip
register("smoke", "start each selected cell's engine and run the smoke checks (--checks none: start and stop)",
         _configure_smoke, cmd_smoke)  # fmt: skip
register("gc", "stop servers and remove containers a killed run left behind", lambda p: None, cmd_gc)


def _configure_degeneracy(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-", help="JSON lines {\"id\", \"text\"} or plain text; - for stdin")


def cmd_degeneracy(args: argparse.Namespace, ui: Ui) -> int:
    """One verdict per text; exit 1 if any text is degenerate."""
    import json
    import sys

    from envbuilder.checks import degeneracy
    from envbuilder.errors import InputError

    if args.file == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        where = args.file
        try:
            text = Path(args.file).read_text()
        except OSError as e:
            raise InputError(args.file, None, f"cannot read ({e.strerror or e})") from None
    items: list[tuple[object, str, str | None]] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    as_jsonl = bool(lines) and all(ln.lstrip().startswith("{") for ln in lines)
    if as_jsonl:
        for n, ln in enumerate(lines, 1):
            try:
                obj = json.loads(ln)
            except ValueError as e:
                raise InputError(where, f"line {n}", f"not JSON ({e})") from None
            if not isinstance(obj, dict) or "text" not in obj:
                raise InputError(where, f"line {n}", "needs a \"text\" field")
            items.append((obj.get("id", n), "" if obj["text"] is None else str(obj["text"]), obj.get("finish_reason")))
    else:
        items.append((1, text, None))
    bad = False
    for ident, body, finish in items:
        v = degeneracy.detect(body, finish_reason=finish)
        bad |= v.degenerate
        if ui.json:
            sys.stdout.write(json.dumps({"id": ident, "verdict": v.label, "signals": list(v.signals)}) + "\n")
        else:
            sig = f" ({', '.join(v.signals)})" if v.signals else ""
            ui.out.print(f"{ident}: {v.label}{escape(sig)}")
    return errors.EXIT_CELLS_FAILED if bad else errors.EXIT_OK


register("degeneracy", "judge generated texts: degenerate or ok, with the signals that fired",
         _configure_degeneracy, cmd_degeneracy)  # fmt: skip


def _configure_report(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    p.add_argument("--format", choices=["table", "md", "html", "json", "junit"], default="table")
    p.add_argument("--output", type=Path, help="write there instead of stdout")
    p.add_argument("--all", action="store_true", help="write every format to <workdir>/reports/")
    p.add_argument("--rows", metavar="AXIS", help="matrix view: the axis down (default: sglang)")
    p.add_argument("--cols", metavar="AXIS[,AXIS]", help="matrix view: the axes across (default: cuda,driver)")
    p.add_argument("--ids", action="store_true", help="matrix view in the terminal: show each cell's id")
    p.add_argument("--expand", action="store_true", help="html: every cell's section open (printing, screenshots)")


def load_results(args: argparse.Namespace) -> list[CellResult]:
    """The stored results of the selected cells (every stored result when the matrix is absent)."""
    store = Workspace(args.workdir).results
    if args.matrix.exists():
        from envbuilder import matrix as matrix_mod

        cells = matrix_mod.select(matrix_mod.load(args.matrix).cells(), args.cells)
        return [r for r in (store.load(c.id) for c in cells) if r is not None]
    return store.all()


def cmd_report(args: argparse.Namespace, ui: Ui) -> int:
    from envbuilder import report
    from envbuilder.cli import exit_code
    from envbuilder.report import grid, terminal

    results = load_results(args)
    layout = grid.build(results, args.rows, args.cols)  # an unknown axis is an input error before anything is written
    view = terminal.render(results, layout, ids=args.ids)
    baseline = report.pinned_baseline(args.workdir)
    if args.all:
        out_dir = Workspace(args.workdir).reports
        for fmt in ("md", "html", "json", "junit"):
            text = report.render(results, fmt, workdir=args.workdir, page_dir=out_dir, rows=args.rows, cols=args.cols,
                                 expand=args.expand, baseline=baseline)
            atomic.write_text(out_dir / f"envbuilder.{report.EXT[fmt]}", text)
        ui.out.print(view, width=min(ui.out.width, terminal.WIDTH))
        ui.err.print(f"reports written to {out_dir}/ (md, html, json, junit)")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with Path(summary).open("a") as f:
                f.write(report.to_markdown(results, rows=args.rows, cols=args.cols))
    elif args.format == "table":
        ui.out.print(view, width=min(ui.out.width, terminal.WIDTH))
    else:
        page_dir = args.output.parent if args.output else Path.cwd()
        text = report.render(results, args.format, workdir=args.workdir, page_dir=page_dir, rows=args.rows, cols=args.cols,
                             expand=args.expand, baseline=baseline)
        if args.output:
            atomic.write_text(args.output, text)
        else:
            sys.stdout.write(text)
    return exit_code(results, list(report.STAGES))


register("report", "the matrix view and every cell: table (terminal), md, html, json or junit", _configure_report, cmd_report)


def _one_cell(args: argparse.Namespace) -> tuple[Any, Any]:
    from envbuilder import matrix as matrix_mod

    m = matrix_mod.load(args.matrix)
    cells = matrix_mod.select(m.cells(), [args.cell])
    if len(cells) != 1:
        raise errors.InputError("command line", args.cell, f"matches {len(cells)} cells; name exactly one")
    return m, cells[0]


def _configure_pin(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", nargs="?", help="the cell to pin (an id or filter matching one cell)")
    p.add_argument("--force", action="store_true", help="pin a cell that did not pass every stage (recorded)")
    p.add_argument("--check", action="store_true", help="exit 1 if the pin no longer matches a fresh as-of resolution")


def cmd_pin(args: argparse.Namespace, ui: Ui) -> int:
    from envbuilder import matrix as matrix_mod
    from envbuilder import pin
    from envbuilder.pipeline import RunContext

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
    _m, cell = _one_cell(args)
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
    from envbuilder import lock, pin, watch
    from envbuilder import matrix as matrix_mod
    from envbuilder.pipeline import RunContext, run_pipeline
    from envbuilder.resolve import engine_package
    from envbuilder.stages import all_stages

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
    ctx = RunContext(matrix=m, workspace=ws, host_facts=_host_facts(args), options={**stage_options(args), "baseline_speed": baseline})
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


def _configure_ci_matrix(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    p.add_argument("--format", choices=["github"], default="github")
    p.add_argument("--max-jobs", type=int, default=256, help="GitHub's limit of jobs per matrix")


def cmd_ci_matrix(args: argparse.Namespace, ui: Ui) -> int:
    """The cells as a GitHub Actions dynamic matrix ({"include": [...]}), chunked beyond --max-jobs."""
    import json

    from envbuilder import matrix as matrix_mod

    cells = matrix_mod.select(matrix_mod.load(args.matrix).cells(), args.cells)
    include = [{"cell": c.id, **c.axes} for c in cells]
    chunks = [include[i:i + args.max_jobs] for i in range(0, len(include), args.max_jobs)] or [[]]
    doc: dict[str, object] = {"include": chunks[0]} if len(chunks) == 1 else {"chunks": [{"include": ch} for ch in chunks]}
    sys.stdout.write(json.dumps(doc) + "\n")
    return errors.EXIT_OK


def _configure_merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", type=Path, help="folders (or files) of result JSON from CI jobs")


def cmd_merge(args: argparse.Namespace, ui: Ui) -> int:
    """Combine results of many jobs into this workdir; conflicting duplicates are an error."""
    from envbuilder import report
    from envbuilder.cli import exit_code, results_table
    from envbuilder.results import load_result_file

    seen: dict[str, tuple[Path, CellResult]] = {}
    for d in args.dirs:
        files = [d] if d.is_file() else sorted(d.rglob("*.json"))
        if not d.exists():
            raise errors.InputError(str(d), None, "does not exist")
        for f in files:
            r = load_result_file(f)
            if r.id in seen:
                prev_path, prev = seen[r.id]
                if prev.to_json() != r.to_json():
                    raise errors.InputError(str(f), r.id, f"conflicts with {prev_path} (same cell, different results)")
                continue
            seen[r.id] = (f, r)
    store = Workspace(args.workdir).results
    results = [r for _, r in seen.values()]
    for r in results:
        store.save(r)
    if ui.json:
        ui.print_json([r.to_json() for r in results])
    else:
        ui.out.print(results_table(results, report.stage_columns(results)))
    return exit_code(results, list(report.STAGES))


register("pin", "make a passing cell's lock the production pin (--check: does it still hold?)", _configure_pin, cmd_pin)
register("watch", "is a newer SGLang release safe to upgrade to? (--dry-run lists candidates)", _configure_watch, cmd_watch)
register("ci-matrix", "print the cells as a GitHub Actions dynamic matrix", _configure_ci_matrix, cmd_ci_matrix)
register("merge", "combine result JSON from many CI jobs into one table", _configure_merge, cmd_merge)


def _configure_wheelhouse(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="the cell (an id or a filter matching one cell)")
    p.add_argument("dir", type=Path, help="where the wheels go")
    p.add_argument("--exclude-from", type=Path, help="a `pip freeze` of the target: packages it has are left out")
    p.add_argument("--lock", type=Path, help="use this pylock.toml instead of the cell's (e.g. its fresh lock)")


def cmd_wheelhouse(args: argparse.Namespace, ui: Ui) -> int:
    from envbuilder import wheelhouse

    _m, cell = _one_cell(args)
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


register("wheelhouse", "download a cell's locked wheels (hash-checked) for an air-gapped runner",
         _configure_wheelhouse, cmd_wheelhouse)  # fmt: skip


def _configure_launch_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="the cell (an id or a filter matching one cell)")
    p.add_argument("--python", help="run in this interpreter instead of the cell's venv (e.g. a runner's python3)")


def cmd_launch_check(args: argparse.Namespace, ui: Ui) -> int:
    """SGLang's own argument checks for the cell's launch, against the model's config.json, no GPU needed."""
    import shlex

    from envbuilder import launchcheck, model

    m, cell = _one_cell(args)
    config = model.find_config(m.model, args.matrix.parent)
    if config is None:
        raise errors.InputError(str(args.matrix), "[model]", "no config.json found: set [model] config or a local path")
    if args.python:
        python = shlex.split(args.python)
    else:
        r = Workspace(args.workdir).results.load(cell.id)
        build = r.stage("build") if r else None
        if build is None or build.details.get("runner") != "venv":
            raise errors.InputError("command line", "--python", "no venv for this cell: build it or pass --python")
        python = [str(build.details["python"])]
    launch_args = list(m.server.args)
    if m.model.context_length:
        launch_args = ["--context-length", str(m.model.context_length), *launch_args]
    verdict, probe = launchcheck.run(python, config, launch_args, env={**os.environ, **m.server.env})
    if ui.json:
        ui.print_json({"cell": cell.id, **verdict.to_json(), "log": probe.get("log", "")[-2000:]})
    else:
        ui.out.print(f"{cell.id}: {verdict.status.value} {verdict.reason.value} — {escape(verdict.message)}")
        for n in verdict.notes:
            ui.out.print(f"  note: {escape(n)}")
    return errors.EXIT_OK if verdict.status in (Status.PASS, Status.SKIP) else errors.EXIT_CELLS_FAILED


register("launch-check", "SGLang's own argument checks against the model's config.json (no GPU, no weights)",
         _configure_launch_check, cmd_launch_check)  # fmt: skip


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
    p.add_argument("--jobs", type=int, default=2, help="trials run at once (default: 2)")


def cmd_bisect(args: argparse.Namespace, ui: Ui) -> int:
    """Name the package(s) whose newer version breaks the cell, and the constraint that fixes it."""
    from envbuilder import bisect, importcheck, lock, wheelhouse
    from envbuilder.build import offline_index_args, venv_base
    from envbuilder.errors import StageFailure
    from envbuilder.pipeline import RunContext, run_pipeline
    from envbuilder.resolve import build_request

    m, cell = _one_cell(args)
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
    req = build_request(m, cell, None)
    provided = wheelhouse.read_freeze(args.provided) if args.provided else {}
    interpreter, provider_paths = venv_base(args.python or cell.python, provides=bool(provided))
    box = bisect.Sandbox(
        requirements=req.requirements, constraints=req.constraints, python_version=cell.python,
        platform=req.platform, index_args=tuple(offline_index_args(args.find_links) if args.find_links
                                                else req.index_args()),
        interpreter=interpreter, workdir=ws.root / "bisect" / cell.id, test_command=args.test,
        modules=tuple(importcheck.modules_for(m.server.engine, as_of, list(cell.requirements()))),
        provided=frozenset(provided), provider_paths=tuple(provider_paths),
    )  # fmt: skip

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


register("bisect", "name the package whose newer version breaks a cell (and the constraint that fixes it)",
         _configure_bisect, cmd_bisect)  # fmt: skip
