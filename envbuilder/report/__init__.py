"""Reports of the compatibility table: text table (rich), Markdown, one self-contained HTML page, JSON
(the result contract), JUnit XML (one test per cell × stage)."""

from __future__ import annotations

import datetime
import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import jinja2

from envbuilder import __version__
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


def to_markdown(results: Sequence[CellResult], title: str = "envbuilder compatibility table") -> str:
    cols = stage_columns(results)
    axes = axes_of(results)
    notes: list[str] = []
    lines = [f"## {title}", "", "| cell | " + " | ".join(axes) + " | " + " | ".join(cols) + " | verdict |",
             "|" + "---|" * (len(axes) + len(cols) + 2)]  # fmt: skip
    for r in results:
        row = [f"`{r.id}`", *(r.axes.get(a, "") for a in axes)]
        for c in cols:
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
    summary = summary_by_axis(results)
    if summary:
        lines += ["", "**Per axis:** " + "; ".join(f"{a} {v}: {p}/{n} pass" for a, v, p, n in summary)]
    if notes:
        lines += ["", "<details><summary>Why (footnotes)</summary>", ""]
        lines += [f"{i}. {_md_escape(n)}" for i, n in enumerate(notes, 1)]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.pass{background:#d9f7d9}.fail{background:#fbd5d5}.error{background:#fde9c8}.skip{background:#eee}
code,pre{font:12px ui-monospace,monospace}pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:24em}
</style></head><body>
<h1>{{ title }}</h1>
<p>envbuilder {{ version }} · {{ generated }} · {{ results|length }} cell(s)</p>
<table><thead><tr><th>cell</th>{% for a in axes %}<th>{{ a }}</th>{% endfor %}{% for c in cols %}<th>{{ c }}</th>{% endfor %}<th>verdict</th></tr></thead>
<tbody>{% for r in results %}<tr><td><code>{{ r.id }}</code></td>{% for a in axes %}<td>{{ r.axes.get(a, "") }}</td>{% endfor %}
{% for c in cols %}{% set s = r.stage(c) %}{% if s %}<td class="{{ s.status.value }}" title="{{ s.message }}">{{ label(s) }}</td>{% else %}<td></td>{% endif %}{% endfor %}
<td class="{{ r.verdict.value }}"><b>{{ r.verdict.value }}</b></td></tr>{% endfor %}</tbody></table>
{% if summary %}<h2>Per axis</h2><ul>{% for a, v, p, n in summary %}<li>{{ a }} {{ v }}: {{ p }}/{{ n }} pass</li>{% endfor %}</ul>{% endif %}
{% for r, s, excerpt in failures %}<h3 id="{{ r.id }}-{{ s.name }}"><code>{{ r.id }}</code> · {{ s.name }}: {{ label(s) }}</h3>
<p>{{ s.message }}</p>{% if excerpt %}<pre>{{ excerpt }}</pre>{% endif %}{% endfor %}
</body></html>
"""


def log_excerpt(s: StageResult, lines: int = 40) -> str:
    """The end of a failing stage's log (or uv's explanation), for the HTML page."""
    for key in ("uv_stderr", "traceback"):
        if isinstance(s.details.get(key), str):
            return "\n".join(str(s.details[key]).splitlines()[-lines:])
    path = s.details.get("log")
    if isinstance(path, str) and Path(path).is_file():
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    texts = s.details.get("texts") or s.details.get("prompts")
    if isinstance(texts, list):
        return json.dumps(texts[:5], indent=1)[:4000]
    return ""


def to_html(results: Sequence[CellResult], title: str = "envbuilder compatibility table") -> str:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    failures = [(r, s, log_excerpt(s)) for r in results for s in r.stages if s.status in (Status.FAIL, Status.ERROR)]
    return env.from_string(_HTML).render(
        title=title, version=__version__, generated=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        results=list(results), axes=axes_of(results), cols=stage_columns(results), summary=summary_by_axis(results),
        failures=failures, label=label)  # fmt: skip


def to_junit(results: Sequence[CellResult]) -> str:
    """JUnit XML: one <testcase> per cell × stage (checks included)."""
    suite = ET.Element("testsuite", name="envbuilder")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total = 0.0
    for r in results:
        for s in r.stages:
            tc = ET.SubElement(suite, "testcase", classname=r.id, name=s.name, time=f"{s.duration_s:.3f}")
            counts["tests"] += 1
            total += s.duration_s
            if s.status is Status.FAIL:
                ET.SubElement(tc, "failure", message=s.message[:1000], type=s.reason.value).text = s.message
                counts["failures"] += 1
            elif s.status is Status.ERROR:
                ET.SubElement(tc, "error", message=s.message[:1000], type=s.reason.value).text = s.message
                counts["errors"] += 1
            elif s.status is Status.SKIP:
                ET.SubElement(tc, "skipped", message=f"{s.reason.value}: {s.message}"[:1000])
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


def render(results: Sequence[CellResult], fmt: str) -> str:
    if fmt == "md":
        return to_markdown(results)
    if fmt == "html":
        return to_html(results)
    if fmt == "junit":
        return to_junit(results)
    if fmt == "json":
        return to_json(results)
    raise ValueError(fmt)
