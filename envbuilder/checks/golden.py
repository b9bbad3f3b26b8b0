"""Golden prompts: a TOML prompt-set format and its checks (contains, regex, number, json, max_tokens, stop,
thinking on/off), run greedily with a fixed seed, concurrently.

A prompt set::

    name = "smollm2"
    [[prompt]]
    id = "capital"
    prompt = "What is the capital of France? Answer in one word."
    max_tokens = 32
    thinking = false                     # Qwen3 reasoning parser: the answer is checked, not the reasoning
    expect = { contains = ["Paris"] }    # contains / regex / number = {value, tolerance} / json = true | {schema}
"""

from __future__ import annotations

import json
import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import requests

from envbuilder.client import Completion, EngineClient
from envbuilder.engines import EngineSpec
from envbuilder.errors import InputError, did_you_mean

_PROMPT_KEYS = ("id", "prompt", "system", "max_tokens", "stop", "thinking", "expect")
_EXPECT_KEYS = ("contains", "not_contains", "regex", "number", "json", "case_sensitive")


@dataclass(frozen=True, kw_only=True)
class Prompt:
    id: str
    prompt: str
    system: str | None = None
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    thinking: bool | None = None
    expect: dict[str, Any] = field(default_factory=dict)

    def messages(self) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return [*msgs, {"role": "user", "content": self.prompt}]


@dataclass(frozen=True, kw_only=True)
class PromptSet:
    name: str
    prompts: tuple[Prompt, ...]
    source: str


def load_prompt_set(ref: str, base: Path) -> PromptSet:
    """``builtin:<name>`` (shipped in envbuilder/prompts/) or a path relative to the matrix file."""
    if ref.startswith("builtin:"):
        name = ref.split(":", 1)[1]
        res = resources.files("envbuilder").joinpath(f"prompts/{name}.toml")
        if not res.is_file():
            shipped = [p.name.removesuffix(".toml") for p in resources.files("envbuilder").joinpath("prompts").iterdir()]
            raise InputError("[smoke].golden", None, f"no built-in prompt set {name!r}{did_you_mean(name, shipped)}")
        return parse_prompt_set(res.read_text(), where=f"builtin:{name}")
    path = (base / ref).expanduser()
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(str(path), None, f"cannot read the prompt set ({e.strerror or e})") from None
    return parse_prompt_set(text, where=str(path))


def parse_prompt_set(text: str, *, where: str) -> PromptSet:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(where, None, f"invalid TOML: {e}") from None
    raw = data.get("prompt")
    if not isinstance(raw, list) or not raw:
        raise InputError(where, "[[prompt]]", "a prompt set needs at least one [[prompt]]")
    prompts = []
    seen: set[str] = set()
    for i, p in enumerate(raw):
        key = f"[[prompt]][{i}]"
        if not isinstance(p, dict):
            raise InputError(where, key, "must be a table")
        for k in p:
            if k not in _PROMPT_KEYS:
                raise InputError(where, f"{key}.{k}", f"unknown key{did_you_mean(k, _PROMPT_KEYS)}")
        if not isinstance(p.get("id"), str) or not isinstance(p.get("prompt"), str):
            raise InputError(where, key, "needs string `id` and `prompt`")
        if p["id"] in seen:
            raise InputError(where, f"{key}.id", f"{p['id']!r} is used twice")
        seen.add(p["id"])
        expect = p.get("expect", {})
        if not isinstance(expect, dict):
            raise InputError(where, f"{key}.expect", "must be a table")
        for k in expect:
            if k not in _EXPECT_KEYS:
                raise InputError(where, f"{key}.expect.{k}", f"unknown check{did_you_mean(k, _EXPECT_KEYS)}")
        if "regex" in expect:
            try:
                re.compile(expect["regex"])
            except (re.error, TypeError) as e:
                raise InputError(where, f"{key}.expect.regex", f"not a regular expression ({e})") from None
        if "number" in expect and not isinstance(expect["number"], dict | int | float):
            raise InputError(where, f"{key}.expect.number", "must be a number or {value, tolerance}")
        mt = p.get("max_tokens", 64)
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            raise InputError(where, f"{key}.max_tokens", "must be a positive integer")
        prompts.append(Prompt(id=p["id"], prompt=p["prompt"], system=p.get("system"), max_tokens=mt,
                              stop=tuple(p.get("stop", ())), thinking=p.get("thinking"), expect=expect))  # fmt: skip
    return PromptSet(name=str(data.get("name", where)), prompts=tuple(prompts), source=where)


def check_answer(p: Prompt, c: Completion) -> list[str]:
    """Every way the answer misses its expectations (empty list: it matches)."""
    text = c.text
    misses: list[str] = []
    e = p.expect
    cs = bool(e.get("case_sensitive", False))
    hay = text if cs else text.lower()
    for needle in _as_list(e.get("contains")):
        if (needle if cs else needle.lower()) not in hay:
            misses.append(f"does not contain {needle!r}")
    for needle in _as_list(e.get("not_contains")):
        if (needle if cs else needle.lower()) in hay:
            misses.append(f"contains {needle!r}")
    if "regex" in e and not re.search(e["regex"], text, 0 if cs else re.I):
        misses.append(f"does not match /{e['regex']}/")
    if "number" in e:
        spec = e["number"] if isinstance(e["number"], dict) else {"value": e["number"]}
        want, tol = float(spec["value"]), float(spec.get("tolerance", 0))
        nums = [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]
        if not any(abs(n - want) <= tol for n in nums):
            misses.append(f"no number within {tol} of {want:g} (found {nums[:5]})")
    if "json" in e:
        misses += _check_json(text, e["json"])
    if c.completion_tokens is not None and c.completion_tokens > p.max_tokens:
        misses.append(f"{c.completion_tokens} tokens > max_tokens {p.max_tokens}")
    for s in p.stop:
        if s in text:
            misses.append(f"the stop string {s!r} appears in the output")
    return misses


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else [str(x) for x in v]


def _check_json(text: str, spec: Any) -> list[str]:
    body = text.strip()
    if m := re.search(r"```(?:json)?\s*(.+?)```", body, re.S):
        body = m.group(1).strip()
    try:
        value = json.loads(body)
    except ValueError as err:
        return [f"is not JSON ({err})"]
    if isinstance(spec, dict) and "schema" in spec:
        return [f"JSON {p}" for p in schema_errors(value, spec["schema"], "$")]
    return []


_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "number": (int, float), "integer": int,
                          "boolean": bool, "null": type(None)}  # fmt: skip


def schema_errors(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """A small JSON-Schema subset: type, required, properties, items, enum."""
    errs: list[str] = []
    t = schema.get("type")
    if t and not (isinstance(value, _TYPES[t]) and not (t in ("number", "integer") and isinstance(value, bool))):
        return [f"{path} is not of type {t}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path} is not one of {schema['enum']}")
    if isinstance(value, dict):
        for k in schema.get("required", []):
            if k not in value:
                errs.append(f"{path} lacks required key {k!r}")
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                errs += schema_errors(value[k], sub, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errs += schema_errors(item, schema["items"], f"{path}[{i}]")
    return errs


@dataclass(frozen=True, kw_only=True)
class Answer:
    prompt: Prompt
    completion: Completion | None
    misses: tuple[str, ...]
    error: str | None = None


def ask_all(client: EngineClient, ps: PromptSet, *, seed: int, engine: EngineSpec, workers: int = 4) -> list[Answer]:
    """Every prompt, greedy, concurrently."""

    def one(p: Prompt) -> Answer:
        extra: dict[str, Any] = {}
        if p.thinking is not None and engine.thinking_switch:
            extra["chat_template_kwargs"] = {"enable_thinking": p.thinking}
        try:
            c = client.chat(p.messages(), max_tokens=p.max_tokens, seed=seed, stop=list(p.stop) or None, extra=extra)
        except (requests.RequestException, KeyError, ValueError, IndexError) as e:
            return Answer(prompt=p, completion=None, misses=(), error=f"{type(e).__name__}: {str(e)[:200]}")
        return Answer(prompt=p, completion=c, misses=tuple(check_answer(p, c)))

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(ps.prompts)))) as pool:
        return list(pool.map(one, ps.prompts))
