"""Reading server facts from an engine's endpoints: speculative acceptance, KV usage, throughput."""

from __future__ import annotations

import re
from typing import Any

import requests

from envbuilder.client import EngineClient

_METRIC = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>[-+0-9.eEinfNa]+)$")
_TOKEN_USAGE = re.compile(r"(?:full )?token usage: (?P<usage>[\d.]+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: metric name -> the last sample's value (labels dropped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if m := _METRIC.match(line.strip()):
            try:
                out[m.group("name")] = float(m.group("value"))
            except ValueError:
                continue
    return out


def metrics(client: EngineClient) -> dict[str, float]:
    try:
        r = client.get("/metrics", timeout=10)
    except requests.RequestException:
        return {}
    return parse_metrics(r.text) if r.status_code == 200 else {}


def server_info(client: EngineClient) -> dict[str, Any]:
    """SGLang's ``/server_info`` (``/get_server_info`` on old versions); {} when the engine has none."""
    for path in ("/server_info", "/get_server_info"):
        try:
            r = client.get(path, timeout=10)
        except requests.RequestException:
            return {}
        if r.status_code == 200:
            try:
                data: dict[str, Any] = r.json()
                return data
            except ValueError:
                return {}
    return {}


def spec_accept_length(info: dict[str, Any], metric_values: dict[str, float]) -> float | None:
    """Average speculative acceptance length: ``internal_states[i].avg_spec_accept_length`` or the metric."""
    states = info.get("internal_states") or []
    vals = [float(s["avg_spec_accept_length"]) for s in states
            if isinstance(s, dict) and s.get("avg_spec_accept_length") is not None]  # fmt: skip
    if vals:
        return sum(vals) / len(vals)
    m = metric_values.get("sglang:spec_accept_length")
    return m if m else None


def token_usage_from_log(lines: list[str]) -> float | None:
    """The highest ``token usage`` / ``full token usage`` an SGLang decode/prefill log line reported."""
    best = None
    for ln in lines:
        for m in _TOKEN_USAGE.finditer(ln):
            v = float(m.group("usage"))
            best = v if best is None else max(best, v)
    return best
