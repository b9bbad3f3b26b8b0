"""The one redaction function every writer uses: results, logs, reports, messages and CLI output.

Credentials never leave envbuilder: a URL's user-info (``https://__token__:SECRET@host/simple``
becomes ``https://****@host/simple``), bearer/basic authorisation headers, well-known token shapes
(Hugging Face ``hf_…``, GitHub ``ghp_…``, PyPI ``pypi-…``) and upper-case ``*TOKEN*=``/``*PASSWORD*=``
assignments are replaced by ``****``. Redaction is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "****"

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/@'\"`<>]+)@", re.ASCII)
_AUTH_HEADER = re.compile(r"(?i)(\bauthorization\s*[:=]\s*(?:bearer|basic|token)\s+)[^\s'\"`]+")
_TOKENS = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|"
                     r"pypi-[A-Za-z0-9_-]{20,})", re.ASCII)  # fmt: skip
# environment-style names only (upper case): ``HF_TOKEN=…``, ``UV_INDEX_X_PASSWORD: …`` — not ``max_tokens: 8``
_ASSIGNMENT = re.compile(r"\b(?=[A-Z])([A-Z0-9_]*(?:TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|APIKEY)(?:_[A-Z0-9]+)?\s*[=:]\s*)"
                         r"(?!\*\*\*\*)[^\s'\"`,;]+", re.ASCII)  # fmt: skip


def redact(text: str) -> str:
    """``text`` with every credential it carries replaced by ``****``."""
    if not text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + MASK, text)
    text = _TOKENS.sub(MASK, text)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + MASK, text)


def redact_obj(obj: Any) -> Any:
    """A copy of a JSON-like value with :func:`redact` applied to every string (keys included)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {redact(str(k)) if isinstance(k, str) else k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v) for v in obj]
    return obj


def restore_urls(args: Sequence[str], known: Iterable[str]) -> list[str]:
    """Stored (redacted) uv arguments with each redacted URL put back from ``known`` (the matrix's own URLs)."""
    by_redacted = {redact(u): u for u in known}
    return [by_redacted.get(a, a) for a in args]
