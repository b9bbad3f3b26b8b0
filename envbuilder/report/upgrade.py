"""The upgrade view: the pinned cell and a candidate side by side — the packages that moved, both verdicts,
the speed deltas. Built from a typed :class:`Upgrade` so `watch` (or anything holding two results and a lock
diff) can plug it in."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.table import Table

from envbuilder import lock, watch
from envbuilder.errors import InputError
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status
from envbuilder.watch import UpgradeSummary


@dataclass(frozen=True, kw_only=True)
class Moved:
    name: str
    old: str | None  # None: new in the candidate
    new: str | None  # None: gone from the candidate


@dataclass(frozen=True, kw_only=True)
class Metric:
    name: str
    unit: str
    pinned: float | None
    candidate: float | None
    higher_is_better: bool = True

    @property
    def delta_pct(self) -> float | None:
        if not self.pinned or self.candidate is None:
            return None
        return (self.candidate - self.pinned) / self.pinned * 100

    @property
    def worse(self) -> bool:
        d = self.delta_pct
        return d is not None and (d < 0 if self.higher_is_better else d > 0)


@dataclass(frozen=True, kw_only=True)
class Upgrade:
    """The pin and one candidate release. ``verdict`` is watch's word for it ("safe to upgrade", "blocked", …);
    ``moved`` the locked packages that differ, ``changes`` what else moved (flags), in watch's words."""

    pinned: CellResult
    candidate: CellResult
    moved: tuple[Moved, ...]
    safe: bool
    verdict: str = ""
    reasons: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.verdict or ("safe to upgrade" if self.safe else "not safe")

    @property
    def tone(self) -> str:
        """The status colour of the verdict: pass (safe to upgrade), skip (safe to try on a GPU), error
        (undecided), fail (blocked, not safe)."""
        if self.safe:
            return "pass"
        return {watch.SAFE_TO_TRY: "skip", watch.UNDECIDED: "error"}.get(self.verdict, "fail")

    @property
    def key_moves(self) -> tuple[Moved, ...]:
        """The moved packages that matter most (the engine, torch, the kernels), shown first."""
        keys = {*watch.KEY_PACKAGES, *(a.replace("_", "-") for a in self.candidate.axes)}
        return tuple(m for m in self.moved if m.name in keys)

    @property
    def metrics(self) -> tuple[Metric, ...]:
        def num(r: CellResult, stage: str, key: str) -> float | None:
            s = r.stage(stage)
            v = s.details.get(key) if s else None
            return float(v) if isinstance(v, int | float) else None

        def ready(r: CellResult) -> float | None:
            s = r.stage("smoke")
            v = (s.details.get("launch") or {}).get("ready_s") if s else None
            return float(v) if isinstance(v, int | float) else None

        p, c = self.pinned, self.candidate
        return (Metric(name="decode", unit="tok/s", pinned=num(p, "smoke.speed", "decode_tokens_per_s"),
                       candidate=num(c, "smoke.speed", "decode_tokens_per_s")),
                Metric(name="TTFT", unit="ms", pinned=_ms(num(p, "smoke.speed", "ttft_s")),
                       candidate=_ms(num(c, "smoke.speed", "ttft_s")), higher_is_better=False),
                Metric(name="ready after", unit="s", pinned=ready(p), candidate=ready(c), higher_is_better=False),
                Metric(name="spec acceptance", unit="", pinned=num(p, "smoke.spec", "acceptance_length"),
                       candidate=num(c, "smoke.spec", "acceptance_length")))  # fmt: skip


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000


def from_results(pinned: CellResult, candidate: CellResult, lock_diff: Sequence[Mapping[str, str | None]]) -> Upgrade:
    """``lock_diff`` as :func:`envbuilder.lock.diff` returns it (name, old, new)."""
    moved = tuple(Moved(name=str(d["name"]), old=d.get("old"), new=d.get("new")) for d in lock_diff)
    reasons = tuple(f"{s.name}: {s.status.value} {s.reason.value}" + (f" — {s.message}" if s.message else "")
                    for s in candidate.stages if s.status is not Status.PASS)  # fmt: skip
    return Upgrade(pinned=pinned, candidate=candidate, moved=moved, safe=not reasons, reasons=reasons)


def verdict_of(r: CellResult) -> str:
    """A side's verdict; "–" where only its id is known (the pin's result is not in this workdir)."""
    return r.verdict.value if r.stages else "–"


def fmt_delta(m: Metric) -> str:
    d = m.delta_pct
    return "" if d is None else f"{d:+.1f}%"


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if not unit else f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"


def markdown(u: Upgrade) -> str:
    icon = {"pass": "✅", "skip": "🟡", "error": "⚠️", "fail": "❌"}[u.tone]
    lines = [f"### Upgrade: `{u.pinned.id}` → `{u.candidate.id}`: {icon} {u.label}", "",
             "| | pinned | candidate | Δ |", "|---|---|---|---|",
             f"| verdict | {verdict_of(u.pinned)} | {verdict_of(u.candidate)} | |"]  # fmt: skip
    lines += [f"| {m.name} | {fmt_value(m.pinned, m.unit)} | {fmt_value(m.candidate, m.unit)} | {fmt_delta(m)} |"
              for m in u.metrics if m.pinned is not None or m.candidate is not None]  # fmt: skip
    if u.moved:
        lines += ["", f"{len(u.moved)} package(s) moved: " + ", ".join(
            f"{x.name} {x.old or '∅'} → {x.new or '∅'}" for x in u.moved)]
    lines += [f"- {r}" for r in u.reasons] + [f"- fix: {f}" for f in u.fixes] + [f"- changed: {c}" for c in u.changes]
    return "\n".join(lines).replace("<", "&lt;").replace(">", "&gt;") + "\n"


def table(u: Upgrade) -> Table:
    t = Table(title=f"upgrade: {u.label if u.verdict else ('safe' if u.safe else 'NOT safe')}", title_justify="left")
    t.add_column("")
    t.add_column("pinned", overflow="fold", max_width=44)
    t.add_column("candidate", overflow="fold", max_width=44)
    t.add_column("Δ", justify="right")
    t.add_row("cell", u.pinned.id, u.candidate.id, "")
    t.add_row("verdict", verdict_of(u.pinned), verdict_of(u.candidate), "")
    for m in u.metrics:
        if m.pinned is not None or m.candidate is not None:
            style = "red" if m.worse else "green"
            t.add_row(m.name, fmt_value(m.pinned, m.unit), fmt_value(m.candidate, m.unit), f"[{style}]{fmt_delta(m)}[/]")
    for x in u.moved:
        t.add_row(x.name, x.old or "–", x.new or "–", "")
    return t


def _from_record(cell: str, axis: str, version: str, stages: Sequence[tuple[str, str, str]]) -> CellResult:
    """A release's cell as the summary records it (stage, status, reason), where its full result is not stored."""
    out = []
    for name, status, reason in stages:
        try:
            out.append(StageResult(name=name, status=Status(status), reason=Reason(reason)))
        except ValueError:
            continue
    return CellResult(id=cell, axes={axis: version}, stages=tuple(out))


def from_summary(summary: UpgradeSummary, workdir: Path) -> list[Upgrade]:
    """The upgrade views of what ``watch`` decided: per judged release, the pin and the release side by side
    (their stored results where the workdir has them — speeds, start-up, acceptance — else the stages the
    summary recorded), the locked packages that moved (production lock vs the release's, where both are
    stored), and watch's verdict, reasons, fixes and changes."""
    store = ResultStore(workdir / "results")
    pinned = store.load(summary.pinned_cell) or CellResult(id=summary.pinned_cell,
                                                           axes={summary.package: summary.pinned_version})  # fmt: skip
    pinned_lock = workdir / "locks" / "production" / "pylock.toml"
    out = []
    for rel in summary.releases:
        cand = store.load(rel.cell) or _from_record(rel.cell, summary.package, rel.version, rel.stages)
        cand_lock = workdir / "locks" / cand.id / "pylock.toml"
        moved: list[dict[str, str | None]] = []
        if pinned_lock.is_file() and cand_lock.is_file():
            moved = lock.diff(lock.read(pinned_lock).versions(), lock.read(cand_lock).versions())
        base = from_results(pinned, cand, moved)
        out.append(replace(base, verdict=rel.verdict, safe=rel.verdict == watch.SAFE_TO_UPGRADE,
                           reasons=rel.reasons or base.reasons, fixes=rel.fixes, changes=rel.changes))  # fmt: skip
    return out


def from_watch(workdir: Path) -> list[Upgrade]:
    """:func:`from_summary` of ``<workdir>/watch/summary.json``; none without one; a broken one is an input
    error naming the file."""
    path = workdir / "watch" / "summary.json"
    if not path.is_file():
        return []
    try:
        summary = watch.UpgradeSummary.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(str(path), None, f"not a watch summary ({e})") from None
    return from_summary(summary, workdir)
