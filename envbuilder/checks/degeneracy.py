"""The degenerate-output detector: is a generated text empty, a loop, or soup?

Signals (thresholds are module constants, documented here and in the README):

strong — one is enough:
  ``empty``         nothing but whitespace, or the literal "None"/"null" (SGLang issue 19393's symptom)
  ``loop``          the tail is one unit (1–128 characters, or 1–32 words) repeated, covering
                    ≥ LOOP_COVER of the text and at least LOOP_MIN_REPEATS times
  ``symbol-soup``   ≥ SYMBOL_FRACTION of the non-space characters are symbols other than prose punctuation
                    (``,.;:'"?!()``), texts ≥ 24 chars that are not code, tables or JSON
  ``script-soup``   ≥ MIXED_SCRIPT_WORDS words that mix writing systems inside one word ("schem中lest")
  ``lexical-soup``  ≥ LEXICAL_SOUP of the words are glued sub-words (≥ 14 letters) or carry a capital
                    inside ("AndreartypeActually"), in prose (not code)

weak — two are needed:
  ``rep-4``         fraction of repeated word 4-grams (Welleck et al. 2019) ≥ REP4 (with ≥ 16 4-grams)
  ``distinct-2``    distinct word bigrams / bigrams ≤ DISTINCT2 (with ≥ 16 bigrams)
  ``compression``   zlib compression ratio ≥ COMPRESSION (Whisper's 2.4), texts ≥ 200 bytes
  ``runaway``       generation hit max_tokens (``finish_reason == "length"``) while another weak signal fired

In code, markdown tables and JSON (``looks_structured``) weak signals never add up, and a loop counts only
when the generation ran to max_tokens or repeats ≥ STRUCTURED_LOOP_REPEATS times (else it is the weak
``repeated-lines``): numbered lists, counting, code with repeated lines, tables and JSON arrays pass.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

LOOP_COVER = 0.5
LOOP_MIN_REPEATS = 4
LOOP_MIN_CHARS = 24
SYMBOL_FRACTION = 0.30
STRUCTURED_LOOP_REPEATS = 10
MIXED_SCRIPT_WORDS = 2
LEXICAL_SOUP = 0.10
LEXICAL_MIN_WORDS = 20
REP4 = 0.5
DISTINCT2 = 0.35
COMPRESSION = 2.4

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_PROSE_PUNCT = set(",.;:'\"?!()")
_CODE_LINE = re.compile(r"^\s*(def |class |import |from |return\b|if |elif |else\b|for |while |print\(|const |let |var |"
                        r"function\b|#|//|[\w.\[\]]+\s*[+\-*/]?=[^=]|[}{)\]];?,?$|\w+\(.*\);?$)")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    degenerate: bool
    signals: tuple[str, ...]
    numbers: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "degenerate" if self.degenerate else "ok"


def _script(ch: str) -> str:
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "?"
    return name.split(" ", 1)[0]  # LATIN, CYRILLIC, GREEK, CJK, ARABIC, HANGUL, ...


def periodic_tail(seq: Sequence[str], max_period: int, min_len: int = 0) -> tuple[int, int] | None:
    """(period, covered items) of the longest tail of ``seq`` that repeats one unit of 1..max_period items
    at least LOOP_MIN_REPEATS times (and covers at least ``min_len`` items)."""
    n = len(seq)
    best: tuple[int, int] | None = None
    for p in range(1, min(max_period, n // LOOP_MIN_REPEATS) + 1):
        run = 0
        i = n - 1
        while i - p >= 0 and seq[i] == seq[i - p]:
            run += 1
            i -= 1
        covered = run + p
        if covered >= max(min_len, p * LOOP_MIN_REPEATS) and (best is None or covered > best[1]):
            best = (p, covered)
    return best


def find_loop(text: str) -> tuple[int, int] | None:
    """(period, covered characters) of the longest periodic tail, character level, period 1..128."""
    return periodic_tail(text.rstrip(), 128, LOOP_MIN_CHARS)


def find_word_loop(words: list[str]) -> tuple[int, int] | None:
    """(period, covered words) of the longest periodic tail at word level, period 1..32."""
    return periodic_tail(words, 32)


def rep_n(tokens: list[str], n: int) -> float | None:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 16:
        return None
    return 1.0 - len(set(grams)) / len(grams)


def distinct_n(tokens: list[str], n: int) -> float | None:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 16:
        return None
    return len(set(grams)) / len(grams)


def looks_structured(text: str) -> bool:
    """Code, a markdown table or JSON: repetition and symbols are normal there."""
    s = text.strip()
    if "```" in s or (s[:1] in "[{" and s[-1:] in "]}"):
        return True
    lines = [ln for ln in s.splitlines() if ln.strip()]
    if len(lines) >= 3 and sum(1 for ln in lines if ln.strip().startswith("|") and ln.strip().endswith("|")) >= 2:
        return True
    return len(lines) >= 3 and sum(1 for ln in lines if _CODE_LINE.match(ln)) / len(lines) >= 0.4


def detect(text: str | None, *, finish_reason: str | None = None) -> Verdict:
    """Judge one generated text."""
    strong: list[str] = []
    weak: list[str] = []
    nums: dict[str, float] = {}
    t = "" if text is None else text
    stripped = t.strip()
    if not stripped or stripped in ("None", "null"):
        return Verdict(degenerate=True, signals=("empty",), numbers={"chars": float(len(t))})

    tokens = stripped.split()
    code = looks_structured(stripped)
    loop = find_loop(stripped)
    repeats = 0.0
    if loop and loop[1] / len(stripped) >= LOOP_COVER:
        repeats = loop[1] / loop[0]
        nums["loop_period"], nums["loop_cover"] = float(loop[0]), round(loop[1] / len(stripped), 3)
    else:
        wl = find_word_loop(tokens)
        if wl and wl[1] / len(tokens) >= LOOP_COVER and wl[1] >= 8:
            repeats = wl[1] / wl[0]
            nums["loop_period_words"], nums["loop_cover"] = float(wl[0]), round(wl[1] / len(tokens), 3)
    if repeats:
        nums["loop_repeats"] = round(repeats, 1)
        # code and tables repeat lines legitimately: there a loop must run away or repeat many times
        if not code or finish_reason == "length" or repeats >= STRUCTURED_LOOP_REPEATS:
            strong.append("loop")
        else:
            weak.append("repeated-lines")

    visible = [c for c in stripped if not c.isspace()]
    if len(stripped) >= 24 and visible and not code:
        sym = sum(1 for c in visible if not c.isalnum() and c not in _PROSE_PUNCT) / len(visible)
        nums["symbol_fraction"] = round(sym, 3)
        if sym >= SYMBOL_FRACTION:
            strong.append("symbol-soup")

    words = _WORD.findall(stripped)
    mixed = [w for w in words if len({_script(c) for c in w}) > 1]
    nums["mixed_script_words"] = float(len(mixed))
    if len(mixed) >= MIXED_SCRIPT_WORDS:
        strong.append("script-soup")
    if len(words) >= LEXICAL_MIN_WORDS and not code:
        glued = sum(1 for w in words if len(w) >= 14 or re.search(r"[a-z][A-Z]", w))
        nums["lexical_soup"] = round(glued / len(words), 3)
        if glued / len(words) >= LEXICAL_SOUP:
            strong.append("lexical-soup")

    r4 = rep_n(tokens, 4)
    if r4 is not None:
        nums["rep_4"] = round(r4, 3)
        if r4 >= REP4:
            weak.append("rep-4")
    d2 = distinct_n(tokens, 2)
    if d2 is not None:
        nums["distinct_2"] = round(d2, 3)
        if d2 <= DISTINCT2:
            weak.append("distinct-2")
    raw = stripped.encode()
    if len(raw) >= 200:
        ratio = len(raw) / len(zlib.compress(raw))
        nums["compression"] = round(ratio, 3)
        if ratio >= COMPRESSION:
            weak.append("compression")
    if finish_reason == "length" and (weak or strong):
        weak.append("runaway")
    # in code, tables and JSON, repetition is normal: only a strong signal counts there
    degenerate = bool(strong) or (len(weak) >= 2 and not code)
    return Verdict(degenerate=degenerate, signals=tuple(strong + weak), numbers=nums)
