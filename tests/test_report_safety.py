"""Reports of results that came from elsewhere (CI artifacts): paths, escaping, control characters.
The report views must keep using ``report._md_escape`` (Markdown), ``report.xml_text`` (JUnit) and
``report.render`` (which redacts)."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from envbuilder import report
from envbuilder.cli import main
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status
from tests.conftest import Ran, write


def cli(*args: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


def _result(cell_id: str, log: str = "", message: str = "boom") -> dict[str, object]:
    return {"schema": 1, "id": cell_id, "axes": {"sglang": "0.5.11"}, "hash": "h", "verdict": "fail",
            "stages": [{"name": "smoke", "status": "fail", "reason": "crash", "message": message, "duration_s": 1.0,
                        "inputs": "i", "details": {"log": log} if log else {}}], "env": {}}  # fmt: skip


def test_merge_refuses_ids_that_leave_the_workdir(tmp_path: Path) -> None:
    wd = tmp_path / "deep" / "wd"
    for bad in ("../../../x", str(tmp_path / "abs"), "..", "a/b", "x\n"):
        f = write(tmp_path / "in" / "r.json", json.dumps(_result(bad)))
        r = cli("--workdir", str(wd), "merge", str(f))
        assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r
        assert str(f) in r.err and ": id: " in r.err
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_relative_to(tmp_path / "in")]
    assert written == [], written


def test_html_inlines_only_logs_envbuilder_wrote(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    own = write(wd / "logs" / "cell-a" / "smoke.log", "OWN LOG LINE\n")
    secret = write(tmp_path / "secret.txt", "root:x:0:0:PRIVATE\n")
    link = wd / "logs" / "cell-c" / "smoke.log"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    files = [write(tmp_path / "in" / f"{i}.json", json.dumps(_result(cid, log)))
             for i, (cid, log) in enumerate([("cell-a", str(own)), ("cell-b", "/etc/passwd"), ("cell-c", str(link)),
                                             ("cell-d", str(secret))])]  # fmt: skip
    assert cli("--workdir", str(wd), "merge", *map(str, files)).code == 1
    r = cli("--workdir", str(wd), "--matrix", str(tmp_path / "none.toml"), "report", "--format", "html")
    assert r.code == 1 and "cell-a/smoke.log" in r.out  # its own log is linked (the report decides what it shows)
    assert "root:" not in r.out and "PRIVATE" not in r.out and "secret.txt" not in r.out and "/etc/passwd" not in r.out


def test_markdown_escapes_axis_names_values_and_messages() -> None:
    r = CellResult(id="c1", axes={"a|b<i>": "x|y", "cuda": "13.0"},
                   stages=(StageResult(name="smoke", status=Status.FAIL, reason=Reason.CRASH, message="m|<b>bold</b>"),))
    r2 = CellResult(id="c2", axes={"a|b<i>": "z", "cuda": "12.8"}, stages=(StageResult(name="smoke", status=Status.PASS),))
    md = report.render([r, r2], "md")
    header = next(line for line in md.splitlines() if line.startswith("| cell |"))
    assert header.count("|") - header.count("\\|") == 6, header  # cell, 2 axes, 1 stage, verdict: 6 separators
    assert "<i>" not in md and "<b>" not in md and "a\\|b&lt;i&gt;" in md
    per_axis = next(line for line in md.splitlines() if line.startswith("**Per axis:**"))
    assert "a\\|b&lt;i&gt; x\\|y: 0/1 pass" in per_axis


def test_junit_is_well_formed_with_control_characters(tmp_path: Path) -> None:
    msg = "\x1b[31mred\x1b[0m NUL\x00 bell\x07 vt\x0b ok"
    res = [CellResult(id="c1", axes={"a": "1"}, stages=(
        StageResult(name="smoke", status=Status.FAIL, reason=Reason.CRASH, message=msg),
        StageResult(name="build", status=Status.ERROR, reason=Reason.BUILD_FAILED, message=msg),
        StageResult(name="import", status=Status.SKIP, reason=Reason.NO_GPU, message=msg)))]  # fmt: skip
    xml = report.render(res, "junit")
    root = ET.fromstring(xml)  # well-formed: parses back
    failure = root.find("testsuite/testcase[@name='smoke']/failure")
    assert failure is not None and failure.text == "red NUL bell vt ok"
    ResultStore(tmp_path / "wd" / "results").save(res[0])
    r = cli("--workdir", str(tmp_path / "wd"), "--matrix", str(tmp_path / "none.toml"), "report", "--format", "junit")
    ET.fromstring(r.out)
