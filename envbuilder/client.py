"""A small HTTP client for OpenAI-compatible engines (SGLang, llama.cpp) and SGLang's native endpoints."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import requests


@dataclass(frozen=True, kw_only=True)
class Completion:
    text: str
    reasoning: str | None
    finish_reason: str | None
    completion_tokens: int | None
    seconds: float
    ttft_s: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)


class EngineClient:
    def __init__(self, base_url: str, *, timeout_s: float = 600.0, model: str = "default") -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.model = model
        self.session = requests.Session()

    def get(self, path: str, timeout: float | None = None) -> requests.Response:
        return self.session.get(self.base_url + path, timeout=timeout or self.timeout_s)

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int = 64, temperature: float = 0.0, seed: int = 0,
             stop: list[str] | None = None, extra: dict[str, Any] | None = None, timeout: float | None = None) -> Completion:  # fmt: skip
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature, "seed": seed}  # fmt: skip
        if stop:
            body["stop"] = stop
        body.update(extra or {})
        t = time.monotonic()
        r = self.session.post(self.base_url + "/v1/chat/completions", json=body, timeout=timeout or self.timeout_s)
        r.raise_for_status()
        data = r.json()
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        usage = data.get("usage") or {}
        return Completion(text=msg.get("content") or "", reasoning=msg.get("reasoning_content"),
                          finish_reason=choice.get("finish_reason"), completion_tokens=usage.get("completion_tokens"),
                          seconds=time.monotonic() - t, raw=data)  # fmt: skip

    def chat_stream(self, messages: list[dict[str, str]], *, max_tokens: int, seed: int = 0) -> Completion:
        """A streamed greedy chat completion: measures time to first token and decode speed."""
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                "seed": seed, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        t = time.monotonic()
        ttft = None
        parts: list[str] = []
        tokens = None
        chunks = 0
        with self.session.post(self.base_url + "/v1/chat/completions", json=body, stream=True,
                               timeout=self.timeout_s) as r:  # fmt: skip
            r.raise_for_status()
            for raw in r.iter_lines():
                if not raw or not raw.startswith(b"data:"):
                    continue
                payload = raw[5:].strip()
                if payload == b"[DONE]":
                    break
                data = json.loads(payload)
                if data.get("usage"):
                    tokens = data["usage"].get("completion_tokens", tokens)
                for ch in data.get("choices", []):
                    delta = (ch.get("delta") or {}).get("content") or ""
                    if delta:
                        if ttft is None:
                            ttft = time.monotonic() - t
                        chunks += 1
                        parts.append(delta)
        return Completion(text="".join(parts), reasoning=None, finish_reason=None,
                          completion_tokens=tokens if tokens is not None else chunks,
                          seconds=time.monotonic() - t, ttft_s=ttft)  # fmt: skip

    def generate(self, text: str, *, max_new_tokens: int = 32, timeout: float | None = None) -> dict[str, Any]:
        """SGLang's native ``/generate`` (greedy); returns its JSON (``text``, ``meta_info``)."""
        r = self.session.post(self.base_url + "/generate", timeout=timeout or self.timeout_s, json={
            "text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}})
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data


def ready_probe(client: EngineClient, timeout_s: float = 30.0) -> str | None:
    """A real generation: None when the server answered a well-formed completion, else why not.

    An empty completion still counts as an answer: judging its content is the degeneracy check's job.
    """
    try:
        client.chat([{"role": "user", "content": "Say OK."}], max_tokens=4, timeout=timeout_s)
    except requests.RequestException as e:
        return f"{type(e).__name__}: {str(e)[:200]}"
    except (KeyError, ValueError, IndexError, TypeError) as e:
        return f"unexpected answer: {e}"
    return None
