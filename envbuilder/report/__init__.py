"""Reports of the compatibility table: the matrix view in the terminal (rich, :mod:`.terminal`), Markdown, one
self-contained HTML page (matrix view + a section per cell), JSON (the result contract), JUnit XML (one test
per cell × stage)."""

from __future__ import annotations

import datetime
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import jinja2

from envbuilder import __version__
from envbuilder.redact import redact
from envbuilder.report import grid, svg
from envbuilder.report import upgrade as upgrade_mod
from envbuilder.report.upgrade import Upgrade
from envbuilder.report.views import cell_view
from envbuilder.results import CellResult, StageResult, Status

STAGES = ("resolve", "precheck", "build", "import", "smoke")
ICON = {"pass": "✅", "fail": "❌", "error": "⚠️", "skip": "⏭️"}
FORMATS = ("table", "md", "html", "json", "junit")
EXT = {"md": "md", "html": "html", "json": "json", "junit": "xml", "table": "txt"}


def stage_columns(results: Sequence[CellResult]) -> list[str]:
    present = {s.name for r in results for s in r.stages}
    return [s for s in STAGES if s in present]


def axes_of(results: Sequence[CellResult]) -> list[str]:
    names: list[str] = []
    for r in results:
        for a in r.axes:
            if a not in names:
                names.append(a)
    return names


def summary_by_axis(results: Sequence[CellResult]) -> list[tuple[str, str, int, int]]:
    """(axis, value, passing cells, cells) — e.g. ("sglang", "0.5.11", 4, 6)."""
    out = []
    for axis in axes_of(results):
        values: list[str] = []
        for r in results:
            v = r.axes.get(axis, "")
            if v not in values:
                values.append(v)
        if len(values) < 2:
            continue
        for v in values:
            group = [r for r in results if r.axes.get(axis) == v]
            out.append((axis, v, sum(r.verdict is Status.PASS for r in group), len(group)))
    return out


def label(s: StageResult) -> str:
    return s.status.value if s.reason.value == "ok" else f"{s.status.value}: {s.reason.value}"


def matrix_markdown(g: grid.Grid, anchors: bool = False) -> list[str]:
    """The matrix view as a Markdown table: one square per row × column, each cell's icon and short reason."""
    lines = ["| " + _md_escape(g.corner) + " | " + " | ".join(_md_escape(" · ".join(c)) for c in g.col_values) + " |",
             "|---" * (len(g.col_values) + 1) + "|"]  # fmt: skip
    for row in g.row_values:
        squares = []
        for col in g.col_values:
            parts = []
            for e in g.at(row, col):
                text = f"{ICON[e.status.value]} {e.short}" + (f" ({e.extra})" if e.extra else "")
                parts.append(_md_escape(text))
            squares.append("<br>".join(parts) or "·")
        lines.append(f"| **{_md_escape(' · '.join(row))}** | " + " | ".join(squares) + " |")
    return lines


def to_markdown(results: Sequence[CellResult], title: str = "envbuilder compatibility table", *,
                rows: str | Sequence[str] | None = None, cols: str | Sequence[str] | None = None) -> str:  # fmt: skip
    """For CI step summaries and PR comments: the matrix view, per-axis pass counts, then every stage of every
    cell (folded) with footnotes for what did not pass."""
    cols_ = stage_columns(results)
    axes = axes_of(results)
    notes: list[str] = []
    counts = ", ".join(f"{n} {k}" for k, n in grid.counts(results).items())
    lines = [f"## {title}", "", f"{len(results)} cell(s): {counts or 'none'}", ""]
    if not results:
        return "\n".join([*lines, "No results yet: run `envbuilder run` first."]) + "\n"
    lines += matrix_markdown(grid.build(results, rows, cols))
    summary = summary_by_axis(results)
    if summary:
        lines += ["", "**Per axis:** " + "; ".join(_md_escape(f"{a} {v}: {p}/{n} pass") for a, v, p, n in summary)]
    lines += ["", "<details><summary>Every stage of every cell</summary>", "",
              "| cell | " + " | ".join(_md_escape(a) for a in axes) + " | " + " | ".join(cols_) + " | verdict |",
              "|" + "---|" * (len(axes) + len(cols_) + 2)]  # fmt: skip
    for r in results:
        row = [f"`{r.id}`", *(r.axes.get(a, "") for a in axes)]
        for c in cols_:
            s = r.stage(c)
            if s is None:
                row.append("")
                continue
            cell = f"{ICON[s.status.value]} {label(s)}"
            if s.status is not Status.PASS and s.message:
                notes.append(f"{r.id} · {c}: {s.message}")
                cell += f" [{len(notes)}]"
            row.append(cell)
        row.append(f"**{ICON[r.verdict.value]} {r.verdict.value}**")
        lines.append("| " + " | ".join(_md_escape(x) for x in row) + " |")
    lines += ["", "</details>"]
    if notes:
        lines += ["", "<details><summary>Why (footnotes)</summary>", ""]
        lines += [f"{i}. {_md_escape(n)}" for i, n in enumerate(notes, 1)]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def _md_escape(s: str) -> str:
    """Untrusted text (ids, axis names and values, messages) inside a Markdown table: no cell breaks, no HTML,
    no control characters."""
    s = _CONTROL.sub("", s).replace("\r", " ")
    return s.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_XML_INVALID = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(s: str) -> str:
    """Text XML 1.0 can carry: ANSI colour codes removed, other control characters dropped."""
    return _XML_INVALID.sub("", _CONTROL.sub("", s))


def _tail(text: object, lines: int = 40) -> str:
    return "\n".join(str(text or "").splitlines()[-lines:])


def pinned_baseline(workdir: Path) -> float | None:
    """The production pin's decode tok/s (``envbuilder pin`` stores it), drawn into every speed plot."""
    p = workdir / "locks" / "production" / "provenance.json"
    try:
        v = (json.loads(p.read_text()).get("baseline") or {}).get("decode_tokens_per_s")
    except (OSError, ValueError, AttributeError):
        return None
    return float(v) if isinstance(v, int | float) else None


def to_html(results: Sequence[CellResult], title: str = "envbuilder compatibility table", *,
            workdir: Path | None = None, page_dir: Path | None = None, rows: str | Sequence[str] | None = None,
            cols: str | Sequence[str] | None = None, upgrades: Sequence[Upgrade] = (), baseline: float | None = None,
            open_all: bool = False) -> str:  # fmt: skip
    """One self-contained page: the matrix view, then a collapsed section per cell (stages, start-up timeline,
    speed plot, speculation, KV, needles, flagged evidence, the log lines that decided a failed start-up).
    Logs are linked relative to ``page_dir`` (default ``<workdir>/reports``) and only when under ``workdir``."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("envbuilder.report", ""), autoescape=True,
                             undefined=jinja2.StrictUndefined)  # fmt: skip
    g = grid.build(results, rows, cols)
    in_matrix_order = [e.result for row in g.row_values for col in g.col_values for e in g.at(row, col)]
    views = [cell_view(r, workdir=workdir, page_dir=page_dir, baseline=baseline) for r in in_matrix_order]
    entries = {r.id: grid.entry(r, g.extra_axes) for r in results}
    return env.get_template("page.html.j2").render(
        title=title, version=__version__, generated=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        results=list(results), grid=g, views=views, entries=entries, anchors={v.result.id: v.anchor for v in views},
        counts=grid.counts(results), icon=grid.ICON, upgrades=list(upgrades), open_all=open_all, tail_of=_tail,
        svg_timeline=svg.timeline, phase_color=svg.PHASE_COLOR, svg_speed=svg.speed, svg_acceptance=svg.acceptance,
        fmt_value=upgrade_mod.fmt_value, fmt_delta=upgrade_mod.fmt_delta)  # fmt: skip


def to_junit(results: Sequence[CellResult]) -> str:
    """JUnit XML: one <testcase> per cell × stage (checks included).

    ``smoke`` sums up its checks; when they ran (``smoke.*`` entries), the ``smoke`` testcase stands for the
    start-up alone (it passed: the checks run only against a ready server), so no failure is counted twice.
    """
    suite = ET.Element("testsuite", name="envbuilder")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total = 0.0
    for r in results:
        checks_ran = any(s.name.startswith("smoke.") for s in r.stages)
        for s in r.stages:
            if s.name == "smoke" and checks_ran:
                s = StageResult(name=s.name, status=Status.PASS, message="started; its checks are the smoke.* cases",
                                duration_s=s.duration_s)  # fmt: skip
            tc = ET.SubElement(suite, "testcase", classname=xml_text(r.id), name=xml_text(s.name),
                               time=f"{s.duration_s:.3f}")  # fmt: skip
            counts["tests"] += 1
            total += s.duration_s
            msg = xml_text(s.message)
            if s.status is Status.FAIL:
                ET.SubElement(tc, "failure", message=msg[:1000], type=s.reason.value).text = msg
                counts["failures"] += 1
            elif s.status is Status.ERROR:
                ET.SubElement(tc, "error", message=msg[:1000], type=s.reason.value).text = msg
                counts["errors"] += 1
            elif s.status is Status.SKIP:
                ET.SubElement(tc, "skipped", message=f"{s.reason.value}: {msg}"[:1000])
                counts["skipped"] += 1
    for k, v in counts.items():
        suite.set(k, str(v))
    suite.set("time", f"{total:.3f}")
    suites = ET.Element("testsuites", name="envbuilder", tests=str(counts["tests"]), failures=str(counts["failures"]),
                        errors=str(counts["errors"]), skipped=str(counts["skipped"]), time=f"{total:.3f}")  # fmt: skip
    suites.append(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def to_json(results: Sequence[CellResult]) -> str:
    return json.dumps([r.to_json() for r in results], indent=2) + "\n"


def render(results: Sequence[CellResult], fmt: str, *, workdir: Path | None = None, page_dir: Path | None = None,
           rows: str | Sequence[str] | None = None, cols: str | Sequence[str] | None = None,
           expand: bool = False, baseline: float | None = None) -> str:  # fmt: skip
    """One report format, every credential redacted (:func:`envbuilder.redact.redact`). With ``workdir``, the
    page links its logs and shows watch's upgrade views."""
    upgrades = upgrade_mod.from_watch(workdir) if workdir is not None else []
    if fmt == "md":
        text = to_markdown(results, rows=rows, cols=cols) + "".join("\n" + upgrade_mod.markdown(u) for u in upgrades)
    elif fmt == "html":
        text = to_html(results, workdir=workdir, page_dir=page_dir, rows=rows, cols=cols, open_all=expand,
                       baseline=baseline, upgrades=upgrades)
    elif fmt == "junit":
        text = to_junit(results)
    elif fmt == "json":
        text = to_json(results)
    else:
        raise ValueError(fmt)
    return redact(text)
