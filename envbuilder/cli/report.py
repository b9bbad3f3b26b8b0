"""Reading results back: report, merge (CI jobs' results into one table), ci-matrix (one cell per CI job)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from envbuilder import atomic, errors, report, validate
from envbuilder import matrix as matrix_mod
from envbuilder.cli.options import (
    Command,
    add_cells,
    load_results,
)
from envbuilder.cli.ui import Ui, exit_code, results_table, write_stdout
from envbuilder.pipeline import Workspace
from envbuilder.report import grid, terminal
from envbuilder.results import merge_result_files


def _configure_report(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    p.add_argument("--format", choices=["table", "md", "html", "json", "junit"], default="table")
    p.add_argument("--output", type=Path, help="write there instead of stdout")
    p.add_argument("--all", action="store_true", help="write every format to <workdir>/reports/")
    p.add_argument("--quiet", action="store_true", help="with --all: print only where the reports are, not the table")
    p.add_argument("--rows", metavar="AXIS", help="matrix view: the axis down (default: sglang)")
    p.add_argument("--cols", metavar="AXIS[,AXIS]", help="matrix view: the axes across (default: cuda,driver)")
    p.add_argument("--ids", action="store_true", help="matrix view in the terminal: show each cell's id")
    p.add_argument("--expand", action="store_true", help="html: every cell's section open (printing, screenshots)")


def cmd_report(args: argparse.Namespace, ui: Ui) -> int:
    if args.output:
        validate.output_file(args.output, "--output")
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
        if not args.quiet:
            ui.out.print(view, width=min(ui.out.width, terminal.WIDTH))
        ui.err.print(f"reports written to {out_dir.resolve()}/ (md, html, json, junit)")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with Path(summary).open("a") as f:
                f.write(report.render(results, "md", workdir=args.workdir, rows=args.rows, cols=args.cols))
    elif args.format == "table":
        ui.out.print(view, width=min(ui.out.width, terminal.WIDTH))
    else:
        page_dir = args.output.parent if args.output else Path.cwd()
        text = report.render(results, args.format, workdir=args.workdir, page_dir=page_dir, rows=args.rows, cols=args.cols,
                             expand=args.expand, baseline=baseline)
        if args.output:
            try:
                atomic.write_text(args.output, text)
            except OSError as e:
                raise errors.InputError(str(args.output), "--output", f"cannot write ({e.strerror or e})") from None
        else:
            write_stdout(text)
    return exit_code(results, list(report.STAGES))


def _configure_ci_matrix(p: argparse.ArgumentParser) -> None:
    add_cells(p)
    p.add_argument("--format", choices=["github"], default="github")
    p.add_argument("--max-jobs", type=validate.int_arg(1), default=256, help="GitHub's limit of jobs per matrix")


def cmd_ci_matrix(args: argparse.Namespace, ui: Ui) -> int:
    """The cells as a GitHub Actions dynamic matrix ({"include": [...]}), chunked beyond --max-jobs."""
    cells = matrix_mod.select(matrix_mod.load(args.matrix).cells(), args.cells)
    include = [{"cell": c.id, **c.axes} for c in cells]
    chunks = [include[i:i + args.max_jobs] for i in range(0, len(include), args.max_jobs)] or [[]]
    doc: dict[str, object] = {"include": chunks[0]} if len(chunks) == 1 else {"chunks": [{"include": ch} for ch in chunks]}
    write_stdout(json.dumps(doc) + "\n")
    return errors.EXIT_OK


def _configure_merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", type=Path, help="folders (or files) of result JSON from CI jobs")


def cmd_merge(args: argparse.Namespace, ui: Ui) -> int:
    """Combine results of many jobs into this workdir; conflicting duplicates are an error."""
    results = merge_result_files(args.dirs)
    store = Workspace(args.workdir).results
    for r in results:
        store.save(r)
    if ui.json:
        ui.print_json([r.to_json() for r in results])
    else:
        ui.out.print(results_table(results, report.stage_columns(results)))
    return exit_code(results, list(report.STAGES))


COMMANDS = {
    "report": Command("the matrix view and every cell: table (terminal), md, html, json or junit", _configure_report, cmd_report),
    "ci-matrix": Command("print the cells as a GitHub Actions dynamic matrix", _configure_ci_matrix, cmd_ci_matrix),
    "merge": Command("combine result JSON from many CI jobs into one table", _configure_merge, cmd_merge),
}
