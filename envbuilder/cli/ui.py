"""Where the CLI writes: results to stdout, progress and messages to stderr (folded per stage in CI logs)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, cast

from rich.console import Console, RenderableType
from rich.constrain import Constrain
from rich.markup import escape
from rich.status import Status as RichStatus

from envbuilder import errors
from envbuilder.pipeline import StageEvent
from envbuilder.redact import redact
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
        write_stdout(json.dumps(obj, indent=2) + "\n")


def write_stdout(text: str) -> None:
    """Every byte envbuilder prints passes :func:`envbuilder.redact.redact`."""
    sys.stdout.write(redact(text))
    sys.stdout.flush()


class _Redacted:
    """A text stream that redacts credentials from everything written through it (rich's file)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._stream.write(redact(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def consoles(json_mode: bool) -> tuple[Console, Console]:
    # rich honours NO_COLOR and drops styling when the stream is not a terminal.
    width = None if sys.stdout.isatty() else 200
    out, err = cast(IO[str], _Redacted(sys.stdout)), cast(IO[str], _Redacted(sys.stderr))
    return (Console(file=out, soft_wrap=json_mode, highlight=False, width=width),
            Console(file=err, highlight=False, width=None if sys.stderr.isatty() else 200))  # fmt: skip


class WarningLine(logging.Handler):
    """The library's warnings (a broken result moved aside, a cache rebuilt) as one line each on stderr."""

    def __init__(self, err: Console) -> None:
        super().__init__(logging.WARNING)
        self.err = err

    def emit(self, record: logging.LogRecord) -> None:
        self.err.print(f"[yellow]warning:[/] {escape(record.getMessage())}", soft_wrap=True)


def exit_code(results: Sequence[CellResult], stage_names: Sequence[str]) -> int:
    bad = any(s.status in (Status.FAIL, Status.ERROR) for r in results for s in r.stages if s.name in stage_names)
    return errors.EXIT_CELLS_FAILED if bad else errors.EXIT_OK


def results_table(results: Sequence[CellResult], stage_names: Sequence[str]) -> RenderableType:
    """The matrix view of what these stages decided (their checks included), within 120 columns."""
    ran = [r.without_stages({s.name for s in r.stages if s.name.split(".")[0] not in stage_names}) for r in results]
    return Constrain(terminal.render(ran, grid.build(ran)), width=terminal.WIDTH)


def progress(ui: Ui) -> Callable[[StageEvent], None]:
    """One line per finished stage (folded per stage in GitHub Actions logs); while a long stage runs, its
    progress: a live status line in a terminal, plain lines otherwise (CI logs)."""
    folded: list[str] = []  # the stage whose lines the CI log folds now (stages run one after another)
    live: list[RichStatus] = []

    def on_event(ev: StageEvent) -> None:
        if ev.result is None and ev.progress is None:
            if folded[-1:] != [ev.stage]:
                if folded:
                    ui.endgroup()
                folded.append(ev.stage)
                ui.group(f"envbuilder {ev.stage}")
            return
        if ui.json:
            return
        if ev.progress is not None:
            if not ui.err.is_terminal:
                ui.err.print(f"      {ev.stage:9} {ev.cell_id} {escape(ev.progress)}", soft_wrap=True)
            elif live:
                live[0].update(f"{ev.stage} {ev.cell_id}: {escape(ev.progress)}")
            else:
                live.append(ui.err.status(f"{ev.stage} {ev.cell_id}: {escape(ev.progress)}"))
                live[0].start()
            return
        if ev.result is None:
            return
        if live:
            live.pop().stop()
        r = ev.result
        style = STATUS_STYLE[r.status.value]
        cached = " (cached)" if ev.cached else ""
        msg = f" — {escape(r.message)}" if r.message and r.status is not Status.PASS else ""
        if r.status is Status.PASS and r.details.get("fallback"):
            msg = f" — {escape(str(r.details['fallback']))}"
        ui.err.print(f"[{style}]{r.status.value:5}[/] {r.name:9} {ev.cell_id} {r.duration_s:6.1f}s{cached}{msg}")

    return on_event
