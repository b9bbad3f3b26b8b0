"""The degenerate-output detector on real texts nobody here wrote (public issue threads, published benchmark
outputs, model cookbooks) and on envbuilder's own runs (SGLang on an H200, llama.cpp with broken RoPE); the
streaming judge; the CLI with labels."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuilder.checks import degeneracy
from tests.conftest import FIXTURES, ROOT


def _rows(side: str) -> list[dict[str, Any]]:
    text = (FIXTURES / f"degeneracy-{side}.jsonl").read_text(encoding="utf-8")
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


CAL = _rows("calibration")
HELD = _rows("heldout")
ALL = CAL + HELD


_VERDICTS: dict[str, degeneracy.Verdict] = {}


def _judge(r: dict[str, Any]) -> degeneracy.Verdict:
    if r["id"] not in _VERDICTS:
        _VERDICTS[r["id"]] = degeneracy.detect(r["text"], finish_reason=r.get("finish_reason"))
    return _VERDICTS[r["id"]]


def _scores(rows: list[dict[str, Any]], *, clear_only: bool = False) -> degeneracy.Scores:
    return degeneracy.score((r["expected"] == "degenerate", _judge(r).degenerate) for r in rows
                            if not clear_only or r.get("clear"))  # fmt: skip


# ------------------------------------------------------------------------------------------ the set itself


def test_set_is_real_sized_and_split_once_by_thread_or_file() -> None:
    deg = [r for r in ALL if r["expected"] == "degenerate"]
    ok = [r for r in ALL if r["expected"] == "ok"]
    assert len(ALL) >= 200 and len(deg) >= 80 and len(ok) >= 120
    assert all(r["source"] and r["note"] and r["group"] for r in ALL)
    assert sum(bool(r["url"]) for r in ALL) >= 0.9 * len(ALL)
    # the recorded rule (tools/degeneracy_split.py): whole groups on one side, held out when the hash is odd
    assert not {r["group"] for r in CAL} & {r["group"] for r in HELD}
    odd = {g: int(hashlib.sha256(f"degeneracy-split-v1:{g}".encode()).hexdigest(), 16) % 2 == 1
           for g in {r["group"] for r in ALL}}  # fmt: skip
    assert all(odd[r["group"]] for r in HELD)
    assert all(not odd[r["group"]] or r["group"] == "envbuilder:hand-written" for r in CAL)
    assert len({r["text"].strip() for r in ALL}) == len(ALL)


def test_set_covers_the_shapes_the_issue_names() -> None:
    langs = {r["lang"][:2] for r in ALL if r["expected"] == "ok"}
    assert {"zh", "ja", "ko", "ru", "ur", "th", "hi"} <= langs
    shapes = {r["shape"] for r in ALL}
    assert {"zh-html-form-table", "poem/song", "emoji", "one-word/short", "json", "code", "md-table"} <= shapes
    assert {"token-salad", "line-loop", "word-loop-punct", "whitespace-run", "fluent-then-derail", "json-garbage",
            "code-garbage", "mixed-script", "symbol-run"} <= shapes  # fmt: skip
    assert any(not r["text"].strip() for r in ALL)  # empty output


# ------------------------------------------------------------------------------------------------ figures


def test_heldout_figures_measured_not_tuned() -> None:
    """Regression guard at the figures measured on the held-out part (python -m benchmarks degeneracy;
    README). Nothing was tuned on these texts; the issue's bars (recall >= 0.95, false alarms <= 0.02) are
    NOT met, so these are the measured figures, not the bars."""
    clear = _scores(HELD, clear_only=True)
    every = _scores(HELD)
    assert clear.recall >= HELDOUT_CLEAR_RECALL, clear.summary()
    assert every.false_alarm_rate <= HELDOUT_FALSE_ALARMS, every.summary()


HELDOUT_CLEAR_RECALL = 0.66  # measured 0.667 (46/69) in round 1 and again after round 2
HELDOUT_FALSE_ALARMS = 0.03  # measured 0.026 (4/153)


def test_calibration_figures_it_was_tuned_on() -> None:
    every = _scores(CAL)
    assert every.fp == 0, every.summary()
    assert _scores(CAL, clear_only=True).recall >= 0.93  # measured: 57 of 61 (round 2; 50 before)


def test_envbuilder_own_runs() -> None:
    own = [r for r in ALL if r["group"].startswith("envbuilder:")]
    rope = [r for r in own if r["group"].startswith("envbuilder:llamacpp-rope")]
    healthy = [r for r in own if r["expected"] == "ok"]
    assert rope and healthy
    assert all(_judge(r).degenerate for r in rope), [r["text"][:80] for r in rope if not _judge(r).degenerate]
    assert not any(_judge(r).degenerate for r in healthy)
    random_weights = [r for r in own if r["group"] == "envbuilder:h200-random-weights"]
    assert sum(_judge(r).degenerate for r in random_weights) >= 6  # measured: 6 of 8 (two salads pass)


# --------------------------------------------------------------------------------------- shapes and spans


@pytest.mark.parametrize("shape", ["zh-html-form-table", "cjk-list", "cjk-prose+latin", "cjk-dialogue+latin"])
def test_cjk_and_mixed_cjk_latin_text_is_not_soup(shape: str) -> None:
    rows = [r for r in ALL if r["shape"] == shape]
    assert rows
    for r in rows:
        v = _judge(r)
        assert not v.degenerate, (r["id"], v.explain())


def _row(prefix: str) -> dict[str, Any]:
    return next(r for r in ALL if r["text"].startswith(prefix))


def test_a_punctuated_loop_is_one_loop_with_its_span() -> None:
    r = _row("对，对，对")  # Qwen2-7B + LoRA, vLLM: "对，" until max_tokens
    v = _judge(r)
    loops = [f for f in v.findings if f.signal == "loop"]
    assert v.degenerate and len(loops) == 1
    span = r["text"][loops[0].start : loops[0].end]
    assert span.count("对") >= 100 and loops[0].end >= len(r["text"].rstrip()) - 1
    assert "repeated 120x" in loops[0].detail and v.turned_at == 0


def test_json_opened_then_whitespace_is_flagged_where_it_grows() -> None:
    r = _row("{}\n \n \n")  # Ollama format=json: an object, then spaces and newlines
    v = _judge(r)
    assert v.degenerate and v.signals[0] == "whitespace-run"
    f = v.findings[0]
    assert r["text"][f.start : f.end].strip() == "" and f.start <= 3


def test_findings_have_spans_inside_the_text_and_explain_names_them() -> None:
    for r in ALL:
        v = _judge(r)
        assert v.degenerate == bool([f for f in v.findings if f.strong]) or not v.findings or v.degenerate
        for f in v.findings:
            assert 0 <= f.start <= f.end <= len(r["text"]), (r["id"], f)
            assert f.signal in v.explain()
        if v.degenerate:
            assert v.turned_at is not None and 0 <= v.turned_at <= len(r["text"])


@pytest.mark.parametrize(("prefix", "signal", "detail"), [
    ("特点和(from co的背后", "script-soup", "lone telugu fragment"),  # MiniMax-M1, vLLM: garbage loops
    (" devil.i#else?;", "script-soup", "lone cyrillic fragment"),  # QwQ-32B fp8, SGLang fa3
    ('"nodemon": "^接收3.0.1', "script-soup", "CJK characters glued to a number"),  # DeepSeek-V4, vLLM
    ("http://www/other/sat/else", "loop", "word pieces"),  # Llama-3-8B Q4_K_M, Ollama 0.1.43
    ("Hello! It's nice to meet you.", "loop", "a third copy cut off"),  # Llama-3-70B not stopping
    ("           \n            var{", "symbol-soup", "brackets closed by another kind"),  # Qwen3-Coder, MLX
    ("<html><body><table><thead></thead> colspan", "loop", "in 2 places"),  # SLANetv2 table model
])  # fmt: skip
def test_round_two_signals_on_the_calibration_texts_they_were_made_for(prefix: str, signal: str,
                                                                       detail: str) -> None:  # fmt: skip
    r = _row(prefix)
    assert r in CAL and r["expected"] == "degenerate"
    v = _judge(r)
    assert v.degenerate and any(f.signal == signal and detail in f.detail for f in v.findings), v.explain()


@pytest.mark.parametrize("text", [
    "1. 《教父2》（The Godfather: Part II）\n2. 暗黑破坏神3（Diablo III）\n3. 巫师3：狂猎（The Witcher 3）",
    "<p>2024年5月16日 pip install torch==2.1</p>\n<p>2024年8月19日 python=3.10</p>",
    "Let x be in [0, 1) and y in (0, 1]; then f maps [a, b) onto (c, d] and the interval [0, 2) is covered.",
    "The Russian word я means I, and the letter Ж is pronounced like the s in pleasure, according to the book.",
    "Hallelujah, hallelujah, hallelujah. Sing it loud. Hallelujah, hallelujah, hallelujah, all night long.",
    "Paris is the capital of France. Paris is the capital of France. Paris is the capital of France.",
])  # fmt: skip
def test_round_two_signals_leave_their_healthy_look_alikes_alone(text: str) -> None:
    v = degeneracy.detect(text)
    assert not v.degenerate, v.explain()


def test_model_tokens_loop_maps_to_characters() -> None:
    text = "The answer is " + "forty-two and " * 12
    tokens = re.findall(r"\S+\s*", text)
    v = degeneracy.detect(text, tokens=tokens)
    spans = [(f.start, f.end) for f in v.findings if "token(s)" in f.detail]
    assert spans and spans[0][0] == len("The answer is ") and spans[0][1] == len(text)


# -------------------------------------------------------------------------------------------- streaming


def test_stream_that_turns_reports_the_token_where_it_turned() -> None:
    healthy = _row("The video begins with a serene view")["text"]  # Qwen2.5-VL cookbook output
    loop = _row("it it it it it it")["text"]  # Copilot chat reasoning trace: 'it' non-stop
    pieces = [*re.findall(r"\S+\s*|\s+", healthy), " ", *re.findall(r"\S+\s*", loop)]
    first_loop_piece = len(re.findall(r"\S+\s*|\s+", healthy)) + 1
    verdict, turn = degeneracy.judge_stream(pieces, every=8)
    assert verdict.degenerate and turn is not None
    assert abs(turn.piece - first_loop_piece) <= 1, (turn.piece, first_loop_piece)
    assert turn.char >= len(healthy)


def test_healthy_stream_never_turns() -> None:
    text = _row("Here's a C++ program to find the nth Fibonacci number")["text"]
    judge = degeneracy.StreamJudge(every=4)
    for p in re.findall(r"\S+\s*|\s+", text):
        assert judge.push(p) is None
    assert not judge.close().degenerate and judge.turn is None


# -------------------------------------------------------------------------------------------- properties

HEALTHY = [r["text"] for r in CAL if r["expected"] == "ok" and len(r["text"]) > 20]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(HEALTHY),
       words=st.lists(st.from_regex(r"[a-z]{2,8}", fullmatch=True), min_size=2, max_size=6),
       repeats=st.integers(min_value=10, max_value=30), sep=st.sampled_from([" ", ", ", ".\n", "! "]))  # fmt: skip
def test_any_healthy_text_with_a_loop_appended_is_flagged_at_the_loop(prefix: str, words: list[str], repeats: int,
                                                                     sep: str) -> None:  # fmt: skip
    text = prefix + "\n" + (" ".join(words) + sep) * repeats
    v = degeneracy.detect(text)
    assert v.degenerate
    tail = len(text.rstrip(" ,.!\n"))
    assert any(f.signal == "loop" and f.end >= tail - 1 and f.start <= len(prefix) + 1 + len(words) * 9
               for f in v.findings), v.explain()  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_gets_spans_within_it(text: str) -> None:
    v = degeneracy.detect(text)
    assert all(0 <= f.start <= f.end <= len(text) for f in v.findings)
    assert v.label in ("ok", "degenerate")


# ---------------------------------------------------------------------------------------------------- CLI


def _cli(stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "degeneracy", *args, "-"], cwd=ROOT, text=True,
                          input=stdin, capture_output=True, check=False)  # fmt: skip


def test_cli_json_lines_one_verdict_per_line_with_spans_and_exit_code() -> None:
    lines = [{"id": "a", "text": "The capital of France is Paris."}, {"id": "b", "text": "!!!!!!!!!!!!!!!!!!!!!!!!"}]
    p = _cli("\n".join(json.dumps(x) for x in lines) + "\n", "--json")
    assert p.returncode == 1
    out = [json.loads(x) for x in p.stdout.splitlines()]
    assert [o["id"] for o in out] == ["a", "b"] and [o["verdict"] for o in out] == ["ok", "degenerate"]
    f = out[1]["findings"][0]
    assert f["signal"] == "char-run" and (f["start"], f["end"]) == (0, 24) and out[1]["turned_at"] == 0
    ok = _cli("Two sentences about the sea. It is wide and deep.")
    assert ok.returncode == 0 and ok.stdout.strip() == "1: ok"
    bad = _cli('{"id": 1}\n')
    assert bad.returncode == 2 and "line 1" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_reports_precision_and_recall_when_the_input_carries_labels() -> None:
    rows = [r for r in CAL if r["group"].startswith("envbuilder:")][:12]
    stdin = "".join(json.dumps({"id": r["id"], "text": r["text"], "expected": r["expected"],
                                "finish_reason": r.get("finish_reason")}) + "\n" for r in rows)  # fmt: skip
    p = _cli(stdin)
    s = _scores(rows)
    assert f"{len(rows)} labelled texts: {s.summary()}" in p.stdout
    j = _cli(stdin, "--json")
    summary = json.loads(j.stdout.splitlines()[-1])["summary"]
    assert summary["labelled"] == len(rows) and summary["tp"] == s.tp and summary["fp"] == s.fp
    bad = _cli('{"text": "fine", "expected": "broken"}\n{"text": "fine", "expected": ["ok"]}\n')
    assert bad.returncode == 2 and "line 1" in bad.stderr and "'broken'" in bad.stderr
    odd = _cli('{"text": "fine", "expected": ["ok"]}\n')
    assert odd.returncode == 2 and "line 1" in odd.stderr and "Traceback" not in odd.stderr


def test_cli_refuses_a_text_or_finish_reason_that_is_not_a_string() -> None:
    for line in ('{"id": "a", "text": 5}', '{"id": "a", "text": ["x", "x"]}',
                 '{"id": "a", "text": "hello there", "finish_reason": [1]}'):
        p = _cli(f'{{"text": "fine"}}\n{line}\n')
        assert p.returncode == 2 and "line 2" in p.stderr and "not a string" in p.stderr, (line, p.stderr)
        assert "Traceback" not in p.stderr and p.stdout == ""
    assert _cli('{"id": "a", "text": null}\n').returncode == 1  # null stays an empty (degenerate) answer
