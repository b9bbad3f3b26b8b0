"""What a cell's report section shows, read once from its result into typed views: the start-up timeline,
the speed sweep, speculation, KV tokens, long-context needles, and the evidence of every failed check."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.checks import degeneracy
from envbuilder.report import evidence
from envbuilder.report.evidence import Piece
from envbuilder.results import CellResult, StageResult, Status

# The start-up phase a milestone closes (the time since the previous milestone was spent in it).
PHASE_OF = {
    "first_log": "launch", "torch_distributed": "imports", "load_weight_begin": "imports",
    "load_weight_end": "weights", "kv_cache": "KV/state pools", "mamba_cache": "KV/state pools",
    "graph_capture_begin": "KV/state pools", "graph_capture_end": "graph capture",
    "draft_graph_capture_begin": "graph capture", "draft_graph_capture_end": "graph capture",
    "prefill_graph_capture_begin": "graph capture", "prefill_graph_capture_end": "compile",
    "piecewise_begin": "graph capture", "piecewise_end": "compile", "max_tokens": "warm-up",
    "http_up": "warm-up", "ready": "warm-up", "ready_checked": "warm-up",
}  # fmt: skip
PHASES = ("launch", "imports", "weights", "KV/state pools", "graph capture", "compile", "warm-up")


def phase_of(milestone: str) -> str:
    """The phase a milestone closes; a graph capture of any kind (target, draft, prefill) is one; an unknown
    milestone closes nothing (its time goes to the next known one)."""
    if milestone in PHASE_OF:
        return PHASE_OF[milestone]
    if "graph_capture" in milestone:
        return "graph capture"
    return ""


@dataclass(frozen=True, kw_only=True)
class Segment:
    phase: str
    start: float
    end: float
    milestones: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """The start-up, from the process start: phases in order; ``failed`` names how it ended when it did not
    become ready (``oom``: the bar ends in a red mark after the last milestone)."""

    segments: tuple[Segment, ...]
    total_s: float | None
    failed: str = ""

    def totals(self) -> dict[str, float]:
        """Seconds per phase, in start-up order."""
        out = {p: sum(s.end - s.start for s in self.segments if s.phase == p) for p in PHASES}
        return {p: v for p, v in out.items() if any(s.phase == p for s in self.segments)}


@dataclass(frozen=True, kw_only=True)
class SpeedPoint:
    concurrency: int
    tokens_per_s: float
    ttft_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Speed:
    points: tuple[SpeedPoint, ...]
    decode_tokens_per_s: float | None
    ttft_s: float | None
    baseline_tokens_per_s: float | None
    status: Status
    message: str


@dataclass(frozen=True, kw_only=True)
class Spec:
    acceptance_length: float | None
    floor: float | None
    identical_fraction: float | None
    prompts: int | None
    status: Status
    message: str


@dataclass(frozen=True, kw_only=True)
class Kv:
    """KV-pool tokens: logged by the engine, predicted by envbuilder's sizing model (``off`` = predicted / logged
    - 1, ``within`` its tolerance), and the peak usage the long-context check saw."""

    logged_tokens: int | None
    predicted_tokens: int | None
    usage_peak: float | None
    off: float | None = None
    within: bool | None = None
    why_no_prediction: str = ""


@dataclass(frozen=True, kw_only=True)
class Needle:
    tokens: int
    depth: float
    found: bool
    expected: str
    got: str


@dataclass(frozen=True, kw_only=True)
class Needles:
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    probes: tuple[Needle, ...]
    skipped_lengths: tuple[int, ...] = ()

    def at(self, tokens: int, depth: float) -> Needle | None:
        return next((p for p in self.probes if p.tokens == tokens and p.depth == depth), None)


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One failed item: what was asked, what was expected, what came back (flagged)."""

    check: str
    title: str
    prompt: str = ""
    expected: str = ""
    answer: tuple[Piece, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LogTail:
    """The last log lines of a failed start-up; ``hit`` is the line the failure message quotes."""

    name: str
    lines: tuple[str, ...]
    hit: int | None
    link: str | None


@dataclass(frozen=True, kw_only=True)
class LogLink:
    name: str
    href: str


@dataclass(frozen=True, kw_only=True)
class CellView:
    result: CellResult
    anchor: str
    stages: tuple[StageResult, ...]
    timeline: Timeline | None = None
    speed: Speed | None = None
    spec: Spec | None = None
    kv: Kv | None = None
    needles: Needles | None = None
    evidence: tuple[Evidence, ...] = ()
    log_tail: LogTail | None = None
    logs: tuple[LogLink, ...] = ()
    findings: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)  # precheck (rule, status, message)


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _i(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def timeline(launch: Mapping[str, Any]) -> Timeline | None:
    """Phases from the launch's milestones (receive times since the process start)."""
    hits = [m for m in launch.get("milestones") or [] if isinstance(m, dict) and _f(m.get("t")) is not None]
    if not hits:
        return None
    hits.sort(key=lambda m: float(m["t"]))
    segs: list[Segment] = []
    prev = 0.0
    for m in hits:
        t = float(m["t"])
        phase = phase_of(str(m.get("name")))
        if not phase:
            continue
        if segs and segs[-1].phase == phase:
            last = segs[-1]
            segs[-1] = Segment(phase=phase, start=last.start, end=t, milestones=(*last.milestones, str(m["name"])))
        elif t >= prev:
            segs.append(Segment(phase=phase, start=prev, end=t, milestones=(str(m["name"]),)))
        prev = max(prev, t)
    ok = launch.get("status") == "pass"
    total = _f(launch.get("ready_s"))
    return Timeline(segments=tuple(segs), total_s=total if total is not None else (prev if segs else None),
                    failed="" if ok else str(launch.get("reason") or "fail"))  # fmt: skip


def speed(s: StageResult, baseline: float | None) -> Speed | None:
    d = s.details
    conc = d.get("concurrency")
    pts: list[SpeedPoint] = []
    if isinstance(conc, dict):
        for k, v in conc.items():
            n, tps = _i(k), _f(v.get("tokens_per_s")) if isinstance(v, dict) else None
            if n is not None and tps is not None:
                pts.append(SpeedPoint(concurrency=n, tokens_per_s=tps, ttft_s=_f(v.get("ttft_s"))))
    pts.sort(key=lambda p: p.concurrency)
    decode = _f(d.get("decode_tokens_per_s"))
    if not pts and decode is None:
        return None
    base = _f(d.get("baseline_decode_tokens_per_s"))
    return Speed(points=tuple(pts), decode_tokens_per_s=decode, ttft_s=_f(d.get("ttft_s")),
                 baseline_tokens_per_s=base if base is not None else baseline, status=s.status, message=s.message)  # fmt: skip


def spec(s: StageResult) -> Spec | None:
    d = s.details
    if s.status is Status.SKIP or not d:
        return None
    return Spec(acceptance_length=_f(d.get("acceptance_length")), floor=_f(d.get("floor")),
                identical_fraction=_f(d.get("identical_fraction")), prompts=_i(d.get("prompts")), status=s.status,
                message=s.message)  # fmt: skip


def kv(smoke: Mapping[str, Any], stages: Sequence[StageResult]) -> Kv | None:
    """From the smoke details: the comparison stored as ``kv_tokens`` ({predicted, logged, off,
    within_tolerance, why_no_prediction}), else the tokens the engine logged (``KV Cache is allocated. #tokens``);
    plus the peak usage the long-context check saw."""
    stored = smoke.get("kv_tokens")
    cmp: Mapping[str, Any] = stored if isinstance(stored, dict) else {}
    logged = _i(cmp.get("logged"))
    if logged is None:
        for m in (smoke.get("launch") or {}).get("milestones") or []:
            if isinstance(m, dict) and m.get("name") in ("max_tokens", "kv_cache"):
                logged = _i(m.get("tokens")) or logged
    predicted = _i(cmp.get("predicted"))
    usage = None
    for s in stages:
        if s.name == "smoke.long-context":  # the peak either source saw (metrics endpoint, log lines)
            seen = [v for v in (_f(s.details.get("kv_token_usage_metric")), _f(s.details.get("kv_token_usage_log")))
                    if v is not None]  # fmt: skip
            usage = max(seen) if seen else None
    if logged is None and predicted is None:
        return None
    within = cmp.get("within_tolerance")
    return Kv(logged_tokens=logged, predicted_tokens=predicted, usage_peak=usage, off=_f(cmp.get("off")),
              within=within if isinstance(within, bool) else None, why_no_prediction=str(cmp.get("why_no_prediction") or ""))  # fmt: skip


def needles(s: StageResult) -> Needles | None:
    probes = []
    for p in s.details.get("probes") or []:
        if isinstance(p, dict) and _i(p.get("tokens")) is not None and _f(p.get("depth")) is not None:
            probes.append(Needle(tokens=int(p["tokens"]), depth=float(p["depth"]), found=bool(p.get("found")),
                                 expected=str(p.get("expected", "")), got=str(p.get("got", ""))))  # fmt: skip
    if not probes:
        return None
    return Needles(lengths=tuple(sorted({p.tokens for p in probes})), depths=tuple(sorted({p.depth for p in probes})),
                   probes=tuple(probes),
                   skipped_lengths=tuple(x for x in (_i(v) for v in s.details.get("skipped_lengths") or []) if x))  # fmt: skip


def _expect_text(expect: Any) -> str:
    if not isinstance(expect, dict):
        return str(expect or "")
    parts = []
    for k, v in expect.items():
        if k == "contains" and isinstance(v, list):
            parts.append("contains " + ", ".join(repr(x) for x in v))
        elif k == "regex":
            parts.append(f"matches /{v}/")
        elif k == "number" and isinstance(v, dict):
            parts.append(f"the number {v.get('value')} ± {v.get('tolerance', 0)}")
        else:
            parts.append(f"{k} = {v!r}")
    return "; ".join(parts)


_Judged = tuple[str, list[str], dict[str, Any], list[degeneracy.Finding] | None]


def _degenerate_texts(stages: Sequence[StageResult]) -> dict[str, _Judged]:
    """Every text the degeneracy check judged degenerate: id -> (text, signals, numbers, findings when stored)."""
    out: dict[str, _Judged] = {}
    for s in stages:
        if s.name != "smoke.degeneracy":
            continue
        for t in s.details.get("texts") or []:
            if isinstance(t, dict) and t.get("verdict") == "degenerate":
                out[str(t.get("id", "?"))] = (str(t.get("text") or ""), [str(x) for x in t.get("signals") or []],
                                              dict(t.get("numbers") or {}), evidence.stored_findings(t.get("findings")))  # fmt: skip
    return out


def _numbers_note(numbers: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in numbers.items() if isinstance(v, int | float) and v)


def evidence_of(stages: Sequence[StageResult]) -> list[Evidence]:
    """The failing items of every failed check, each with its flagged answer. A degenerate text that is also a
    golden answer or a needle answer is shown once, with the degeneracy signals added."""
    out: list[Evidence] = []
    degenerate = _degenerate_texts(stages)
    used: set[str] = set()

    def flagged(key: str, text: str, fallback: list[evidence.Span]) -> tuple[tuple[Piece, ...], tuple[str, ...]]:
        if key in degenerate:
            used.add(key)
            stored, signals, numbers, findings = degenerate[key]
            if any(sp.kind == "number" for sp in fallback):
                spans = fallback
            else:
                spans = evidence.degeneracy_spans(text, signals, findings if stored == text else None)
            return tuple(evidence.pieces(text, spans)), (f"degenerate: {', '.join(signals)} ({_numbers_note(numbers)})",)
        return tuple(evidence.pieces(text, fallback)), ()

    for s in stages:
        if s.status not in (Status.FAIL, Status.ERROR):
            continue
        d = s.details
        if s.name == "smoke.golden":
            for p in d.get("prompts") or []:
                if not isinstance(p, dict) or not (p.get("misses") or p.get("error")):
                    continue
                got = str(p.get("got") or "")
                expect: dict[str, object] = p["expect"] if isinstance(p.get("expect"), dict) else {}
                answer, extra = flagged(f"golden:{p.get('id')}", got, evidence.golden_spans(got, expect))
                misses = [str(x) for x in [*(p.get("misses") or []), *([p["error"]] if p.get("error") else [])]]
                out.append(Evidence(check=s.name, title=f"golden prompt {p.get('id', '?')}", prompt=str(p.get("prompt", "")),
                                    expected=_expect_text(expect), answer=answer, notes=(*misses, *extra)))  # fmt: skip
        elif s.name == "smoke.long-context":
            # misses with the same answer at one length are shown once ("depths 0.1, 0.5, 0.9")
            groups: dict[tuple[object, str], list[dict[str, Any]]] = {}
            for p in d.get("probes") or []:
                if isinstance(p, dict) and not p.get("found"):
                    groups.setdefault((p.get("tokens"), str(p.get("got") or "")), []).append(p)
            for (tokens, got), probes in groups.items():
                for p in probes:  # every degenerate needle answer counts as shown
                    used.add(f"long-context:{tokens}@{p.get('depth')}")
                first = probes[0]
                key = f"long-context:{tokens}@{first.get('depth')}"
                used.discard(key)
                answer, extra = flagged(key, got, evidence.needle_spans(got, str(first.get("expected", ""))))
                depths = ", ".join(str(p.get("depth")) for p in probes)
                out.append(Evidence(check=s.name, title=f"needle at {tokens} tokens, depth{'s' if len(probes) > 1 else ''} {depths}",
                                    expected=("the number " if len(probes) == 1 else "the numbers ")
                                    + ", ".join(str(p.get("expected", "")) for p in probes), answer=answer, notes=extra))  # fmt: skip
        elif s.name == "smoke.spec" and isinstance(d.get("first_diverging"), dict):
            div = d["first_diverging"]
            got, ref = str(div.get("with_spec", "")), str(div.get("without_spec", ""))
            k = next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), min(len(got), len(ref)))
            span = [evidence.Span(start=k, end=len(got), kind="diverge", note=f"differs from character {k} on")] if k < len(got) else []
            out.append(Evidence(check=s.name, title=f"prompt {div.get('id', '?')}: greedy output with speculation differs",
                                expected=f"the same text as without speculation: {ref!r}",
                                answer=tuple(evidence.pieces(got, span))))  # fmt: skip
    for key, (text, signals, numbers, findings) in degenerate.items():
        if key in used:
            continue
        spans = evidence.degeneracy_spans(text, signals, findings)
        out.append(Evidence(check="smoke.degeneracy", title=f"{key}: {', '.join(signals)}",
                            answer=tuple(evidence.pieces(text, spans)) or (Piece(text="(empty)", kind="cut"),),
                            notes=(_numbers_note(numbers),) if _numbers_note(numbers) else ()))  # fmt: skip
    return out


def resolve_log(workdir: Path | None, cell_id: str, stored: str) -> Path | None:
    """A log the result names, only when it is a ``.log`` file envbuilder wrote under ``<workdir>/logs/``: the
    stored path, or the same file name in ``<workdir>/logs/<cell>/`` when the run happened elsewhere (the
    committed H200 runs). A result may name any path (``/etc/passwd``): nothing else is read or linked."""
    if workdir is None or not stored:
        return None
    logs = (workdir / "logs").resolve()
    for cand in (Path(stored), logs / cell_id / Path(stored).name):
        try:
            p = cand.resolve()
        except OSError:
            continue
        if p.suffix == ".log" and p.is_relative_to(logs) and p.is_file():
            return p
    return None


def cell_view(r: CellResult, *, workdir: Path | None = None, page_dir: Path | None = None,
              baseline: float | None = None) -> CellView:  # fmt: skip
    """Everything the page shows about one cell."""
    smoke = r.stage("smoke")
    launch: Mapping[str, Any] = smoke.details.get("launch") or {} if smoke else {}
    tl = timeline(launch) if launch else None
    sp = sc = nd = None
    for s in r.stages:
        if s.name == "smoke.speed":
            sp = speed(s, baseline)
        elif s.name == "smoke.spec":
            sc = spec(s)
        elif s.name == "smoke.long-context":
            nd = needles(s)
    ev = evidence_of(r.stages)
    links: list[LogLink] = []
    tail = None
    base = (page_dir or (workdir / "reports" if workdir else None))
    for s in r.stages:
        for key in ("log", "reference_log", "build_log"):
            p = resolve_log(workdir, r.id, str(s.details.get(key) or ""))
            if p is not None and base is not None and all(link.name != p.name for link in links):
                links.append(LogLink(name=p.name, href=Path(os.path.relpath(p, base.resolve())).as_posix()))
    if smoke is not None and launch and launch.get("status") not in (None, "pass"):
        p = resolve_log(workdir, r.id, str(smoke.details.get("log") or ""))
        if p is not None:
            lines, hit = evidence.deciding_lines(p.read_text(errors="replace").splitlines(), str(launch.get("message", "")))
            tail = LogTail(name=p.name, lines=tuple(lines), hit=hit, link=next((x.href for x in links if x.name == p.name), None))
    findings = tuple((str(f.get("rule", "")), str(f.get("status", "")), str(f.get("message", "")))
                     for s in r.stages if s.name == "precheck" for f in s.details.get("findings") or [] if isinstance(f, dict))  # fmt: skip
    return CellView(result=r, anchor="cell-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in r.id),
                    stages=r.stages, timeline=tl, speed=sp, spec=sc, kv=kv(smoke.details, r.stages) if smoke else None,
                    needles=nd, evidence=tuple(ev), log_tail=tail, logs=tuple(links), findings=findings)  # fmt: skip
