"""The matrix layout, the terminal view's width, and what a cell's section shows — on the real H200 runs
committed under reports/h200-sglang-0.5.11 (SGLang 0.5.11 on an H200) and on the detector's calibration set."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from envbuilder import report, watch
from envbuilder.checks import degeneracy
from envbuilder.errors import InputError
from envbuilder.report import evidence, grid, terminal, upgrade, views
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status
from tests.conftest import ROOT, envbuilder

H200 = ROOT / "reports/h200-sglang-0.5.11"
CELL = "sglang-0.5.11_cu13.0_drv-host_ubuntu24.04_py3.12"


def h200(run: str) -> CellResult:
    r = ResultStore(H200 / run / "results").load(CELL)
    assert r is not None
    return r


def _cell(sglang: str, cuda: str, driver: str = "host", fa4: str = "resolver", status: Status = Status.PASS,
          reason: Reason = Reason.OK) -> CellResult:  # fmt: skip
    axes = {"sglang": sglang, "flash_attn_4": fa4, "cuda": cuda, "driver": driver, "os": "ubuntu24.04"}
    return CellResult(id=f"sglang-{sglang}_fa4-{fa4}_cu{cuda}_drv-{driver}", axes=axes, stages=(
        StageResult(name="resolve", status=Status.PASS),
        StageResult(name="precheck", status=status, reason=reason, message=f"{reason.value} here"),
    ))  # fmt: skip


def _matrix() -> list[CellResult]:
    return [_cell("0.5.11", "13.0", "590.48.01", status=Status.FAIL, reason=Reason.DRIVER_MISMATCH),
            _cell("0.5.10", "12.8"), _cell("0.5.9", "12.8", status=Status.FAIL, reason=Reason.VRAM_INSUFFICIENT),
            _cell("0.5.10", "12.8", fa4="4.0.0b3", status=Status.FAIL, reason=Reason.UNSATISFIABLE),
            _cell("0.5.11", "13.0"), _cell("0.5.9", "13.0", status=Status.ERROR, reason=Reason.NETWORK)]  # fmt: skip


def test_grid_places_cells_by_axes_versions_in_numeric_order() -> None:
    g = grid.build(_matrix())
    assert (g.rows, g.cols) == (("sglang",), ("cuda", "driver"))
    assert g.row_values == (("0.5.9",), ("0.5.10",), ("0.5.11",))  # not string order
    assert g.col_values == (("12.8", "host"), ("13.0", "590.48.01"), ("13.0", "host"))
    assert g.extra_axes == ("flash_attn_4",)
    two = g.at(("0.5.10",), ("12.8", "host"))
    assert [(e.short, e.extra) for e in two] == [("pass", "fa4 resolver"), ("unsatisfiable", "fa4 4.0.0b3")]
    assert g.at(("0.5.9",), ("13.0", "590.48.01")) == ()
    (e,) = g.at(("0.5.11",), ("13.0", "590.48.01"))
    assert (e.status, e.stage, e.short) == (Status.FAIL, "precheck", "driver-mismatch")
    flipped = grid.build(_matrix(), rows="cuda", cols="sglang,fa4".replace("fa4", "flash_attn_4"))
    assert flipped.row_values == (("12.8",), ("13.0",)) and flipped.extra_axes == ("driver",)
    with pytest.raises(InputError, match="--cols: no axis 'gpu'"):
        grid.build(_matrix(), cols="gpu")
    across = grid.build(_matrix(), cols="sglang")  # the default axis down steps aside for the one asked across
    assert across.cols == ("sglang",) and "sglang" not in across.rows and across.rows
    with pytest.raises(InputError, match="--cols: axis 'sglang' is already down"):
        grid.build(_matrix(), rows="sglang", cols="cuda,sglang")


def test_terminal_matrix_fits_120_columns_ids_on_demand() -> None:
    many = [_cell(s, c, d, status=Status.FAIL, reason=Reason.GRAPH_CAPTURE_FAILED)
            for s in ("0.5.9", "0.5.10", "0.5.11") for c in ("12.6", "12.8", "12.9", "13.0") for d in ("host", "590.48.01")]  # fmt: skip
    for ids in (False, True):
        con = Console(width=200, record=True, color_system=None)
        con.print(terminal.render(many, grid.build(many), ids=ids), width=terminal.WIDTH)
        text = con.export_text()
        assert max(len(line) for line in text.splitlines()) <= 120
        assert ("sglang-0.5.9_fa4-resolver_cu12.6_drv-host" in text) is ids
        assert text.count("✘") == 24 and "…" not in text  # every square shown, nothing cut
    out = envbuilder("--workdir", str(H200 / "random"), "--matrix", "none.toml", "report", "--ids")
    assert out.code == 1 and "✘ degenerate (smoke) [1]" in out.out and f"[1] {CELL}" in out.out
    assert "    smoke: 10/10 outputs degenerate (loop" in out.out and out.out.count("…") == 1  # the why, on one line
    assert max(len(line) for line in out.out.splitlines()) <= 120
    bad = envbuilder("--workdir", str(H200 / "random"), "--matrix", "none.toml", "report", "--rows", "gpu")
    assert bad.code == 2 and "--rows: no axis 'gpu'" in bad.err and "Traceback" not in bad.err
    for opt in ("--rows", "--cols"):
        empty = envbuilder("--workdir", str(H200 / "random"), "--matrix", "none.toml", "report", opt, "")
        assert empty.code == 2 and f"{opt}: names no axis" in empty.err and "Traceback" not in empty.err
        assert len(empty.err.strip().splitlines()) == 1, empty.err


def test_markdown_matrix_view_for_step_summaries() -> None:
    md = report.to_markdown(_matrix())
    assert "| sglang ↓  cuda · driver → | 12.8 · host | 13.0 · 590.48.01 | 13.0 · host |" in md
    assert "| **0.5.10** | ✅ pass (fa4 resolver)<br>❌ unsatisfiable (fa4 4.0.0b3) | · | · |" in md
    assert "6 cell(s): 2 pass, 3 fail, 1 error" in md


def test_timeline_from_real_milestones() -> None:
    smoke = h200("random").stage("smoke")
    assert smoke is not None
    tl = views.timeline(smoke.details["launch"])
    assert tl is not None and not tl.failed and tl.total_s == pytest.approx(91.115)
    totals = tl.totals()
    assert list(totals) == ["launch", "imports", "weights", "KV/state pools", "graph capture", "compile", "warm-up"]
    assert totals["imports"] == pytest.approx(63.015 - 28.148)  # first log line → "Load weight begin"
    assert totals["compile"] == pytest.approx(86.781 - 65.517)  # piecewise CUDA graph capture
    oom = h200("oom").stage("smoke")
    assert oom is not None
    tl_oom = views.timeline(oom.details["launch"])
    assert tl_oom is not None and tl_oom.failed == "oom" and list(tl_oom.totals()) == ["launch", "imports", "weights"]
    svg = str(report.svg.timeline(tl_oom))
    assert svg.startswith("<svg") and "failed: oom" in svg and "<script" not in svg


def test_every_degenerate_text_gets_a_flagged_span() -> None:
    """The detector's labelled sets: every text it calls degenerate (except empty ones) has a span to flag,
    inside the text, where the detector's own findings say."""
    n = 0
    for name in ("degeneracy-calibration.jsonl", "degeneracy-heldout.jsonl"):
        for line in (ROOT / "tests/fixtures" / name).read_text().splitlines():
            d = json.loads(line)
            v = degeneracy.detect(d["text"], finish_reason=d.get("finish_reason"))
            if not v.degenerate or "empty" in v.signals:
                continue
            n += 1
            spans = evidence.degeneracy_spans(d["text"], v.signals)
            assert spans, (d["id"], v.explain())
            assert all(0 <= s.start < s.end <= len(d["text"]) for s in spans)
            assert min(s.start for s in spans) == v.turned_at or not any(f.strong for f in v.findings)
    assert n >= 50


def test_spans_name_what_is_wrong() -> None:
    text = "The answer is " + "message" * 20
    (unit, rest) = evidence.degeneracy_spans(text, ["loop", "runaway"])
    assert text[unit.start : unit.end] == "message" and unit.kind == "loop-unit" and "repeated" in unit.note
    assert unit.start == len("The answer is ") and rest.end == len(text) and rest.kind == "loop"
    word = evidence.degeneracy_spans("Sure. " + "Naval " * 12, ["loop"])
    assert word and "Naval" in word[0].note
    soup = "Hello there, " + "!" * 40 + " and more words here to read"
    assert [s.kind for s in evidence.degeneracy_spans(soup)] == ["symbols"]
    stored = evidence.stored_findings([{"signal": "loop", "start": 14, "end": 5000, "detail": "'message' repeated"}])
    assert stored is not None and evidence.degeneracy_spans(text, findings=stored)[-1].end == len(text)  # clipped
    assert [(s.start, s.end) for s in evidence.number_spans("It is 42, not 41.", 41)] == [(6, 8)]
    assert evidence.golden_spans("Paris", {"contains": ["paris"]}) == []  # a plain miss: nothing to flag
    cut = evidence.pieces("x" * 5000 + "BAD" + "y" * 5000, [evidence.Span(start=5000, end=5003, kind="number")])
    assert cut[0].kind == "cut" and cut[-1].kind == "cut" and any(p.text == "BAD" and p.kind == "number" for p in cut)
    assert sum(len(p.text) for p in cut if not p.kind) <= evidence.SHOWN_CHARS


def test_cell_view_of_the_h200_runs(tmp_path: Path) -> None:
    wd = H200 / "random"
    v = views.cell_view(h200("random"), workdir=wd)
    assert v.speed is not None and [p.concurrency for p in v.speed.points] == [1, 4, 16]
    assert v.speed.decode_tokens_per_s == pytest.approx(853.17) and v.speed.baseline_tokens_per_s is None
    assert v.needles is not None and v.needles.lengths == (2000, 6000) and not any(p.found for p in v.needles.probes)
    assert v.kv is not None and v.kv.logged_tokens == 1606158 and v.kv.predicted_tokens is None
    # every degenerate text of the run is shown once, flagged: golden answers and needles carry their signals
    texts = h200("random").stage("smoke.degeneracy").details["texts"]  # type: ignore[union-attr]
    assert len(texts) == 10
    flagged = [e for e in v.evidence if any(p.kind == "loop-unit" for p in e.answer)]
    # 3 golden answers, 2 needle answers (one per length: the same text at every depth), speed:single
    assert len(flagged) == len(v.evidence) == 6
    assert [e.title for e in v.evidence if e.check == "smoke.long-context"] == [
        "needle at 2000 tokens, depths 0.1, 0.5, 0.9", "needle at 6000 tokens, depths 0.1, 0.5, 0.9"]
    assert [e.title for e in v.evidence if e.check == "smoke.degeneracy"] == ["speed:single: compression, runaway"]
    capital = next(e for e in v.evidence if e.title == "golden prompt capital")
    assert capital.prompt.startswith("What is the capital") and capital.expected == "contains 'Paris'"
    assert next(p.text for p in capital.answer if p.kind == "loop-unit") == "message"
    assert any(n.startswith("degenerate: loop") for n in capital.notes)
    assert [(link.name, link.href) for link in v.logs] == [("server.log", f"../logs/{CELL}/server.log")]
    # the failed start-up: the log line the failure quotes is marked
    oom = views.cell_view(h200("oom"), workdir=H200 / "oom")
    assert oom.log_tail is not None and oom.log_tail.hit is not None
    assert oom.log_tail.lines[oom.log_tail.hit].startswith("RuntimeError: Not enough memory")
    # a log outside the workdir is never read nor linked
    (tmp_path / "results").mkdir()
    assert views.cell_view(h200("oom"), workdir=tmp_path).logs == ()
    assert views.resolve_log(tmp_path, CELL, "/etc/passwd") is None
    (tmp_path / "logs" / CELL).mkdir(parents=True)
    (tmp_path / "logs" / CELL / "passwd").symlink_to("/etc/passwd")
    (tmp_path / "logs" / CELL / "server.log").symlink_to("/etc/passwd")
    assert views.resolve_log(tmp_path, CELL, "/etc/passwd") is None  # not a .log file
    assert views.resolve_log(tmp_path, CELL, str(tmp_path / "logs" / CELL / "server.log")) is None  # leaves logs/
    spec = views.cell_view(h200("spec"), workdir=H200 / "spec")
    assert spec.spec is not None and spec.spec.acceptance_length == pytest.approx(3.673, abs=1e-3)
    assert spec.spec.identical_fraction == 1.0 and spec.spec.floor == 2.5


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


@pytest.mark.parametrize("run", ["h200-sglang-0.5.11/plain", "h200-sglang-0.5.11/random", "h200-sglang-0.5.11/oom",
                                 "h200-sglang-0.5.11/spec", "h200-sglang-0.5.17/plain-0.5.17",
                                 "h200-sglang-0.5.17/spec-0.5.17"])  # fmt: skip
def test_html_of_each_committed_h200_run(run: str) -> None:
    """Every committed GPU run: the matrix, a timeline, a speed plot where speed ran, every degenerate text flagged."""
    wd = ROOT / "reports" / run
    (r,) = ResultStore(wd / "results").all()
    html = report.to_html([r], workdir=wd)
    p = _Tags()
    p.feed(html)
    tags = [t for t, _ in p.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    assert 'class="matrix"' in html and tags.count("details") == 1
    assert not any(a.get("open") is not None for t, a in p.tags if t == "details")  # collapsed by default
    assert 'class="timeline"' in html
    assert ("tok/s by concurrency" in html) is (r.stage("smoke.speed") is not None)
    assert f'href="../logs/{r.id}/server.log"' in html
    deg = r.stage("smoke.degeneracy")
    bad = [t for t in (deg.details.get("texts") or []) if t.get("verdict") == "degenerate"] if deg else []
    shown = {e.answer and "".join(x.text for x in e.answer) for e in views.cell_view(r, workdir=wd).evidence}
    for t in bad:  # each degenerate text's flagged answer is on the page (identical answers shown once)
        assert any(t["text"].strip()[:40] in s for s in shown if s), t["id"]
    assert html.count('<mark class="loop-unit"') == (6 if run.endswith("random") else 0)
    if run.endswith("oom"):
        assert '<li class="hit">RuntimeError: Not enough memory' in html


def test_model_output_is_escaped_everywhere() -> None:
    evil = "<img src=x onerror=alert(1)>"
    r = h200("random")
    smoke_deg = r.stage("smoke.degeneracy")
    assert smoke_deg is not None
    texts = [{**t, "text": evil * 8, "id": f"{evil}"} for t in smoke_deg.details["texts"]]
    bad = r.with_stage(StageResult(name="smoke.degeneracy", status=Status.FAIL, reason=Reason.DEGENERATE,
                                   message=evil, details={"texts": texts}))  # fmt: skip
    bad = CellResult(id=bad.id, axes={**bad.axes, "sglang": evil}, stages=bad.stages)
    html = report.to_html([bad], upgrades=[upgrade.from_results(h200("plain"), bad, [{"name": evil, "old": "1", "new": "2"}])])
    p = _Tags()
    p.feed(html)
    assert not any(t == "img" for t, _ in p.tags) and "&lt;img src=x" in html
    md = report.to_markdown([bad])
    assert "<img" not in md


def test_upgrade_view_from_real_results() -> None:
    """Pinned: the plain H200 run; candidate: the run with speculation (slower on this tiny model)."""
    diff: list[dict[str, str | None]] = [{"name": "sglang", "old": "0.5.10", "new": "0.5.11"}, {"name": "kernels", "old": "0.14.0", "new": "0.17.2"},
            {"name": "flash-attn-4", "old": None, "new": "4.0.0b9"}]  # fmt: skip
    u = upgrade.from_results(h200("plain"), h200("spec"), diff)
    assert u.safe and not u.reasons
    decode = next(m for m in u.metrics if m.name == "decode")
    assert decode.pinned == pytest.approx(549.56) and decode.candidate == pytest.approx(121.52) and decode.worse
    assert upgrade.fmt_delta(decode) == "-77.9%"
    html = report.to_html([h200("spec")], upgrades=[u])
    assert "Upgrade: <code>" in html and "safe to upgrade" in html and "-77.9%" in html and "kernels" in html and "4.0.0b9" in html
    md = upgrade.markdown(u)
    assert "| decode | 550 tok/s | 122 tok/s | -77.9% |" in md and "kernels 0.14.0 → 0.17.2" in md
    unsafe = upgrade.from_results(h200("plain"), h200("random"), diff)
    assert not unsafe.safe and any(r.startswith("smoke: fail degenerate") for r in unsafe.reasons)
    con = Console(width=120, record=True, color_system=None)
    con.print(upgrade.table(unsafe))
    text = con.export_text()
    assert "NOT safe" in text and re.search(r"decode\s+│\s+550 tok/s\s+│\s+853 tok/s\s+│\s+\+55.2%", text), text


def test_merge_prints_the_matrix_within_120_columns(tmp_path: Path) -> None:
    """What `run` and `merge` print: the matrix view of what the stages decided, not a column per stage."""
    jobs = []
    for i, r in enumerate(_matrix()):
        ResultStore(tmp_path / f"job{i}").save(r)
        jobs.append(str(tmp_path / f"job{i}"))
    out = envbuilder("--workdir", str(tmp_path / "wd"), "--matrix", str(tmp_path / "none.toml"), "merge", *jobs)
    assert out.code == 1, out.err
    lines = out.out.splitlines()
    assert lines[0].startswith("envbuilder matrix: sglang ↓, cuda · driver →")
    assert max(len(line) for line in lines) <= 120 and "✘ driver-mismatch (precheck)" in out.out
    assert "6 cell(s): 2 pass, 3 fail, 1 error" in out.out


def test_the_pins_baseline_is_drawn_into_the_speed_plot(tmp_path: Path) -> None:
    """`pin` stores the pinned cell's decode tok/s; `report --format html` draws it as the dashed line."""
    wd = tmp_path / "wd"
    ResultStore(wd / "results").save(h200("spec"))
    assert report.pinned_baseline(wd) is None
    no_pin = report.render([h200("spec")], "html", workdir=wd, baseline=report.pinned_baseline(wd))
    assert "no pinned baseline yet" in no_pin and "stroke-dasharray=\"5 4\"" not in no_pin
    (wd / "locks/production").mkdir(parents=True)
    (wd / "locks/production/provenance.json").write_text(json.dumps({"baseline": {"decode_tokens_per_s": 549.56}}))
    out = envbuilder("--workdir", str(wd), "--matrix", str(tmp_path / "none.toml"), "report", "--format", "html")
    assert out.code == 0 and "pinned 549.6" in out.out and "dashed: the pinned baseline (550 tok/s)" in out.out


def test_kv_prediction_is_drawn_when_stored() -> None:
    """Predicted vs logged KV tokens, as the smoke stage stores them (``kv_tokens``)."""
    r = h200("random")
    smoke = r.stage("smoke")
    assert smoke is not None
    stored = {"predicted": 1_700_000, "logged": 1_606_158, "off": 0.0584, "within_tolerance": True, "tolerance": 0.15}
    with_kv = r.with_stage(StageResult(name="smoke", status=smoke.status, reason=smoke.reason, message=smoke.message,
                                       details={**smoke.details, "kv_tokens": stored}))  # fmt: skip
    kv = views.cell_view(with_kv).kv
    assert kv is not None and (kv.predicted_tokens, kv.logged_tokens, kv.within) == (1_700_000, 1_606_158, True)
    html = report.to_html([with_kv])
    assert "1,700,000" in html and "(+5.8%)" in html
    why = {"predicted": None, "logged": 1_606_158, "why_no_prediction": "config.json not found"}
    no = r.with_stage(StageResult(name="smoke", status=smoke.status, reason=smoke.reason, message=smoke.message,
                                  details={**smoke.details, "kv_tokens": why}))  # fmt: skip
    assert "config.json not found" in report.to_html([no])
    assert "no prediction stored" in report.to_html([r])  # the committed run predates the prediction


def test_lossy_speculation_shows_where_the_outputs_part() -> None:
    r = h200("spec")
    spec = r.stage("smoke.spec")
    assert spec is not None
    lossy = r.with_stage(StageResult(name="smoke.spec", status=Status.FAIL, reason=Reason.SPEC_LOSSY, message="lossy",
                                     details={**spec.details, "identical_fraction": 0.667, "first_diverging": {
                                         "id": "capital", "with_spec": "The capital of France is Lyon.",
                                         "without_spec": "The capital of France is Paris."}}))  # fmt: skip
    (ev,) = views.cell_view(lossy).evidence
    assert ev.check == "smoke.spec" and "Paris" in ev.expected
    assert [(p.text, p.kind) for p in ev.answer] == [("The capital of France is ", ""), ("Lyon.", "diverge")]


def test_timeline_knows_every_graph_capture_kind() -> None:
    """Target, draft and prefill graph captures (the names newer SGLang releases' logs give) are graph capture."""
    launch = {"status": "pass", "ready_s": 30.0, "milestones": [
        {"name": "first_log", "t": 2.0}, {"name": "load_weight_begin", "t": 10.0}, {"name": "load_weight_end", "t": 12.0},
        {"name": "kv_cache", "t": 13.0}, {"name": "graph_capture_begin", "t": 13.5}, {"name": "graph_capture_end", "t": 18.0},
        {"name": "draft_graph_capture_end", "t": 21.0}, {"name": "prefill_graph_capture_begin", "t": 21.5},
        {"name": "prefill_graph_capture_end", "t": 25.0}, {"name": "some_new_line", "t": 26.0}, {"name": "ready", "t": 30.0}]}  # fmt: skip
    tl = views.timeline(launch)
    assert tl is not None
    assert tl.totals() == {"launch": 2.0, "imports": 8.0, "weights": 2.0, "KV/state pools": 1.5, "graph capture": 8.0,
                           "compile": 3.5, "warm-up": 5.0}  # fmt: skip


def test_watch_summary_plugs_into_the_report(tmp_path: Path) -> None:
    """watch's record (<workdir>/watch/summary.json) with the pin = the plain H200 run and a candidate release
    (the H200 run with speculation, as the next release's cell): `report --format html` shows both side by side."""
    wd = tmp_path / "wd"
    store = ResultStore(wd / "results")
    pinned = h200("plain")
    cand_id = CELL.replace("sglang-0.5.11", "sglang-0.5.12")
    cand = h200("spec")
    cand = CellResult(id=cand_id, axes={**cand.axes, "sglang": "0.5.12"}, hash=cand.hash, stages=cand.stages, env=cand.env)
    store.save(pinned)
    store.save(cand)
    blocked = watch.ReleaseVerdict(version="0.5.12", cell=cand_id, uploaded="2026-05-20", verdict=watch.BLOCKED,
                                   reasons=("smoke.speed: perf-regression — decode 121.5 tok/s < 494.6",),
                                   changes=("--speculative-algorithm STANDALONE",))  # fmt: skip
    not_run = watch.ReleaseVerdict(version="0.5.13", cell="not-run-yet", uploaded="?", verdict=watch.UNDECIDED)
    summary = watch.UpgradeSummary(package="sglang", pinned_cell=CELL, pinned_version="0.5.11", launch_args=(),
                                   created="2026-12-03T07:00:00+00:00", gpu=True, releases=(blocked, not_run))  # fmt: skip
    (wd / "watch").mkdir(parents=True)
    (wd / "watch/summary.json").write_text(json.dumps(summary.to_json()))  # as `watch` stores it
    ups, later = upgrade.from_watch(wd)
    assert ups.label == "blocked" and not ups.safe and ups.candidate.id == cand_id and ups.moved == ()
    assert later.label == "undecided" and later.candidate.stages == ()  # judged nothing yet: the record alone
    step_summary = tmp_path / "step-summary.md"  # GitHub Actions' $GITHUB_STEP_SUMMARY
    out = envbuilder("--workdir", str(wd), "--matrix", str(tmp_path / "none.toml"), "report", "--all", "--quiet",
                     env={"GITHUB_STEP_SUMMARY": str(step_summary)})  # fmt: skip
    assert out.code == 0, out.err
    html = (wd / "reports/envbuilder.html").read_text()
    assert "Upgrade: <code>" in html and "blocked" in html and "perf-regression" in html and "-77.9%" in html
    summary_md = step_summary.read_text()
    assert "| sglang ↓  cuda · driver → | 13.0 · host |" in summary_md and "❌ blocked" in summary_md
    md = report.render(store.all(), "md", workdir=wd)
    assert "### Upgrade: `" in md and "❌ blocked" in md
    (wd / "watch/summary.json").write_text("{}")
    with pytest.raises(InputError, match=r"summary\.json: not a watch summary"):
        report.render(store.all(), "html", workdir=wd)


def test_no_results_yet() -> None:
    assert "No results yet" in report.to_html([]) and "No results yet" in report.to_markdown([])
    con = Console(width=120, record=True, color_system=None)
    con.print(terminal.render([], grid.build([])))
    assert "no results yet" in con.export_text()


def test_a_stage_not_asked_for_decides_nothing() -> None:
    r = CellResult(id="c", axes={"sglang": "0.5.11"}, stages=(
        StageResult(name="build", status=Status.SKIP, reason=Reason.NOT_APPLICABLE, message="custom command"),
        StageResult(name="smoke", status=Status.SKIP, reason=Reason.NO_GPU, message="no GPU on this machine"),
    ))  # fmt: skip
    assert r.verdict is Status.SKIP
    e = grid.entry(r, ())
    assert (e.stage, e.short) == ("smoke", "no-gpu")


def test_upgrade_view_from_the_summary_alone(tmp_path: Path) -> None:
    """No stored results (a summary copied from the watch runner): the view still shows watch's verdict, the
    stages it recorded, the changes and fixes."""
    rel = watch.ReleaseVerdict(version="0.5.14", cell="sglang-0.5.14_cu13.0", uploaded="2026-06-01",
                               verdict=watch.SAFE_TO_TRY, changes=("flash-attn-4 4.0.0b15", "sglang-kernel 0.4.4"),
                               notes=("--cuda-graph-max-bs is deprecated",),
                               stages=(("resolve", "pass", "ok"), ("import", "pass", "ok"), ("smoke", "skip", "no-gpu")))  # fmt: skip
    summary = watch.UpgradeSummary(package="sglang", pinned_cell=CELL, pinned_version="0.5.11", launch_args=(),
                                   created="2026-12-03T07:00:00+00:00", gpu=False, releases=(rel,))  # fmt: skip
    (up,) = upgrade.from_summary(summary, tmp_path)
    assert up.label == "safe to try on a GPU" and not up.safe and up.candidate.verdict is Status.SKIP
    html = report.to_html([], upgrades=[up])
    assert "safe to try on a GPU" in html and "pinned (result not in this workdir)" in html
    assert "changed: flash-attn-4 4.0.0b15" in html and ">import</span>" in html
    assert "| verdict | – | skip | |" in upgrade.markdown(up)


def test_upgrade_views_of_the_real_watch_run(tmp_path: Path) -> None:
    """reports/watch-0.5.11/summary.json: watch's record of the 0.5.11 pin over 0.5.12–0.5.23 on a CPU machine."""
    summary = watch.UpgradeSummary.from_json(json.loads((ROOT / "reports/watch-0.5.11/summary.json").read_text()))
    ups = upgrade.from_summary(summary, tmp_path)  # the record alone: the results stayed on that machine
    assert [u.candidate.axes["sglang"] for u in ups] == [r.version for r in summary.releases]
    tones = {u.candidate.axes["sglang"]: u.tone for u in ups}
    assert tones["0.5.12"] == "skip" and tones["0.5.23"] == "fail"  # safe to try on a GPU; blocked (bad-flag)
    last = ups[-1]
    assert any("bad-flag" in r for r in last.reasons) and any("--mamba-radix-cache-strategy" in f for f in last.fixes)
    html = report.to_html([], upgrades=ups)
    assert html.count("<h2>Upgrade: ") == len(ups) and "replace --mamba-scheduler-strategy" in html
    assert "🟡 safe to try on a GPU" in upgrade.markdown(ups[0]) and "❌ blocked" in upgrade.markdown(last)
