"""Golden prompt sets: the TOML format, every check kind, and the shipped sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.checks import golden
from envbuilder.client import Completion
from envbuilder.errors import InputError


def _c(text: str, tokens: int = 5) -> Completion:
    return Completion(text=text, reasoning="thinking about it", finish_reason="stop", completion_tokens=tokens, seconds=0.1)


def _p(**expect: object) -> golden.Prompt:
    return golden.Prompt(id="x", prompt="q", max_tokens=16, stop=("\n\n",), expect=dict(expect))


@pytest.mark.parametrize(("expect", "text", "ok"), [
    ({"contains": ["Paris"]}, "The capital is paris.", True),
    ({"contains": ["Paris"], "case_sensitive": True}, "the capital is paris.", False),
    ({"not_contains": ["<think>"]}, "<think>hm</think> 4", False),
    ({"regex": r"1,\s*2,\s*3"}, "1, 2, 3, 4", True),
    ({"number": {"value": 80, "tolerance": 0.5}}, "It is 80.2 km/h", True),
    ({"number": 42}, "forty-two", False),
    ({"json": True}, '```json\n{"a": 1}\n```', True),
    ({"json": True}, "{a: 1}", False),
    ({"json": {"schema": {"type": "array", "items": {"type": "integer"}}}}, "[1, 2, 3]", True),
    ({"json": {"schema": {"type": "array", "items": {"type": "integer"}}}}, '[1, "2"]', False),
])
def test_checks(expect: dict[str, object], text: str, ok: bool) -> None:
    assert (golden.check_answer(_p(**expect), _c(text)) == []) is ok


def test_max_tokens_and_stop_are_checked() -> None:
    assert golden.check_answer(_p(), _c("a", tokens=17)) == ["17 tokens > max_tokens 16"]
    assert "the stop string" in golden.check_answer(_p(), _c("a\n\nb"))[0]


@pytest.mark.parametrize(("text", "key"), [
    ("[[prompt]]\nid = 'a'\n", "[[prompt]][0]"),
    ("[[prompt]]\nid = 'a'\nprompt = 'q'\nexpect = { contians = ['x'] }\n", "[[prompt]][0].expect.contians"),
    ("[[prompt]]\nid = 'a'\nprompt = 'q'\nexpect = { regex = '(' }\n", "[[prompt]][0].expect.regex"),
    ("[[prompt]]\nid = 'a'\nprompt = 'q'\n[[prompt]]\nid = 'a'\nprompt = 'r'\n", "[[prompt]][1].id"),
    ("name = 'empty'\n", "[[prompt]]"),
])
def test_bad_prompt_sets_name_the_key(text: str, key: str) -> None:
    with pytest.raises(InputError) as e:
        golden.parse_prompt_set(text, where="set.toml")
    assert key in str(e.value) and str(e.value).startswith("set.toml: ")


def test_shipped_sets_load() -> None:
    for name in ("qwen3", "smollm2"):
        ps = golden.load_prompt_set(f"builtin:{name}", Path())
        assert ps.prompts and len({p.id for p in ps.prompts}) == len(ps.prompts)
    q = golden.load_prompt_set("builtin:qwen3", Path())
    assert any(p.thinking for p in q.prompts) and any(p.thinking is False for p in q.prompts)
    with pytest.raises(InputError, match="did you mean 'qwen3'"):
        golden.load_prompt_set("builtin:qwen", Path())
