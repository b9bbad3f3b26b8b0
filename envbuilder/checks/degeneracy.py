"""The degenerate-output detector: is a generated text empty, a loop, or soup? With the span that says so.

Every signal is a `Finding` (signal, character span in the original text, detail). Strong findings — one is
enough:

  ``empty``           nothing but whitespace, or the literal "None"/"null"
  ``loop``            a unit repeated back to back, found at several granularities on normalised text: content
                      pieces (words; CJK characters one by one; punctuation and whitespace dropped), lines
                      (case, spacing and edge punctuation normalised), the model's own tokens when given, and
                      sub-word units inside one long token (``nynyny``, ``(rr(rr(rr``)
  ``char-run``        one character repeated (``!!!!``, ``GGGG``, ``0000``, ``@@@@``, emoji); decoration
                      characters (``-=_*#~.``) only glued to text or far beyond a separator line's length
  ``whitespace-run``  whitespace growth: a run of blank lines or spaces no formatting needs (JSON/code opened,
                      then spaces and newlines)
  ``special-tokens``  chat-template / vocabulary tokens leaking into the text (``<|im_start|>``, ``<unk>``)
  ``script-soup``     words that glue writing systems together where the text's own language would not
                      (``schem中lest``, ``вариantes``); CJK next to Latin identifiers is normal
  ``lexical-soup``    Latin words glued from sub-words (``AndreartypeActually``) in prose
  ``mojibake``        U+FFFD replacement characters from broken byte sequences
  ``stutter``         every word emitted twice (``TheThe New New England England``)
  ``sparse``          hardly any letters or digits in a longer text that is not a table or code

Round 2 widened them (same signal names): a lone foreign-alphabet fragment and CJK glued to numbers in code
lines (``script-soup``); one long token of a few recurring word fragments, a paragraph written twice with a
third copy cut off, a short phrase stuttered in several places (``loop``); brackets closed by another kind
(``symbol-soup``).

Weak findings (two are needed, never in code or tables): ``low-diversity`` (distinct word bigrams),
``runaway`` (hit max_tokens while another signal fired), a few ``special-tokens``.

`Verdict.turned_at` is the character offset of the earliest strong finding (where a fluent start turned);
`StreamJudge` does the same over streamed pieces and reports the piece (token) index. Thresholds are module
constants, tuned on tests/fixtures/degeneracy-calibration.jsonl only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

# loops over content pieces
PIECE_MAX_PERIOD = 128
LOOP_REPEATS_TAIL = 4  # a loop that runs to the end of the text (ran away)
LOOP_REPEATS_MID = 6  # a loop followed by more text
LOOP_REPEATS_SINGLE = 6  # one piece repeated ("the the the"): laughter and emphasis repeat a few times
LOOP_REPEATS_LETTER = 16  # one single-letter piece ("n * n * n * n" is a formula)
LOOP_LONG_UNIT = 24  # a unit this long (a paragraph) repeated back to back is a loop sooner
LOOP_REPEATS_LONG = 2.5
LOOP_CUT_PIECES = 2  # pieces of a third copy of a paragraph, cut off mid-sentence at the end
LOOP_REPEATS_STRUCTURED = 8  # code and tables repeat lines legitimately
LOOP_FUZZY_PERIOD = 8  # from this period on, a repeat may differ in one isolated piece
LOOP_MIN_CHARS = 16  # span of the repeated region
LINE_MAX_PERIOD = 16
LINE_REPEATS = 3
LINE_REPEATS_STRUCTURED = 5  # code repeats a line or two legitimately
LINE_MIN_CHARS = 12  # a repeated line shorter than this ("}", "- ") is not a loop
LINE_REPEATS_BARE = 20  # the same line without letters or digits ("  |     |", ">") this many times
SUBWORD_REPEATS = 5
SUBWORD_MIN_CHARS = 12
# runs of one character
RUN_SYMBOL = 8  # "!!!!!!!!", "@@@@", emoji
RUN_BRACKET = 12  # "))))))))" closes Lisp
RUN_LETTER = 12  # "GGGGGGGGGGGG"
RUN_CJK = 6
RUN_DIGIT = 14
RUN_DECOR_GLUED = 16  # "One################"
RUN_DECOR_LINE = 200  # a separator line no table needs
# whitespace
WS_NEWLINES = 12  # blank lines in a row
WS_SPACES = 120
WS_LINES_IN_RUN = 6  # a whitespace run spanning this many line breaks with spaces between
# soup
SCRIPT_SOUP_WORDS = 2
LEXICAL_MIN_WORDS = 20
LEXICAL_WINDOW = 24  # words: a fluent start that turns into salad
LEXICAL_WINDOW_GLUED = 8
LEXICAL_SOUP = 0.12  # healthy calibration texts <= 0.03, Dutch compounds (dev pool) <= 0.09, salad >= 0.105
MOJIBAKE = 2
SPECIAL_TOKENS = 3
STUTTER_PAIRS = 10
STUTTER_FRACTION = 0.3
SYMBOL_SOUP = 0.35  # punctuation/symbols among visible characters, in prose with words
SYMBOL_SOUP_LETTERS = 0.25  # ...that still has letters (ASCII art has hardly any)
SYMBOL_SOUP_MIN_CHARS = 40
HAN_NORMAL = 0.2  # share of CJK letters from which CJK next to Latin is ordinary text
SCRIPT_PRESENT = 0.05  # a script this present in the text may glue to Latin names ("PyTorch를", "JARVISа")
STRAY_SCRIPT_LETTERS = 3  # a foreign alphabet present only as one fragment of this many letters at most
STRAY_SCRIPT_CHARS = 150  # ...at least once per this many characters (one glitch in a long answer is not salad)
HAN_DIGIT_LINES = 2  # code/Latin lines where CJK characters are glued to a number ("rate_limit=一枝2.0")
HAN_DIGIT_LINE_SHARE = 0.34  # CJK share of a line's letters below which the line is Latin/code
TOKEN_PIECES = 16  # a long token (no whitespace) of this many letter pieces...
TOKEN_DISTINCT = 0.3  # ...with this share of distinct ones is a loop with variations ("www/else/where//")
BRACKET_MISMATCHES = 2  # a bracket closed by another kind ("(input-packet-39 has a class]")...
BRACKET_CHARS = 200  # ...at least once per this many characters, outside code blocks
RECUR_PERIOD = 4  # a short phrase (2..4 pieces, >= RECUR_CHARS letters) repeated back to back...
RECUR_CHARS = 8
RECUR_REPEATS = 3  # ...this many times, in RECUR_RUNS separate places ('colspan="20" colspan="20" ...')
RECUR_RUNS = 2
SPARSE_MIN_CHARS = 40
SPARSE_FRACTION = 0.15
DISTINCT2 = 0.3
DISTINCT2_MIN_BIGRAMS = 50


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One signal, with the span of the original text it covers (start inclusive, end exclusive)."""

    signal: str
    start: int
    end: int
    detail: str
    strong: bool = True


@dataclass(frozen=True, kw_only=True)
class Verdict:
    degenerate: bool
    findings: tuple[Finding, ...] = ()
    numbers: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "degenerate" if self.degenerate else "ok"

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.signal for f in self.findings))

    @property
    def turned_at(self) -> int | None:
        """Character offset where the text turned degenerate (earliest deciding finding)."""
        deciding = [f for f in self.findings if f.strong] or (list(self.findings) if self.degenerate else [])
        return min(f.start for f in deciding) if deciding else None

    def explain(self) -> str:
        if not self.findings:
            return "ok: no signal"
        return "; ".join(f"{f.signal} [{f.start}:{f.end}] {f.detail}" for f in self.findings)


# ---------------------------------------------------------------------------------------------- characters

_CJK = ("CJK", "HIRAGANA", "KATAKANA", "IDEOGRAPHIC", "KANGXI", "BOPOMOFO")


@lru_cache(maxsize=65536)
def script(ch: str) -> str:
    """Writing system of a letter: LATIN, CYRILLIC, GREEK, HAN (Chinese/Japanese), HANGUL, ARABIC, …"""
    cat = unicodedata.category(ch)
    if not (cat.startswith("L") or cat.startswith("M")):
        return ""
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "?"
    if name.startswith(_CJK):
        return "HAN"
    if name.startswith(("FULLWIDTH", "HALFWIDTH")):
        return "HAN" if "KATAKANA" in name or ("HANGUL" not in name and "LATIN" not in name) else "WIDE"
    first = name.split(" ", 1)[0]
    return "HANGUL" if first == "HANGUL" else first


def _kind(ch: str) -> str:
    """l(etter incl. marks), d(igit), s(pace), p(unctuation/symbol)."""
    if ch.isspace():
        return "s"
    cat = unicodedata.category(ch)
    if cat[0] in "LM":
        return "l"
    if cat[0] == "N":
        return "d"
    return "p"


@dataclass(frozen=True)
class _Piece:
    norm: str
    start: int
    end: int


def pieces(text: str) -> list[_Piece]:
    """Content pieces: words (case-folded), digit runs, each CJK character on its own; punctuation, symbols
    and whitespace dropped — so "word's, word's," and "word's word's" are the same sequence."""
    out: list[_Piece] = []
    i, n = 0, len(text)
    while i < n:
        k = _kind(text[i])
        if k == "l":
            j = i
            while j < n and _kind(text[j]) == "l":
                j += 1
            _split_letters(text, i, j, out)
            i = j
        elif k == "d":
            j = i
            while j < n and _kind(text[j]) == "d":
                j += 1
            out.append(_Piece(text[i:j], i, j))
            i = j
        else:
            i += 1
    return out


def _split_letters(text: str, i: int, j: int, out: list[_Piece]) -> None:
    s = i
    while s < j:
        sc = script(text[s])
        if sc == "HAN":  # no spaces in Chinese/Japanese: one piece per character
            out.append(_Piece(text[s], s, s + 1))
            s += 1
            continue
        e = s + 1
        while e < j and script(text[e]) != "HAN":
            e += 1
        out.append(_Piece(text[s:e].casefold(), s, e))
        s = e


# ------------------------------------------------------------------------------------------------ repeats


@dataclass(frozen=True)
class Run:
    """seq[start:end] repeats a unit of `period` items; `repeats` = (end - start) / period."""

    start: int
    end: int
    period: int

    @property
    def repeats(self) -> float:
        return (self.end - self.start) / self.period


def periodic_runs(seq: Sequence[Hashable], max_period: int, min_repeats: float,
                  fuzzy_from: int | None = None) -> list[Run]:  # fmt: skip
    """Maximal back-to-back repetitions of a unit of 1..max_period items, at least `min_repeats` times,
    smallest period first for the same region. From period `fuzzy_from` on, a repeat may differ from the
    previous one in isolated single items (a loop whose separator token varies)."""
    ids: dict[Hashable, int] = {}
    xs = [ids.setdefault(x, len(ids)) for x in seq]
    n = len(xs)
    found: list[Run] = []
    for p in range(1, min(max_period, n // 2) + 1):
        fuzzy = fuzzy_from is not None and p >= fuzzy_from
        k = p
        while k < n:
            if xs[k] != xs[k - p]:
                k += 1
                continue
            s, last_miss = k, -n
            while k < n:
                if xs[k] != xs[k - p]:
                    # one differing item per repeat, between matching neighbours
                    if not (fuzzy and k - last_miss >= p and k + 1 < n and xs[k + 1] == xs[k + 1 - p]):
                        break
                    last_miss = k
                k += 1
            run = Run(s - p, k, p)
            if run.repeats >= min_repeats:
                found.append(run)
    found.sort(key=lambda r: (-(r.end - r.start), r.period))
    kept: list[Run] = []
    for r in found:  # drop runs inside a kept one (multiples of its period, sub-runs)
        if not any(k.start <= r.start and r.end <= k.end for k in kept):
            kept.append(r)
    return kept


def _unit_text(text: str, ps: Sequence[_Piece], run: Run) -> str:
    unit = text[ps[run.start].start : ps[run.start + run.period - 1].end]
    return unit if len(unit) <= 60 else unit[:57] + "..."


def _piece_loops(text: str, ps: list[_Piece], structured: bool, runaway: bool) -> list[Finding]:
    out: list[Finding] = []
    if len(ps) < 4:
        return out
    tail_end = len(ps)
    for run in periodic_runs([p.norm for p in ps], PIECE_MAX_PERIOD, LOOP_REPEATS_LONG, LOOP_FUZZY_PERIOD):
        start, end = ps[run.start].start, ps[run.end - 1].end
        if end - start < LOOP_MIN_CHARS:
            continue
        unit = ps[run.start : run.start + run.period]
        if structured and all(p.norm.isdigit() for p in unit):
            continue  # [0, 0, 0, ...] is data
        at_tail = run.end >= tail_end - 1 or _only_elision(text[end:])
        if run.period >= LOOP_LONG_UNIT:
            need = LOOP_REPEATS_LONG if at_tail else LOOP_REPEATS_LONG + 0.5
        elif run.period == 1:
            # "named named named named" running off the end; "ha ha ha" in the middle is laughter
            need = (LOOP_REPEATS_LETTER if len(unit[0].norm) == 1 and script(unit[0].norm) != "HAN"
                    else LOOP_REPEATS_TAIL if at_tail else LOOP_REPEATS_SINGLE)
        else:
            need = LOOP_REPEATS_TAIL if at_tail else LOOP_REPEATS_MID
        if structured and not runaway:
            need = max(need, LOOP_REPEATS_STRUCTURED)
        if run.repeats >= need:
            out.append(Finding(signal="loop", start=start, end=end,
                               detail=f"{_unit_text(text, ps, run)!r} repeated {run.repeats:.0f}x"
                                      f"{' to the end' if at_tail else ''}"))  # fmt: skip
    return out


_SENTENCE_END = set(".!?。！？…\"'”’)]}>*`")


def _cut_paragraph_loop(text: str, ps: list[_Piece]) -> list[Finding]:
    """A paragraph written twice and a third copy cut off mid-sentence at the end: it was still looping when
    generation stopped (a chat model not stopping at its end-of-turn token)."""
    if text.rstrip()[-1:] in _SENTENCE_END:
        return []
    for run in periodic_runs([p.norm for p in ps], PIECE_MAX_PERIOD, 2, LOOP_FUZZY_PERIOD):
        if (run.period >= LOOP_LONG_UNIT and run.end >= len(ps) - 1
                and run.end - run.start >= 2 * run.period + LOOP_CUT_PIECES):  # fmt: skip
            start, end = ps[run.start].start, ps[run.end - 1].end
            return [Finding(signal="loop", start=start, end=end,
                            detail=f"{_unit_text(text, ps, run)!r} written twice, a third copy cut off")]
    return []


def _only_elision(rest: str) -> bool:
    """What follows is nothing, an ellipsis a reporter used to cut the quote, or end-of-text markers."""
    return re.fullmatch(r"[\s.…,;:!?)\]}'\"*]*(\.\.\.|…)?[\s.…)]*", rest) is not None


_LINE_EDGE = re.compile(r"^[\W_]+|[\W_]+$")


def _line_loops(text: str, structured: bool) -> list[Finding]:
    lines: list[tuple[str, int, int]] = []
    bare: list[tuple[str, int, int]] = []
    pos = 0
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        norm = _LINE_EDGE.sub("", " ".join(body.split()).casefold())
        if norm:
            lines.append((norm, pos, pos + len(body)))
        elif body.strip():
            bare.append((body.strip(), pos, pos + len(body)))
        pos += len(raw)
    out: list[Finding] = []
    for run in periodic_runs([ln[0] for ln in bare], 2, LINE_REPEATS_BARE):
        s, e = bare[run.start][1], bare[run.end - 1][2]
        if text[s:e].count("\n") + 1 == run.end - run.start:  # consecutive lines, nothing between
            out.append(Finding(signal="loop", start=s, end=e,
                               detail=f"line {bare[run.start][0][:30]!r} repeated {run.repeats:.0f}x"))
    for run in periodic_runs([ln[0] for ln in lines], LINE_MAX_PERIOD,
                             LINE_REPEATS_STRUCTURED if structured else LINE_REPEATS):  # fmt: skip
        unit_chars = sum(len(ln[0]) for ln in lines[run.start : run.start + run.period])
        if unit_chars < LINE_MIN_CHARS:
            continue
        start, end = lines[run.start][1], lines[run.end - 1][2]
        unit = lines[run.start][0]
        out.append(Finding(signal="loop", start=start, end=end,
                           detail=f"{run.period} line(s) repeated {run.repeats:.0f}x, first {unit[:50]!r}"))
    return out


_LONG_TOKEN = re.compile(r"\S{12,}")
_SUBWORD = re.compile(rf"(.{{1,10}}?)\1{{{SUBWORD_REPEATS - 1},}}")


def _subword_loops(text: str) -> list[Finding]:
    out: list[Finding] = []
    for tok in _LONG_TOKEN.finditer(text):
        for m in _SUBWORD.finditer(tok.group()):
            unit = m.group(1)
            if (len(m.group()) < SUBWORD_MIN_CHARS or not any(c.isalpha() for c in unit)
                    or len(set(unit)) == 1):  # fmt: skip
                continue  # numbers (1,000,000), rules and blanks, single-character runs (char-run's job)
            s = tok.start() + m.start()
            out.append(Finding(signal="loop", start=s, end=s + len(m.group()),
                               detail=f"{unit!r} repeated {len(m.group()) // len(unit)}x inside one token"))
    return out


def token_loops(tokens: Sequence[Hashable], text: str) -> list[Finding]:
    """Loops over the model's own tokens (ids or strings); spans are mapped to characters when the tokens
    are strings that concatenate to the text, else they cover the whole text."""
    out: list[Finding] = []
    offsets: list[int] | None = None
    if all(isinstance(t, str) for t in tokens) and "".join(str(t) for t in tokens) == text:
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(str(t))
        offsets.append(pos)
    n = len(tokens)
    for run in periodic_runs(tokens, PIECE_MAX_PERIOD, LOOP_REPEATS_TAIL):
        at_tail = run.end >= n - 1
        need = LOOP_REPEATS_SINGLE if run.period == 1 else (LOOP_REPEATS_TAIL if at_tail else LOOP_REPEATS_MID)
        if run.repeats < need or run.end - run.start < 8:
            continue
        s, e = (offsets[run.start], offsets[run.end]) if offsets else (0, len(text))
        out.append(Finding(signal="loop", start=s, end=e,
                           detail=f"{run.period} token(s) repeated {run.repeats:.0f}x (tokens {run.start}-{run.end})"))
    return out


# ---------------------------------------------------------------------------------------- character runs

_RUN = re.compile(r"(\S)\1{3,}")
_DECOR = set("-=_*#~.·…─━═,")
_BRACKETS = set("()[]{}<>")


def _char_runs(text: str) -> list[Finding]:
    out: list[Finding] = []
    for m in _RUN.finditer(text):
        ch, n = m.group(1), len(m.group())
        k = _kind(ch)
        if ch in _DECOR:
            line_start = text.rfind("\n", 0, m.start()) + 1
            line_end = text.find("\n", m.end())
            line = text[line_start : line_end if line_end >= 0 else len(text)]
            separator = re.fullmatch(r"[\s|+:\-=_*#~.·…─━═]*", line) is not None
            glued = not separator and ((m.start() > 0 and _kind(text[m.start() - 1]) == "l")
                                       or (m.end() < len(text) and _kind(text[m.end()]) == "l"))  # fmt: skip
            bad = n >= RUN_DECOR_LINE or (glued and n >= RUN_DECOR_GLUED)
        elif k == "l":
            bad = n >= (RUN_CJK if script(ch) == "HAN" else RUN_LETTER)
        elif k == "d":
            bad = n >= RUN_DIGIT
        else:
            bad = n >= (RUN_BRACKET if ch in _BRACKETS else RUN_SYMBOL)
        if bad:
            out.append(Finding(signal="char-run", start=m.start(), end=m.end(), detail=f"{ch!r} x{n}"))
    return out


_WS_RUN = re.compile(r"\s{12,}")


def _whitespace_runs(text: str) -> list[Finding]:
    out: list[Finding] = []
    for m in _WS_RUN.finditer(text):
        run = m.group()
        nl = run.count("\n")
        spaces = len(run) - nl
        blank_lines = max((len(x) for x in re.findall(r"\n(?:[ \t]*\n)+", run)), default=0)
        if (nl >= WS_NEWLINES and blank_lines >= WS_NEWLINES) or spaces >= WS_SPACES or (
                nl >= WS_LINES_IN_RUN and spaces >= 2 * nl):  # fmt: skip
            out.append(Finding(signal="whitespace-run", start=m.start(), end=m.end(),
                               detail=f"{nl} line breaks and {spaces} spaces in a row"))
    return out


# -------------------------------------------------------------------------------------------------- soup

_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|<unk>|<unused\d+>|<｜[^｜<>]{1,40}｜>|\[end of text\]|<pad>")
_TOKEN = re.compile(r"\S+")
_SPACED = {"LATIN", "CYRILLIC", "ARABIC", "HEBREW", "THAI", "HANGUL", "DEVANAGARI", "BENGALI", "TAMIL",
           "GUJARATI", "TELUGU", "KANNADA", "MALAYALAM", "ARMENIAN", "GEORGIAN", "ETHIOPIC"}  # fmt: skip
_CODEISH = re.compile(r"[#@/\\_`$<>=]|https?:|www\.|\.\w+\(|\w\.\w")


def _letter_runs(tok: str) -> list[list[str]]:
    """Script sequence of each maximal letter run inside a token (marks take the script of their base)."""
    runs: list[list[str]] = []
    cur: list[str] = []
    for ch in tok:
        sc = script(ch)
        if not sc:
            if cur:
                runs.append(cur)
            cur = []
            continue
        if unicodedata.category(ch).startswith("M") and cur:
            continue
        if sc in ("COMBINING", "MODIFIER", "?"):
            continue
        if not cur or cur[-1] != sc:
            cur.append(sc)
    if cur:
        runs.append(cur)
    return runs


def _script_shares(ps: Sequence[_Piece], text: str) -> dict[str, float]:
    count: dict[str, int] = {}
    for p in ps:
        for ch in text[p.start : p.end]:
            sc = script(ch)
            if sc and not unicodedata.category(ch).startswith("M"):
                count[sc] = count.get(sc, 0) + 1
    total = sum(count.values()) or 1
    return {k: v / total for k, v in count.items()}


def _script_soup(text: str, shares: dict[str, float]) -> list[Finding]:
    """Words gluing writing systems where this text's languages would not: a Latin name with a Korean
    particle ("Tom은") or a Russian ending is ordinary, so is CJK next to Latin in CJK text."""
    main = {k for k, v in shares.items() if v >= SCRIPT_PRESENT}
    cjk_text = shares.get("HAN", 0.0) + shares.get("HANGUL", 0.0) >= HAN_NORMAL
    bad: list[tuple[int, int, str]] = []
    for m in _TOKEN.finditer(text):
        tok = m.group()
        for seq in _letter_runs(tok):
            if len(seq) < 2:
                continue
            pairs = [(a, b) for a, b in pairwise(seq) if a != b]
            glued_alphabets = any(a in _SPACED and b in _SPACED and not ({a, b} <= main | {"LATIN"} and
                                                                          {a, b} & main)
                                  for a, b in pairs)  # fmt: skip
            han_in_alphabet = not cjk_text and "HAN" in seq and any(x in _SPACED for x in seq)
            sandwich = not cjk_text and any(a == c != b for a, b, c in zip(seq, seq[1:], seq[2:], strict=False))
            if glued_alphabets or han_in_alphabet or sandwich or len(set(seq)) >= 3:
                bad.append((m.start(), m.end(), tok))
                break
    if len(bad) < SCRIPT_SOUP_WORDS:
        return []
    shown = ", ".join(t[:20] for _, _, t in bad[:3])
    return [Finding(signal="script-soup", start=bad[0][0], end=bad[-1][1],
                    detail=f"{len(bad)} words glue writing systems ({shown})")]


def _stray_script(text: str, shares: dict[str, float]) -> list[Finding]:
    """A foreign alphabet that is present only as one short fragment ("特点和(from co的背后 మ name…",
    "devil.i#else?; соб und"): sub-word salad from another script, dense enough not to be a one-off glitch."""
    if not shares:
        return []
    main = max(shares, key=lambda k: shares[k])
    out: list[Finding] = []
    for sc in shares:
        if sc == main or sc == "LATIN" or sc not in _SPACED:
            continue
        letters = [i for i, c in enumerate(text) if script(c) == sc and not unicodedata.category(c).startswith("M")]
        toks = [m for m in _TOKEN.finditer(text) if any(script(c) == sc for c in m.group())]
        if len(letters) <= STRAY_SCRIPT_LETTERS and len(toks) == 1 and len(text) <= STRAY_SCRIPT_CHARS:
            out.append(Finding(signal="script-soup", start=toks[0].start(), end=toks[0].end(),
                               detail=f"a lone {sc.lower()} fragment {toks[0].group()[:20]!r} in "
                                      f"{main.lower()} text"))  # fmt: skip
    return out[:1]


_HAN_DIGIT = re.compile(r"(?<![\d\u3400-\u9fff\u3040-\u30ff])[\u3400-\u9fff\u3040-\u30ff]+\d[\d.]*"
                        r"(?![\d.]*[\u3400-\u9fff\u3040-\u30ff])")  # not a date or a count ("2024年5月", "第3章")


def _han_in_code(text: str) -> list[Finding]:
    """CJK characters glued to numbers inside code or Latin lines ("self.tokens = 充0", "^接收3.0.1"): tokens of
    another language injected into code. CJK text writes "第3", "2024年5月", "《教父2》", but its lines carry
    CJK punctuation or the CJK does not follow an operator."""
    bad: list[tuple[int, int]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        hits = [m for m in _HAN_DIGIT.finditer(line) if line[: m.start()].rstrip()[-1:] in _CODE_BEFORE_HAN]
        if hits and not _CJK_PUNCT.search(line):
            han = sum(1 for c in line if script(c) == "HAN")
            latin = sum(1 for c in line if script(c) == "LATIN")
            if latin and han / (han + latin) < HAN_DIGIT_LINE_SHARE:
                bad.append((pos + hits[0].start(), pos + hits[0].end()))
        pos += len(line)
    if len(bad) < HAN_DIGIT_LINES:
        return []
    return [Finding(signal="script-soup", start=bad[0][0], end=bad[-1][1],
                    detail=f"{len(bad)} code/Latin lines with CJK characters glued to a number "
                           f"({text[bad[0][0] : bad[0][1]]!r})")]  # fmt: skip


_CODE_BEFORE_HAN = set("=^:\"'([,")
_CJK_PUNCT = re.compile(r"[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20]")


def _token_collapse(text: str) -> list[Finding]:
    """One long whitespace-free token made of a few word fragments recurring with variations
    ("http://www/other/sat/else/where/more//www/else/where//else/where/…")."""
    for m in re.finditer(r"\S{80,}", text):
        words = re.findall(r"[^\W\d_]{2,}", m.group().casefold())
        if len(words) >= TOKEN_PIECES and len(set(words)) / len(words) <= TOKEN_DISTINCT:
            return [Finding(signal="loop", start=m.start(), end=m.end(),
                            detail=f"one {len(m.group())}-character token of {len(words)} word pieces, "
                                   f"{len(set(words))} distinct")]  # fmt: skip
    return []


_CLOSER = {")": "(", "]": "[", "}": "{"}
_INTERVAL = re.compile(r"\s*[-\w.+∞]+\s*,\s*[-\w.+∞]+\s*")  # [0, 1) is a half-open interval


def _bracket_mismatch(text: str) -> list[Finding]:
    """Brackets closed by another kind, densely: code-shaped gibberish that keeps indentation and brackets
    but not their structure ("var{ [urlTow] (pasted-2023 (input-packet-39 has a class](new-employee}")."""
    stack: list[tuple[str, int]] = []
    bad: list[int] = []
    for i, c in enumerate(text):
        if c in "([{":
            stack.append((c, i))
        elif c in _CLOSER and stack:
            opener, j = stack.pop()
            if opener != _CLOSER[c] and not _INTERVAL.fullmatch(text[j + 1 : i]):
                bad.append(i)
    if len(bad) < BRACKET_MISMATCHES or len(bad) * BRACKET_CHARS < len(text):
        return []
    return [Finding(signal="symbol-soup", start=bad[0], end=bad[-1] + 1,
                    detail=f"{len(bad)} brackets closed by another kind in {len(text)} characters")]


def _recurring_phrase(text: str, ps: list[_Piece]) -> list[Finding]:
    """The same short phrase stuttered back to back in several places: a loop that keeps restarting between
    other debris ('colspan="20" colspan="20" colspan="20" … </tbody> colspan="20" colspan="20" …')."""
    norms = [p.norm for p in ps]
    places: dict[tuple[str, ...], list[Run]] = {}
    for run in periodic_runs(norms, RECUR_PERIOD, RECUR_REPEATS):
        unit = tuple(norms[run.start : run.start + run.period])
        if run.period >= 2 and sum(len(u) for u in unit) >= RECUR_CHARS:
            places.setdefault(unit, []).append(run)
    for unit, runs in places.items():
        if len(runs) >= RECUR_RUNS:
            runs.sort(key=lambda r: r.start)
            return [Finding(signal="loop", start=ps[runs[0].start].start, end=ps[runs[-1].end - 1].end,
                            detail=f"{' '.join(unit)[:40]!r} repeated back to back in {len(runs)} places")]
    return []


def _latin_words(text: str) -> list[tuple[str, int, int]]:
    """Latin words with their offsets, from prose lines (more than three tokens), not code-like tokens."""
    out = []
    pos = 0
    for line in text.splitlines(keepends=True):
        if len(line.split()) > 3:
            for m in _TOKEN.finditer(line):
                tok = m.group()
                if _CODEISH.search(tok):
                    continue
                for w in re.finditer(r"[A-Za-z]+", tok):
                    out.append((w.group(), pos + m.start() + w.start(), pos + m.start() + w.end()))
        pos += len(line)
    return out


def _glued(w: str) -> bool:
    humps = len(re.findall(r"[a-z]{3}[A-Z]", w))
    switches = len(re.findall(r"[a-z][A-Z]|[A-Z][a-z]", w))
    if switches >= 4 and re.fullmatch(r"(?:[A-Z][a-z]|[a-z][A-Z])+[A-Za-z]?", w):
        return False  # aLtErNaTiNg case is a request, not soup
    return (len(w) >= 16 and w.islower()) or (humps >= 1 and len(w) >= 12) or (humps >= 2 and len(w) >= 10)


def _lexical_soup(text: str) -> list[Finding]:
    words = _latin_words(text)
    flags = [_glued(w) for w, _, _ in words]
    n = sum(flags)
    if len(words) >= LEXICAL_MIN_WORDS and n / len(words) >= LEXICAL_SOUP:
        glued = [w for w, f in zip(words, flags, strict=True) if f]
        return [Finding(signal="lexical-soup", start=glued[0][1], end=glued[-1][2],
                        detail=f"{n}/{len(words)} words glued from sub-words "
                               f"({', '.join(w for w, _, _ in glued[:3])})")]  # fmt: skip
    # a fluent start that turns into salad: a window of words that is mostly glued sub-words
    for i in range(0, max(0, len(words) - LEXICAL_WINDOW) + 1):
        window = flags[i : i + LEXICAL_WINDOW]
        if len(window) == LEXICAL_WINDOW and sum(window) >= LEXICAL_WINDOW_GLUED:
            ws = [w for w, f in zip(words[i : i + LEXICAL_WINDOW], window, strict=True) if f]
            return [Finding(signal="lexical-soup", start=ws[0][1], end=ws[-1][2],
                            detail=f"{sum(window)} of {LEXICAL_WINDOW} words in a row glued from sub-words "
                                   f"({', '.join(w for w, _, _ in ws[:3])})")]  # fmt: skip
    return []


def _stutter(ps: list[_Piece], text: str) -> list[Finding]:
    if len(ps) < 2 * STUTTER_PAIRS:
        return []
    pairs = [i for i in range(1, len(ps)) if ps[i].norm == ps[i - 1].norm and script(text[ps[i].start]) != "HAN"
             and not ps[i].norm.isdigit()]  # fmt: skip
    glued = re.findall(r"\b(\w{2,})\1\b", text)
    n = len(pairs) + len(glued)
    if n >= STUTTER_PAIRS and n / len(ps) >= STUTTER_FRACTION:
        return [Finding(signal="stutter", start=ps[pairs[0]].start if pairs else 0, end=len(text),
                        detail=f"{n} words emitted twice in a row out of {len(ps)}")]
    return []


_PROSE_PUNCT = set(",.;:'\"?!()，。、；：？！（）《》「」“”‘’…—")


def _is_symbol(c: str) -> bool:
    return unicodedata.category(c)[0] in "PS" and c not in _PROSE_PUNCT


def _symbol_soup(text: str) -> list[Finding]:
    visible = [c for c in text if not c.isspace()]
    if len(visible) < SYMBOL_SOUP_MIN_CHARS or len(text.split()) < 5:
        return []
    sym = sum(1 for c in visible if _is_symbol(c))
    letters = sum(1 for c in visible if unicodedata.category(c)[0] in "LM")
    if sym / len(visible) >= SYMBOL_SOUP and letters / len(visible) >= SYMBOL_SOUP_LETTERS:
        return [Finding(signal="symbol-soup", start=0, end=len(text),
                        detail=f"{sym} of {len(visible)} visible characters are symbols, between words")]
    return []


# ------------------------------------------------------------------------------------------------ judge

_CODE_LINE = re.compile(r"^\s*(def |class |import |from |return\b|if |elif |else\b|for |while |print\(|const |let |"
                        r"var |function\b|#|//|<[a-zA-Z/!]|[\w.\[\]]+\s*[+\-*/]?=[^=]|[}{)\]];?,?$|\w+\(.*\);?$)")


def looks_structured(text: str) -> bool:
    """Code, a table, HTML or JSON: repetition and symbols are normal there."""
    s = text.strip()
    if "```" in s or (s[:1] in "[{<" and s[-1:] in "]}>"):
        return True
    lines = [ln for ln in s.splitlines() if ln.strip()]
    if len(lines) >= 3 and sum(1 for ln in lines if ln.strip().startswith("|")) >= 2:
        return True
    return len(lines) >= 3 and sum(1 for ln in lines if _CODE_LINE.match(ln)) / len(lines) >= 0.4


def _merge_overlaps(findings: list[Finding]) -> list[Finding]:
    """Keep one finding per signal and region: a loop seen at two granularities is one loop."""
    kept: list[Finding] = []
    for f in sorted(findings, key=lambda f: -(f.end - f.start)):
        inside = [k for k in kept if k.signal == f.signal and k.strong == f.strong]
        if any(min(k.end, f.end) - max(k.start, f.start) >= 0.9 * (f.end - f.start) for k in inside):
            continue
        kept.append(f)
    return kept


def detect(text: str | None, *, finish_reason: str | None = None,
           tokens: Sequence[Hashable] | None = None) -> Verdict:  # fmt: skip
    """Judge one generated text. `tokens`: the model's own tokens for it, when the engine exposes them."""
    t = "" if text is None else text
    stripped = t.strip()
    if not stripped or stripped in ("None", "null"):
        return Verdict(degenerate=True, findings=(Finding(signal="empty", start=0, end=len(t),
                                                          detail=f"{len(t)} characters, no content"),),
                       numbers={"chars": float(len(t))})  # fmt: skip
    ps = pieces(t)
    structured = looks_structured(t)
    findings: list[Finding] = []
    findings += _piece_loops(t, ps, structured, finish_reason == "length")
    if not structured:
        findings += _cut_paragraph_loop(t, ps)
    findings += _line_loops(t, structured and finish_reason != "length")
    findings += _subword_loops(t)
    if tokens:
        findings += token_loops(tokens, t)
    findings += _char_runs(t)
    findings += _whitespace_runs(t)
    specials = list(_SPECIAL.finditer(t))
    if specials:
        findings.append(Finding(signal="special-tokens", start=specials[0].start(), end=specials[-1].end(),
                                detail=f"{len(specials)} chat-template/vocabulary tokens, first "
                                       f"{specials[0].group()!r}", strong=len(specials) >= SPECIAL_TOKENS))
    bad_bytes = [i for i, c in enumerate(t) if c == "\ufffd"]
    if len(bad_bytes) >= MOJIBAKE:
        findings.append(Finding(signal="mojibake", start=bad_bytes[0], end=bad_bytes[-1] + 1,
                                detail=f"{len(bad_bytes)} U+FFFD replacement characters"))
    shares = _script_shares(ps, t)
    findings += _script_soup(t, shares)
    findings += _stray_script(t, shares)
    findings += _han_in_code(t)
    if not structured:
        findings += _token_collapse(t)
        findings += _bracket_mismatch(t)
        findings += _recurring_phrase(t, ps)
    if not structured:
        findings += _lexical_soup(t)
        findings += _stutter(ps, t)
        findings += _symbol_soup(t)
    content = sum(p.end - p.start for p in ps)
    visible = sum(1 for c in stripped if not c.isspace())
    nums: dict[str, float] = {"chars": float(len(t)), "pieces": float(len(ps)),
                              "content_fraction": round(content / max(1, len(stripped)), 3)}  # fmt: skip
    if len(stripped) >= SPARSE_MIN_CHARS and not structured and content / len(stripped) < SPARSE_FRACTION:
        findings.append(Finding(signal="sparse", start=0, end=len(t),
                                detail=f"{content} letter/digit characters in {visible} visible"))
    words = [p.norm for p in ps]
    bigrams = list(pairwise(words))
    if len(bigrams) >= DISTINCT2_MIN_BIGRAMS:
        d2 = len(set(bigrams)) / len(bigrams)
        nums["distinct_2"] = round(d2, 3)
        if d2 <= DISTINCT2:
            findings.append(Finding(signal="low-diversity", start=0, end=len(t),
                                    detail=f"distinct word bigrams {d2:.2f}", strong=False))
    if finish_reason == "length" and findings:
        findings.append(Finding(signal="runaway", start=len(t), end=len(t),
                                detail="generation hit max_tokens", strong=False))
    findings = _merge_overlaps(findings)
    findings.sort(key=lambda f: (f.start, f.signal))
    strong = any(f.strong for f in findings)
    weak = sum(1 for f in findings if not f.strong)
    degenerate = strong or (weak >= 2 and not structured)
    return Verdict(degenerate=degenerate, findings=tuple(findings), numbers=nums)


# ---------------------------------------------------------------------------------------------- streaming


@dataclass(frozen=True, kw_only=True)
class Turn:
    """Where a streamed generation turned degenerate."""

    piece: int  # index of the streamed piece (token) in which the degenerate region starts
    char: int  # character offset in the concatenated text
    verdict: Verdict


class StreamJudge:
    """Judge a generation as it streams: `push` each piece (token or chunk); the first time the text so far
    is degenerate, `push` returns the `Turn` — the piece where the degenerate region starts, not where it
    was noticed. Every `every` pieces the last `window` characters are judged (bounded work per piece); once
    they are degenerate, the whole text is judged once to find where it turned."""

    def __init__(self, *, every: int = 32, window: int = 2048) -> None:
        self.every = every
        self.window = window
        self._pieces: list[str] = []
        self._ends: list[int] = []
        self._len = 0
        self.turn: Turn | None = None

    def push(self, piece: str) -> Turn | None:
        self._pieces.append(piece)
        self._len += len(piece)
        self._ends.append(self._len)
        if self.turn is None and len(self._pieces) % self.every == 0:
            tail = "".join(self._pieces[self._first_in_window() :])
            if detect(tail).degenerate:
                self._judge(None)
        return self.turn

    def close(self, finish_reason: str | None = None) -> Verdict:
        v = detect("".join(self._pieces), finish_reason=finish_reason)
        if self.turn is None and v.degenerate:
            self._set_turn(v)
        return v

    def _first_in_window(self) -> int:
        start = self._len - self.window
        return next((i for i, e in enumerate(self._ends) if e > start), 0) if start > 0 else 0

    def _judge(self, finish_reason: str | None) -> None:
        v = detect("".join(self._pieces), finish_reason=finish_reason)
        if v.degenerate:
            self._set_turn(v)

    def _set_turn(self, v: Verdict) -> None:
        at = v.turned_at or 0
        idx = next((i for i, e in enumerate(self._ends) if e > at), len(self._ends) - 1)
        self.turn = Turn(piece=idx, char=at, verdict=v)


def judge_stream(pieces_: Iterable[str], *, finish_reason: str | None = None, every: int = 32) -> tuple[Verdict, Turn | None]:
    """The verdict on a whole stream and where it turned (None if it stayed healthy)."""
    j = StreamJudge(every=every)
    for p in pieces_:
        j.push(p)
    v = j.close(finish_reason)
    return v, j.turn


# ------------------------------------------------------------------------------------------------ scoring

LABELS = {"degenerate": True, "ok": False, "healthy": False}


@dataclass(frozen=True, kw_only=True)
class Scores:
    """The detector against labelled texts: degenerate is the positive class."""

    tp: int
    fn: int
    fp: int
    tn: int

    @property
    def degenerate(self) -> int:
        return self.tp + self.fn

    @property
    def healthy(self) -> int:
        return self.fp + self.tn

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / self.degenerate if self.degenerate else 1.0

    @property
    def false_alarm_rate(self) -> float:
        return self.fp / self.healthy if self.healthy else 0.0

    def summary(self) -> str:
        return (f"precision {self.precision:.3f} ({self.tp}/{self.tp + self.fp}), "
                f"recall {self.recall:.3f} ({self.tp}/{self.degenerate}), "
                f"false alarms {self.false_alarm_rate:.3f} ({self.fp}/{self.healthy})")  # fmt: skip


def score(pairs: Iterable[tuple[bool, bool]]) -> Scores:
    """`pairs`: (labelled degenerate, judged degenerate) per text."""
    tp = fn = fp = tn = 0
    for want, got in pairs:
        if want and got:
            tp += 1
        elif want:
            fn += 1
        elif got:
            fp += 1
        else:
            tn += 1
    return Scores(tp=tp, fn=fn, fp=fp, tn=tn)
