"""Reports in every format, pin / pin --check, watch --dry-run, ci-matrix -> merge round trip."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from envbuilder import report
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status
from tests.conftest import envbuilder, write

EVIL = "<script>alert('x')</script>"


def _results() -> list[CellResult]:
    ok = CellResult(id="sglang-0.5.11_cu13.0", axes={"sglang": "0.5.11", "cuda": "13.0"}, stages=(
        StageResult(name="resolve", status=Status.PASS, message="179 packages", duration_s=7.1),
        StageResult(name="smoke", status=Status.PASS, message="ready", duration_s=130.0),
    ))
    bad = CellResult(id="sglang-0.5.9_cu12.8", axes={"sglang": "0.5.9", "cuda": "12.8"}, stages=(
        StageResult(name="resolve", status=Status.PASS, message="ok"),
        StageResult(name="smoke", status=Status.FAIL, reason=Reason.DEGENERATE, message=f"degenerate: {EVIL}",
                    details={"texts": [{"id": "golden:x", "text": EVIL}]}),
        StageResult(name="smoke.degeneracy", status=Status.FAIL, reason=Reason.DEGENERATE, message=EVIL),
    ))
    skipped = CellResult(id="sglang-0.5.10_cu12.8", axes={"sglang": "0.5.10", "cuda": "12.8"}, stages=(
        StageResult(name="resolve", status=Status.ERROR, reason=Reason.NETWORK, message="index unreachable"),
        StageResult(name="smoke", status=Status.SKIP, reason=Reason.PREREQUISITE_FAILED, message="not run"),
    ))
    return [ok, bad, skipped]


def test_markdown_has_table_footnotes_and_axis_summary() -> None:
    md = report.to_markdown(_results())
    assert "| `sglang-0.5.9_cu12.8` | 0.5.9 | 12.8 |" in md
    assert "❌ fail: degenerate [1]" in md and "sglang 0.5.11: 1/1 pass" in md and "cuda 12.8: 0/2 pass" in md
    assert "<script>" not in md  # escaped for PR comments


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_one_page_with_escaped_model_output() -> None:
    html = report.to_html(_results())
    p = _Collect()
    p.feed(html)
    assert "script" not in p.tags  # the model's <script> is text, not markup
    assert any(EVIL in t for t in p.text)
    assert "&lt;script&gt;" in html and "<link" not in html and "src=" not in html  # self-contained
    assert p.tags.count("details") == 3  # one collapsed section per cell
    assert html.count('class="sq ') == 3 and html.count('class="rowh"') == 3  # the matrix: one row per sglang


def test_junit_one_testcase_per_cell_and_stage() -> None:
    xml = report.to_junit(_results())
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    # JUnit schema: testsuite has name/tests/failures/errors/skipped/time; testcase has name/classname/time
    for attr in ("name", "tests", "failures", "errors", "skipped", "time"):
        assert attr in suite.attrib
    cases = suite.findall("testcase")
    assert len(cases) == 7 and all({"name", "classname", "time"} <= set(c.attrib) for c in cases)
    # the smoke failure is the degeneracy check's: counted once (the smoke case is the start-up, which passed)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("7", "1", "1", "1")
    assert suite.find("testcase[@classname='sglang-0.5.9_cu12.8'][@name='smoke']/failure") is None
    failure = suite.find("testcase[@name='smoke.degeneracy']/failure")
    assert failure is not None and failure.get("type") == "degenerate" and failure.text == EVIL


def test_json_is_the_result_contract() -> None:
    data = json.loads(report.to_json(_results()))
    assert [d["verdict"] for d in data] == ["pass", "fail", "error"]
    assert CellResult.from_json(data[1]) == _results()[1]


def test_ci_matrix_then_merge_round_trip(tmp_path: Path) -> None:
    r = envbuilder("ci-matrix", "--format", "github")
    assert r.code == 0
    doc = json.loads(r.out)
    assert len(doc["include"]) == 8 and all("cell" in j and "sglang" in j for j in doc["include"])
    chunked = json.loads(envbuilder("ci-matrix", "--max-jobs", "3").out)
    assert [len(c["include"]) for c in chunked["chunks"]] == [3, 3, 2]
    # each "job" uploads its result; merge combines them
    jobs = []
    for i, res in enumerate(_results()):
        d = tmp_path / f"job{i}"
        ResultStore(d).save(res)
        jobs.append(str(d))
    ResultStore(tmp_path / "job0-again").save(_results()[0])  # an identical duplicate is fine
    m = envbuilder("--workdir", str(tmp_path / "wd"), "--matrix", str(tmp_path / "none.toml"), "merge", *jobs,
                   str(tmp_path / "job0-again"), "--json")
    assert m.code == 1  # one merged cell failed
    assert sorted(c["id"] for c in json.loads(m.out)) == sorted(r.id for r in _results())
    rep = envbuilder("--workdir", str(tmp_path / "wd"), "--matrix", str(tmp_path / "none.toml"), "report", "--format", "md")
    assert "sglang-0.5.9_cu12.8" in rep.out
    conflict = _results()[0].with_stage(StageResult(name="smoke", status=Status.FAIL, reason=Reason.OOM, message="oom"))
    ResultStore(tmp_path / "jobX").save(conflict)
    bad = envbuilder("--workdir", str(tmp_path / "wd2"), "merge", jobs[0], str(tmp_path / "jobX"))
    assert bad.code == 2 and "conflicts with" in bad.err


def test_report_all_writes_every_format(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    for r in _results():
        ResultStore(wd / "results").save(r)
    out = envbuilder("--workdir", str(wd), "--matrix", str(tmp_path / "none.toml"), "report", "--all")
    assert out.code == 1
    assert sorted(p.name for p in (wd / "reports").iterdir()) == ["envbuilder.html", "envbuilder.json", "envbuilder.md", "envbuilder.xml"]


@pytest.mark.network
def test_pin_refuses_unpassed_then_check_and_watch_dry_run(tmp_path: Path) -> None:
    m = write(tmp_path / "m.toml", '[matrix]\nsglang = ["0.5.10"]\ncuda = ["12.8"]\nos = ["ubuntu24.04"]\npython = ["3.12"]\n[model]\npath = "Qwen/Qwen3.6-27B"\n')
    base = ("--matrix", str(m), "--workdir", str(tmp_path / "wd"))
    assert envbuilder(*base, "resolve").code == 0
    cell = "sglang-0.5.10_cu12.8_drv-host_ubuntu24.04_py3.12"
    refused = envbuilder(*base, "pin", cell)
    assert refused.code == 2 and "has not passed every stage" in refused.err
    forced = envbuilder(*base, "pin", cell, "--force", "--json")  # only resolve ran: recorded as forced
    assert forced.code == 0, forced.err
    prov = json.loads(forced.out)
    assert prov["forced"] is True and prov["cell"] == cell and "smoke not run" in prov["not_passed"]
    pinned = tmp_path / "wd/locks/production/pylock.toml"
    assert pinned.read_bytes() == (tmp_path / f"wd/locks/{cell}/pylock.toml").read_bytes()
    ok = envbuilder(*base, "pin", "--check")
    assert ok.code == 0 and "matches" in ok.out
    text = pinned.read_text()
    assert '\nname = "torch"\nversion = "2.9.1"' in text
    pinned.write_text(text.replace('\nname = "torch"\nversion = "2.9.1"', '\nname = "torch"\nversion = "2.9.0"'))
    drifted = envbuilder(*base, "pin", "--check")
    assert drifted.code == 1 and "no longer matches" in drifted.out
    watch = envbuilder(*base, "watch", "--dry-run", "--json")
    assert watch.code == 0, watch.err
    cands = json.loads(watch.out)["candidates"]
    assert any(c["sglang"] == "0.5.11" for c in cands) and all(c["sglang"] != "0.5.10" for c in cands)
