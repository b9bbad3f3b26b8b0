"""Where the CLI writes: results to stdout, progress and messages to stderr (folded per stage in CI logs)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.constrain import Constrain
from rich.markup import escape

from envbuilder import errors
from envbuilder.pipeline import StageEvent
from envbuilder.report import grid, terminal
from envbuilder.results import CellResult, Status

STATUS_STYLE = {"pass": "green", "fail": "red", "error": "magenta", "skip": "yellow"}


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


def consoles(json_mode: bool) -> tuple[Console, Console]:
    # rich honours NO_COLOR and drops styling when the stream is not a terminal.
    width = None if sys.stdout.isatty() else 200
    return (Console(soft_wrap=json_mode, highlight=False, width=width),
            Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200))  # fmt: skip


def exit_code(results: Sequence[CellResult], stage_names: Sequence[str]) -> int:
    bad = any(s.status in (Status.FAIL, Status.ERROR) for r in results for s in r.stages if s.name in stage_names)
    return errors.EXIT_CELLS_FAILED if bad else errors.EXIT_OK


def results_table(results: Sequence[CellResult], stage_names: Sequence[str]) -> RenderableType:
    """The matrix view of what these stages decided (their checks included), within 120 columns."""
    ran = [r.without_stages({s.name for s in r.stages if s.name.split(".")[0] not in stage_names}) for r in results]
    return Constrain(terminal.render(ran, grid.build(ran)), width=terminal.WIDTH)


def progress(ui: Ui) -> Callable[[StageEvent], None]:
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
