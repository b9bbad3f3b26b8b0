"""The matrix view in the terminal (rich): one row per row-axis value, one column per column-axis combination,
each square the cells' verdicts and short reasons; cell ids only when asked (``--ids``). Fits 120 columns."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from envbuilder.report.grid import ICON, Entry, Grid, counts
from envbuilder.results import CellResult

STYLE = {"pass": "green", "fail": "red", "error": "magenta", "skip": "yellow"}
WIDTH = 120


def square(entries: Sequence[Entry], refs: dict[str, int] | None) -> Text:
    """A square's cells: icon and short reason, the deciding stage, the telling-apart axes, ``[n]`` with --ids."""
    t = Text()
    for i, e in enumerate(entries):
        if i:
            t.append("\n")
        t.append(f"{ICON[e.status.value]} {e.short}", style=f"bold {STYLE[e.status.value]}")
        if e.status.value != "pass" and e.stage:
            t.append(f" ({e.stage})", style="dim")
        if refs is not None:
            t.append(f" [{refs[e.result.id]}]", style="cyan")
        if e.extra:
            t.append(f"\n  {e.extra}", style="dim")
    return t


def matrix_table(grid: Grid, *, refs: dict[str, int] | None = None) -> Table:
    t = Table(show_lines=True, expand=False)
    t.add_column(" · ".join(grid.rows), style="bold", max_width=28, overflow="fold")
    for col in grid.col_values:
        t.add_column(" · ".join(col), overflow="fold", max_width=34)
    for row in grid.row_values:
        t.add_row(" · ".join(row), *(square(grid.at(row, col), refs) for col in grid.col_values))
    return t


def summary_line(results: Sequence[CellResult]) -> Text:
    t = Text(f"{len(results)} cell(s): ")
    for i, (k, n) in enumerate(counts(results).items()):
        if i:
            t.append(", ")
        t.append(f"{n} {k}", style=STYLE[k])
    return t


def render(results: Sequence[CellResult], grid: Grid, *, ids: bool = False) -> RenderableType:
    """The matrix, the counts, and with ``ids`` a numbered list of the cell ids the squares refer to."""
    if not results:
        return Text("no results yet: run `envbuilder run` first")
    refs = {e.result.id: 0 for row in grid.row_values for col in grid.col_values for e in grid.at(row, col)}
    refs = {cid: i for i, cid in enumerate(refs, 1)}
    title = Text(f"envbuilder matrix: {' · '.join(grid.rows)} ↓, {' · '.join(grid.cols)} →", style="bold")
    parts: list[RenderableType] = [title, matrix_table(grid, refs=refs if ids else None), summary_line(results)]
    if ids:
        by_id = {e.result.id: e for row in grid.row_values for col in grid.col_values for e in grid.at(row, col)}
        for cid, i in refs.items():
            parts.append(Text(f"[{i}] {cid}", overflow="fold"))
            e = by_id[cid]
            if e.status.value != "pass" and e.message:
                why = " ".join(e.message.split())
                parts.append(Text(f"    {e.stage}: {why}", style="dim", no_wrap=True, overflow="ellipsis"))
    return Group(*parts)
