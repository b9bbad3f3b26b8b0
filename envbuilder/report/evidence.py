"""Evidence for a failed check: the span of a generated text that is wrong (a loop's repeated unit, a run of
symbols, words that mix scripts, the wrong number), and the log lines that decided a start-up failure.

Spans are computed here from the detector's own loop finder and thresholds (``envbuilder.checks.degeneracy``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from envbuilder.checks import degeneracy

SHOWN_CHARS = 1600  # longer texts are shown around their first flagged span
_SYMBOL_RUN = re.compile(r"[^\w\s,.;:'\"?!()]{3,}")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"\S+")


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


def loop_spans(text: str) -> list[Span]:
    """The looping tail: its first unit, then the repeats (character or word level, as the detector finds them)."""
    body = text.rstrip()
    loop = degeneracy.find_loop(body)
    if loop and loop[1] / max(1, len(body.strip())) >= degeneracy.LOOP_COVER:
        period, covered = loop
        start = len(body) - covered
        unit = body[start : start + period]
        return [Span(start=start, end=start + period, kind="loop-unit", note=f"{unit!r} repeated {covered / period:.1f}×"),
                Span(start=start + period, end=len(body), kind="loop")]  # fmt: skip
    words = list(_WORD.finditer(body))
    wl = degeneracy.find_word_loop([w.group() for w in words])
    if wl and wl[1] / max(1, len(words)) >= degeneracy.LOOP_COVER and wl[1] >= 8:
        period, covered = wl
        first = words[len(words) - covered]
        unit_end = words[len(words) - covered + period - 1].end()
        unit = body[first.start() : unit_end]
        return [Span(start=first.start(), end=unit_end, kind="loop-unit", note=f"{unit!r} repeated {covered / period:.1f}×"),
                Span(start=unit_end, end=len(body), kind="loop")]  # fmt: skip
    return []


def degeneracy_spans(text: str, signals: Iterable[str]) -> list[Span]:
    """The spans behind the signals the detector reported for ``text``."""
    sig = set(signals)
    out: list[Span] = []
    if "loop" in sig or "repeated-lines" in sig or {"rep-4", "compression", "distinct-2"} & sig:
        out += loop_spans(text)
    if "symbol-soup" in sig:
        out += [Span(start=m.start(), end=m.end(), kind="symbols") for m in _SYMBOL_RUN.finditer(text)]
    if "script-soup" in sig:
        for m in degeneracy._WORD.finditer(text):
            if len({degeneracy._script(c) for c in m.group()}) > 1:
                out.append(Span(start=m.start(), end=m.end(), kind="mixed-script"))
    if "lexical-soup" in sig:
        for m in degeneracy._WORD.finditer(text):
            w = m.group()
            if len(w) >= 14 or re.search(r"[a-z][A-Z]", w):
                out.append(Span(start=m.start(), end=m.end(), kind="glued"))
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
