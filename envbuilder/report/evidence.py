"""Evidence for a failed check: the span of a generated text that is wrong (a loop's repeated unit, a run of
symbols, words that mix scripts, the wrong number), and the log lines that decided a start-up failure.

Degenerate texts are flagged where the detector (``envbuilder.checks.degeneracy``) says: its findings carry
character offsets; a loop's first unit is told apart from its repeats."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from envbuilder.checks import degeneracy

SHOWN_CHARS = 1600  # longer texts are shown around their first flagged span
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


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


def _unit_then_repeats(text: str, start: int, end: int, note: str) -> list[Span]:
    """A loop's region as its first unit (``loop-unit``, with the note) and the repeats (``loop``): the unit is
    the region's shortest exact period; without one (a loop on normalised text) the region is one ``loop``."""
    region = text[start:end]
    for p in range(1, min(256, len(region) // 2) + 1):
        if region[p:] == region[:-p]:
            return [Span(start=start, end=start + p, kind="loop-unit", note=note),
                    Span(start=start + p, end=end, kind="loop")]  # fmt: skip
    return [Span(start=start, end=end, kind="loop", note=note)]


KIND = {"loop": "loop", "stutter": "loop", "char-run": "symbols", "symbol-soup": "symbols", "sparse": "symbols",
        "whitespace-run": "symbols", "special-tokens": "symbols", "mojibake": "symbols",
        "script-soup": "mixed-script", "lexical-soup": "glued", "low-diversity": "loop", "runaway": "loop"}  # fmt: skip


def finding_spans(text: str, findings: Iterable[degeneracy.Finding]) -> list[Span]:
    """The detector's findings as spans of ``text`` (clipped to it: stored texts are cut to a length). The strong
    findings when there are any: a weak one (``low-diversity``) spans the whole text and would hide them."""
    found = list(findings)
    out: list[Span] = []
    for f in [f for f in found if f.strong] or found:
        start, end = f.start, min(f.end, len(text))
        if not 0 <= start < end:
            continue
        note = f"{f.signal}: {f.detail}" if f.detail else f.signal
        out += _unit_then_repeats(text, start, end, note) if KIND.get(f.signal) == "loop" else [
            Span(start=start, end=end, kind=KIND.get(f.signal, "symbols"), note=note)]
    return _no_overlap(out)


def stored_findings(raw: object) -> list[degeneracy.Finding] | None:
    """Findings as the degeneracy check stores them with each text ({signal, start, end, detail, strong})."""
    if not isinstance(raw, list):
        return None
    out = []
    for f in raw:
        if isinstance(f, dict) and isinstance(f.get("start"), int) and isinstance(f.get("end"), int):
            out.append(degeneracy.Finding(signal=str(f.get("signal", "")), start=f["start"], end=f["end"],
                                          detail=str(f.get("detail", "")), strong=bool(f.get("strong", True))))  # fmt: skip
    return out


def degeneracy_spans(text: str, signals: Iterable[str] = (), findings: Sequence[degeneracy.Finding] | None = None) -> list[Span]:
    """The spans that make ``text`` degenerate, where the detector says: its stored findings, or found again now
    (a run that ran away is judged as one, ``runaway`` in ``signals``)."""
    if findings is None:
        findings = degeneracy.detect(text, finish_reason="length" if "runaway" in set(signals) else None).findings
    return finding_spans(text, findings)


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
    return finding_spans(got, v.findings) if v.degenerate else []


def needle_spans(got: str, expected: str) -> list[Span]:
    """A long-context answer: the numbers that are not the needle, else what makes it degenerate."""
    spans = [Span(start=m.start(), end=m.end(), kind="number", note=f"expected {expected}")
             for m in _NUMBER.finditer(got) if m.group() != expected]  # fmt: skip
    if spans:
        return spans
    v = degeneracy.detect(got)
    return finding_spans(got, v.findings) if v.degenerate else []


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
