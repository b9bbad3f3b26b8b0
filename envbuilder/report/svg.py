"""Small inline SVG drawings for the HTML page (no JavaScript, no fonts or images fetched): the start-up
timeline, the speed sweep against the pinned baseline, and the speculative acceptance bar. Every text drawn
is escaped."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

from envbuilder.report.views import Spec, Speed, Timeline

PHASE_COLOR = {"launch": "#c7ccd6", "imports": "#8fb3e0", "weights": "#5b8bd0", "KV/state pools": "#8a6fc9",
               "graph capture": "#e0a84f", "compile": "#d98b3a", "warm-up": "#5fb58a"}  # fmt: skip
FONT = 'font-family="system-ui,sans-serif" font-size="11"'


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _secs(x: float) -> str:
    return f"{x:.0f} s" if x >= 10 else f"{x:.1f} s"


def _ticks(top: float, n: int = 5) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top / step) + 1)]


def timeline(t: Timeline, width: int = 1100) -> Markup:
    """One horizontal bar from 0 s to ready (or to the failure, marked with a red cross), a coloured segment per
    phase with its seconds; hovering a segment names its milestones. The legend is the page's."""
    end = max([s.end for s in t.segments] + [t.total_s or 0.0, 1e-9])
    left, right, bar_y, bar_h = 8, 30, 20, 26
    scale = (width - left - right) / end
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {width} 52" width="{width}" '
           f'height="52" role="img" {FONT}><title>start-up timeline: {escape(_secs(end))}</title>']
    for tick in _ticks(end, 10):
        x = left + tick * scale
        out.append(f'<line x1="{_n(x)}" y1="{bar_y - 4}" x2="{_n(x)}" y2="{bar_y + bar_h + 4}" stroke="#dde"/>'
                   f'<text x="{_n(x)}" y="12" text-anchor="middle" fill="#777">{_n(tick)} s</text>')
    for s in t.segments:
        x, w = left + s.start * scale, max(1.5, (s.end - s.start) * scale)
        tip = f"{s.phase}: {_secs(s.end - s.start)} ({_n(s.start)}–{_n(s.end)} s; {', '.join(s.milestones)})"
        out.append(f'<rect x="{_n(x)}" y="{bar_y}" width="{_n(w)}" height="{bar_h}" fill="{PHASE_COLOR.get(s.phase, "#bbb")}">'
                   f"<title>{escape(tip)}</title></rect>")
        label = f"{s.phase} {_secs(s.end - s.start)}"
        if w > 7 * len(label):
            out.append(f'<text x="{_n(x + w / 2)}" y="{bar_y + 17}" text-anchor="middle" fill="#fff">{escape(label)}</text>')
        elif w > 40:
            out.append(f'<text x="{_n(x + w / 2)}" y="{bar_y + 17}" text-anchor="middle" fill="#fff">{escape(_secs(s.end - s.start))}</text>')
    last = left + (t.segments[-1].end if t.segments else 0) * scale
    if t.failed:
        out.append(f'<g stroke="#c62828" stroke-width="3"><title>{escape("failed: " + t.failed)}</title>'
                   f'<line x1="{_n(last + 4)}" y1="{bar_y + 2}" x2="{_n(last + 20)}" y2="{bar_y + bar_h - 2}"/>'
                   f'<line x1="{_n(last + 20)}" y1="{bar_y + 2}" x2="{_n(last + 4)}" y2="{bar_y + bar_h - 2}"/></g>')
    out.append("</svg>")
    return Markup("".join(out))


def speed(s: Speed, width: int = 440, height: int = 220) -> Markup:
    """Aggregate tok/s against concurrency (log scale), the single-stream decode rate, the pinned baseline as a
    dashed line; TTFT per concurrency on a second axis when it was measured."""
    left, right, top, bottom = 48, 48, 26, 36
    pw, ph = width - left - right, height - top - bottom
    pts = list(s.points)
    ymax = max([p.tokens_per_s for p in pts] + [s.decode_tokens_per_s or 0, s.baseline_tokens_per_s or 0, 1.0]) * 1.12
    xs = [p.concurrency for p in pts] or [1]
    lo, hi = math.log2(min([*xs, 1])), math.log2(max([*xs, 1]))
    span = hi - lo or 1.0

    def X(c: float) -> float:
        return left + (math.log2(c) - lo) / span * pw if hi > lo else left + pw / 2

    def Y(v: float) -> float:
        return top + ph - v / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" {FONT}><title>{escape(s.message)}</title>'
           f'<text x="{left}" y="14" fill="#333" font-weight="600">tok/s by concurrency</text>']
    for tick in [t for t in _ticks(ymax, 4) if t <= ymax]:
        out.append(f'<line x1="{left}" y1="{_n(Y(tick))}" x2="{left + pw}" y2="{_n(Y(tick))}" stroke="#eee"/>'
                   f'<text x="{left - 6}" y="{_n(Y(tick) + 4)}" text-anchor="end" fill="#777">{_n(tick)}</text>')
    for c in xs:
        out.append(f'<text x="{_n(X(c))}" y="{top + ph + 16}" text-anchor="middle" fill="#777">{c}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 4}" text-anchor="middle" fill="#777">concurrent requests</text>'
               f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#999"/>')
    if s.baseline_tokens_per_s:
        yb = Y(s.baseline_tokens_per_s)
        out.append(f'<line x1="{left}" y1="{_n(yb)}" x2="{left + pw}" y2="{_n(yb)}" stroke="#555" stroke-dasharray="5 4">'
                   f"<title>pinned baseline {escape(_n(s.baseline_tokens_per_s))} tok/s (single stream)</title></line>"
                   f'<text x="{left + pw - 2}" y="{_n(yb - 4)}" text-anchor="end" fill="#555">pinned {escape(_n(s.baseline_tokens_per_s))}</text>')
    color = "#c62828" if s.status.value == "fail" else "#1f6fd1"
    if pts:
        path = " ".join(f"{_n(X(p.concurrency))},{_n(Y(p.tokens_per_s))}" for p in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for p in pts:
            out.append(f'<circle cx="{_n(X(p.concurrency))}" cy="{_n(Y(p.tokens_per_s))}" r="3.5" fill="{color}">'
                       f"<title>{p.concurrency} concurrent: {_n(p.tokens_per_s)} tok/s</title></circle>"
                       f'<text x="{_n(X(p.concurrency))}" y="{_n(Y(p.tokens_per_s) - 7)}" text-anchor="middle" fill="{color}">{_n(p.tokens_per_s)}</text>')
    if s.decode_tokens_per_s:
        x, y = X(1), Y(s.decode_tokens_per_s)
        out.append(f'<path d="M{_n(x)} {_n(y - 5)} l5 5 l-5 5 l-5 -5 z" fill="#333"><title>decode, one stream: '
                   f"{escape(_n(s.decode_tokens_per_s))} tok/s</title></path>")
    ttfts = [p for p in pts if p.ttft_s is not None]
    if ttfts:
        tmax = max(p.ttft_s or 0 for p in ttfts) * 1.15 or 1.0
        tp = " ".join(f"{_n(X(p.concurrency))},{_n(top + ph - (p.ttft_s or 0) / tmax * ph)}" for p in ttfts)
        out.append(f'<polyline points="{tp}" fill="none" stroke="#8a6fc9" stroke-width="1.5" stroke-dasharray="2 2"/>'
                   f'<text x="{left + pw + 6}" y="{top + 4}" fill="#8a6fc9">TTFT</text>'
                   f'<text x="{left + pw + 6}" y="{top + 16}" fill="#8a6fc9">{escape(_n(tmax / 1.15 * 1000))} ms</text>')
    out.append("</svg>")
    return Markup("".join(out))


def acceptance(sp: Spec, width: int = 260) -> Markup:
    """Acceptance length as a bar from 1 (nothing accepted) with the floor marked."""
    if sp.acceptance_length is None:
        return Markup("")
    top = max(4.0, sp.acceptance_length + 0.5, (sp.floor or 0) + 0.5)
    scale = (width - 20) / (top - 1)
    w = max(1.0, (sp.acceptance_length - 1) * scale)
    color = "#2e7d32" if sp.status.value == "pass" else "#c62828"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="bar" viewBox="0 0 {width} 34" width="{width}" height="34" '
           f'role="img" {FONT}><title>acceptance length {sp.acceptance_length:.2f}</title>'
           f'<rect x="10" y="4" width="{width - 20}" height="14" fill="#eee"/>'
           f'<rect x="10" y="4" width="{_n(w)}" height="14" fill="{color}"/>']
    if sp.floor is not None:
        fx = 10 + (sp.floor - 1) * scale
        out.append(f'<line x1="{_n(fx)}" y1="1" x2="{_n(fx)}" y2="21" stroke="#333" stroke-width="2"/>'
                   f'<text x="{_n(fx)}" y="31" text-anchor="middle" fill="#333">floor {sp.floor:g}</text>')
    out.append(f'<text x="10" y="31" fill="#777">1</text><text x="{width - 10}" y="31" text-anchor="end" fill="#777">{_n(top)}</text></svg>')
    return Markup("".join(out))
