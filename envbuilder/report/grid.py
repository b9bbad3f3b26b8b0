"""The matrix view's layout: cells placed by two chosen axes (rows × columns), each square holding the cells
whose other axes differ, each with its verdict and the short reason that decided it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envbuilder.errors import InputError
from envbuilder.results import CellResult, Reason, StageResult, Status

DEFAULT_ROWS = ("sglang",)
DEFAULT_COLS = ("cuda", "driver")
ICON = {"pass": "✔", "fail": "✘", "error": "!", "skip": "–"}
SHORT_AXIS = {"flash_attn_4": "fa4", "python": "py", "cuda": "cu", "driver": "drv", "os": ""}


def axis_label(axis: str, value: str) -> str:
    """``fa4 resolver``, ``py3.12``, ``ubuntu22.04`` — how a square tells its cells apart."""
    short = SHORT_AXIS.get(axis, axis)
    return f"{short}{value}" if short in ("py", "cu") else f"{short} {value}".strip()


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One cell in a square: its verdict, the stage and reason that decided it, and what tells it apart from
    the other cells of the same square (the values of the axes that are neither rows nor columns)."""

    result: CellResult
    status: Status
    stage: str
    reason: str
    message: str
    extra: str

    @property
    def short(self) -> str:
        """``pass`` or the reason slug (``degenerate``, ``oom``, ``no-gpu``)."""
        return "pass" if self.status is Status.PASS else self.reason


@dataclass(frozen=True, kw_only=True)
class Grid:
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    row_values: tuple[tuple[str, ...], ...]
    col_values: tuple[tuple[str, ...], ...]
    squares: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[Entry, ...]]
    extra_axes: tuple[str, ...]

    def at(self, row: tuple[str, ...], col: tuple[str, ...]) -> tuple[Entry, ...]:
        return self.squares.get((row, col), ())

    @property
    def corner(self) -> str:
        return f"{' · '.join(self.rows)} ↓  {' · '.join(self.cols)} →"


def deciding_stage(r: CellResult) -> StageResult | None:
    """The first stage (pipeline order) whose status is the cell's verdict; a stage that was not asked for
    (``not-applicable``) decides nothing."""
    worst = [s for s in r.stages if s.status is r.verdict]
    return next((s for s in worst if s.reason is not Reason.NOT_APPLICABLE), worst[0] if worst else None)


def entry(r: CellResult, extra_axes: Sequence[str]) -> Entry:
    s = deciding_stage(r)
    return Entry(result=r, status=r.verdict, stage=s.name if s else "", reason=s.reason.value if s else "not-run",
                 message=s.message if s else "no stage ran", extra=" · ".join(axis_label(a, r.axes.get(a, "")) for a in extra_axes))  # fmt: skip


def axis_values(results: Sequence[CellResult], axis: str) -> list[str]:
    seen: list[str] = []
    for r in results:
        v = r.axes.get(axis, "")
        if v not in seen:
            seen.append(v)
    return seen


def _sort_key(value: str) -> tuple[int, tuple[object, ...]]:
    """Versions in numeric order ("0.5.9" < "0.5.10"); words after numbers ("host" after "590.48.01")."""
    parts: list[object] = []
    for p in value.replace("-", ".").split("."):
        parts.append((0, int(p), "") if p.isdigit() else (1, 0, p))
    return (0 if value[:1].isdigit() else 1, tuple(parts))


def _parse_axes(text: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    items = [text] if isinstance(text, str) else list(text)
    return tuple(a.strip() for item in items for a in item.split(",") if a.strip())


def build(results: Sequence[CellResult], rows: str | Sequence[str] | None = None,
          cols: str | Sequence[str] | None = None) -> Grid:  # fmt: skip
    """Lay the results out. ``rows``/``cols`` name axes (``"cuda,driver"`` for two); unknown axes are an input
    error naming the option. By default sglang down and cuda × driver across, falling back to the axes that vary."""
    present: list[str] = []
    for r in results:
        present += [a for a in r.axes if a not in present]
    varying = [a for a in present if len(axis_values(results, a)) > 1]
    want_rows, want_cols = _parse_axes(rows), _parse_axes(cols)
    for opt, axes in (("--rows", want_rows), ("--cols", want_cols)):
        if axes == ():
            raise InputError("command line", opt, f"names no axis (axes: {', '.join(present) or 'none'})")
        for a in axes or ():
            if a not in present:
                raise InputError("command line", opt, f"no axis {a!r} in these results (axes: {', '.join(present) or 'none'})")
    both = [a for a in want_rows or () if a in (want_cols or ())]
    if both:
        raise InputError("command line", "--cols", f"axis {both[0]!r} is already down (--rows); pick another")
    if want_rows is None:
        taken = want_cols or ()
        want_rows = tuple(a for a in DEFAULT_ROWS if a in present and a not in taken) or tuple(
            a for a in varying if a not in taken)[:1] or tuple(a for a in present if a not in taken)[:1]
    if want_cols is None:
        want_cols = tuple(a for a in DEFAULT_COLS if a in present and a not in want_rows) or tuple(
            a for a in varying if a not in want_rows)[:1]
    extra = tuple(a for a in varying if a not in want_rows and a not in want_cols)

    def key(r: CellResult, axes: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(r.axes.get(a, "") for a in axes)

    row_values = tuple(sorted({key(r, want_rows) for r in results}, key=lambda t: [_sort_key(v) for v in t]))
    col_values = tuple(sorted({key(r, want_cols) for r in results}, key=lambda t: [_sort_key(v) for v in t]))
    squares: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Entry]] = {}
    for r in results:
        squares.setdefault((key(r, want_rows), key(r, want_cols)), []).append(entry(r, extra))
    return Grid(rows=want_rows, cols=want_cols, row_values=row_values, col_values=col_values,
                squares={k: tuple(v) for k, v in squares.items()}, extra_axes=extra)  # fmt: skip


def counts(results: Sequence[CellResult]) -> dict[str, int]:
    """Cells per verdict, in the order pass, fail, error, skip (zeros left out)."""
    out = {s.value: sum(r.verdict is s for r in results) for s in (Status.PASS, Status.FAIL, Status.ERROR, Status.SKIP)}
    return {k: v for k, v in out.items() if v}
