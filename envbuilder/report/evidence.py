"""Evidence for a failed check: the span of a generated text that is wrong (a loop's repeated unit, a run of
symbols, words that mix scripts, the wrong number), and the log lines that decided a start-up failure.

Degenerate texts are flagged where the detector (``envbuilder.checks.degeneracy``) says, when it reports
character offsets; otherwise the spans are found here for the signals it reported."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envbuilder.checks import degeneracy

SHOWN_CHARS = 1600  # longer texts are shown around their first flagged span
_SYMBOL_RUN = re.compile(r"[^\w\s,.;:'\"?!()]{3,}")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"\S+")
_LETTERS = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True, kw_only=True)
class Span:
    """Characters ``start:end`` of a text, flagged as ``kind`` (``loop``, ``loop-unit``, ``symbols``,
    ``mixed-script``, ``glued``, ``number``), with a note for the reader."""

    start: int
    end: int
    kind: str
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Piece:
    """A run of text, flagged or not (what the page draws)."""

    text: str
    kind: str = ""
    note: str = ""


def _periodic_tail(seq: Sequence[str], max_period: int, min_repeats: int = 4) -> tuple[int, int] | None:
    """(period, covered items) of the longest tail of ``seq`` that repeats one unit at least ``min_repeats`` times."""
    n = len(seq)
    best: tuple[int, int] | None = None
    for p in range(1, min(max_period, n // min_repeats) + 1):
        i = n - 1
        while i - p >= 0 and seq[i] == seq[i - p]:
            i -= 1
        covered = n - 1 - i + p
        if covered >= p * min_repeats and (best is None or covered > best[1]):
            best = (p, covered)
    return best


def _unit_then_repeats(text: str, start: int, end: int, note: str, unit_end: int | None = None) -> list[Span]:
    """A loop's region as its first unit (``loop-unit``, with the note) and the repeats (``loop``). Without a
    known unit, the shortest exact period of the region is used; none: the region is one ``loop`` span."""
    region = text[start:end]
    if unit_end is None:
        for p in range(1, min(256, len(region) // 2) + 1):
            if region[p:] == region[:-p]:
                unit_end = start + p
                break
    if unit_end is None or unit_end >= end:
        return [Span(start=start, end=end, kind="loop", note=note)]
    return [Span(start=start, end=unit_end, kind="loop-unit", note=note), Span(start=unit_end, end=end, kind="loop")]


def loop_spans(text: str) -> list[Span]:
    """The looping tail: its first unit, then the repeats (character level, else word level)."""
    body = text.rstrip()
    loop = _periodic_tail(body, 128)
    if loop and loop[1] >= 24 and loop[1] / max(1, len(body.strip())) >= 0.5:
        period, covered = loop
        start = len(body) - covered
        unit = body[start : start + period]
        return _unit_then_repeats(body, start, len(body), f"{unit!r} repeated {covered / period:.1f}×", start + period)
    words = list(_WORD.finditer(body))
    wl = _periodic_tail([w.group() for w in words], 32)
    if wl and wl[1] / max(1, len(words)) >= 0.5 and wl[1] >= 8:
        period, covered = wl
        first = words[len(words) - covered]
        unit_end = words[len(words) - covered + period - 1].end()
        unit = body[first.start() : unit_end]
        return _unit_then_repeats(body, first.start(), len(body), f"{unit!r} repeated {covered / period:.1f}×", unit_end)
    return []


def _script(ch: str) -> str:
    try:
        return unicodedata.name(ch).split(" ", 1)[0]
    except ValueError:
        return "?"


def _signal_spans(text: str, signals: set[str]) -> list[Span]:
    """Spans for a detector that reports signals only (no offsets)."""
    out: list[Span] = []
    if {"loop", "repeated-lines", "rep-4", "compression", "distinct-2", "low-diversity"} & signals:
        out += loop_spans(text)
    if "symbol-soup" in signals:
        out += [Span(start=m.start(), end=m.end(), kind="symbols") for m in _SYMBOL_RUN.finditer(text)]
    for m in _LETTERS.finditer(text):
        w = m.group()
        if "script-soup" in signals and len({_script(c) for c in w}) > 1:
            out.append(Span(start=m.start(), end=m.end(), kind="mixed-script"))
        elif "lexical-soup" in signals and (len(w) >= 14 or re.search(r"[a-z][A-Z]", w)):
            out.append(Span(start=m.start(), end=m.end(), kind="glued"))
    return out


KIND = {"loop": "loop", "char-run": "symbols", "symbol-soup": "symbols", "sparse": "symbols",
        "whitespace-run": "symbols", "special-tokens": "symbols", "mojibake": "symbols",
        "script-soup": "mixed-script", "lexical-soup": "glued", "stutter": "loop"}  # fmt: skip


def degeneracy_spans(text: str, signals: Iterable[str], findings: Sequence[Mapping[str, Any]] | None = None) -> list[Span]:
    """The spans that make ``text`` degenerate: the detector's own findings (stored with the result, or found
    again now) when it reports offsets, else spans computed here for the signals it reported."""
    sig = set(signals)
    if findings is None:
        v = degeneracy.detect(text, finish_reason="length" if "runaway" in sig else None)
        found = getattr(v, "findings", None)  # typed findings with character offsets, where the detector has them
        if found is not None:
            findings = [{"signal": f.signal, "start": f.start, "end": f.end, "detail": f.detail} for f in found]
    if findings is None:
        return _no_overlap(_signal_spans(text, sig))
    out: list[Span] = []
    for f in findings:
        start, end, signal = f.get("start"), f.get("end"), str(f.get("signal", ""))
        if not isinstance(start, int) or not isinstance(end, int) or not 0 <= start < end <= len(text):
            continue
        note = f"{signal}: {f.get('detail', '')}".rstrip(": ")
        out += _unit_then_repeats(text, start, end, note) if signal == "loop" else [
            Span(start=start, end=end, kind=KIND.get(signal, "symbols"), note=note)]
    return _no_overlap(out)


def number_spans(text: str, expected: float, tolerance: float = 0.0) -> list[Span]:
    """The numbers in ``text`` that are not ``expected`` (within ``tolerance``)."""
    out = []
    for m in _NUMBER.finditer(text):
        try:
            v = float(m.group().replace(",", ""))
        except ValueError:
            continue
        if abs(v - expected) > tolerance:
            out.append(Span(start=m.start(), end=m.end(), kind="number", note=f"expected {expected:g}"))
    return out


def golden_spans(got: str, expect: dict[str, object]) -> list[Span]:
    """What to flag in a golden answer that missed: a wrong number, else what makes the text degenerate."""
    number = expect.get("number")
    if isinstance(number, dict) and isinstance(number.get("value"), int | float):
        tol = number.get("tolerance", 0.0)
        spans = number_spans(got, float(number["value"]), float(tol) if isinstance(tol, int | float) else 0.0)
        if spans:
            return spans
    elif isinstance(number, int | float):
        spans = number_spans(got, float(number))
        if spans:
            return spans
    v = degeneracy.detect(got)
    return degeneracy_spans(got, v.signals) if v.degenerate else []


def needle_spans(got: str, expected: str) -> list[Span]:
    """A long-context answer: the numbers that are not the needle, else what makes it degenerate."""
    spans = [Span(start=m.start(), end=m.end(), kind="number", note=f"expected {expected}")
             for m in _NUMBER.finditer(got) if m.group() != expected]  # fmt: skip
    if spans:
        return spans
    v = degeneracy.detect(got)
    return degeneracy_spans(got, v.signals) if v.degenerate else []


def _no_overlap(spans: Sequence[Span]) -> list[Span]:
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if s.end > s.start and (not out or s.start >= out[-1].end):
            out.append(s)
    return out


def pieces(text: str, spans: Sequence[Span], limit: int = SHOWN_CHARS) -> list[Piece]:
    """``text`` cut into plain and flagged pieces; a long text is cut to ``limit`` characters around its first
    span, the cuts marked with "…"."""
    spans = _no_overlap(spans)
    lo, hi = 0, len(text)
    if hi > limit:
        first = spans[0].start if spans else 0
        lo = max(0, min(first - limit // 4, hi - limit))
        hi = lo + limit
    out: list[Piece] = []
    if lo > 0:
        out.append(Piece(text=f"… ({lo} characters) ", kind="cut"))
    pos = lo
    for s in spans:
        a, b = max(s.start, lo), min(s.end, hi)
        if b <= a:
            continue
        if a > pos:
            out.append(Piece(text=text[pos:a]))
        out.append(Piece(text=text[a:b], kind=s.kind, note=s.note))
        pos = b
    if pos < hi:
        out.append(Piece(text=text[pos:hi]))
    if hi < len(text):
        out.append(Piece(text=f" … ({len(text) - hi} more characters)", kind="cut"))
    return out


def deciding_lines(log_lines: Sequence[str], message: str, tail: int = 12) -> tuple[list[str], int | None]:
    """The last ``tail`` lines of a failed start-up's log and the index (in them) of the line the failure
    message quotes, when one does."""
    lines = list(log_lines)
    needle = message.split(";")[0].strip()
    hit = None
    if needle:
        for i in range(len(lines) - 1, -1, -1):
            if needle[:60] in lines[i]:
                hit = i
                break
    start = max(0, len(lines) - tail)
    if hit is not None and hit < start:
        start = max(0, hit - 2)
        lines = lines[start : start + tail]
        return lines, hit - start
    return lines[start:], (hit - start if hit is not None else None)
