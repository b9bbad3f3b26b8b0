"""watch: is a newer SGLang release safe to upgrade to? Candidates are the pinned cell with the engine
package at each newer release (read from the index's PEP 691 JSON API, cached with ETags)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import Version

from envbuilder import indexconfig
from envbuilder.index import SimpleIndex
from envbuilder.matrix import Cell, Matrix
from envbuilder.pipeline import Workspace
from envbuilder.results import CellResult, Status


def candidates(m: Matrix, ws: Workspace, pinned: Cell, package: str, *, include_prereleases: bool = False,
               index: SimpleIndex | None = None) -> list[tuple[Cell, str]]:  # fmt: skip
    """(candidate cell, its upload time) for every release of ``package`` newer than the pinned one."""
    axis = next((a for a, _ in pinned.packages if a.replace("_", "-") == package), None)
    if axis is None:
        return []
    current = Version(dict(pinned.packages)[axis])
    idx = index or SimpleIndex(indexconfig.require_read_url(m.resolve.indexes, str(m.path)), ws.cache / "index")
    out = []
    for v, when in idx.versions(package):
        if v <= current or (v.is_prerelease and not include_prereleases):
            continue
        pkgs = tuple((a, str(v) if a == axis else val) for a, val in pinned.packages)
        out.append((replace(pinned, packages=pkgs), when.isoformat() if when else "?"))
    return out


# --------------------------------------------------------------------------------------------
# Deciding: one typed verdict per release, and the summary record the reports draw from
# --------------------------------------------------------------------------------------------

SAFE_TO_UPGRADE = "safe to upgrade"
SAFE_TO_TRY = "safe to try on a GPU"
BLOCKED = "blocked"
UNDECIDED = "undecided"
KEY_PACKAGES = ("torch", "flash-attn-4", "sglang-kernel", "sgl-kernel", "flashinfer-python", "transformers", "kernels",
                "cuda-tile", "triton")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ReleaseVerdict:
    """pin -> one candidate release: the verdict, why, what changed, the fix."""

    version: str
    cell: str
    uploaded: str
    verdict: str  # SAFE_TO_UPGRADE | SAFE_TO_TRY | BLOCKED | UNDECIDED
    reasons: tuple[str, ...] = ()  # what blocks it (stage: reason — message), or why it is undecided
    fixes: tuple[str, ...] = ()  # what would unblock it, where the tool knows
    changes: tuple[str, ...] = ()  # key packages and launch flags that moved since the pin
    notes: tuple[str, ...] = ()  # accepted but worth knowing (deprecated flags, launch-check notes)
    stages: tuple[tuple[str, str, str], ...] = ()  # (stage, status, reason)
    ran_with: str | None = None  # the interpreter the venv was made from
    duration_s: float = 0.0
    venv_gib: float | None = None
    drift: int | None = None  # packages that moved between the release-day lock and today's

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "cell": self.cell, "uploaded": self.uploaded, "verdict": self.verdict,
                "reasons": list(self.reasons), "fixes": list(self.fixes), "changes": list(self.changes),
                "notes": list(self.notes), "stages": [list(s) for s in self.stages], "ran_with": self.ran_with,
                "duration_s": round(self.duration_s, 1), "venv_gib": self.venv_gib, "drift": self.drift}  # fmt: skip

    @staticmethod
    def from_json(d: dict[str, Any]) -> ReleaseVerdict:
        return ReleaseVerdict(version=d["version"], cell=d["cell"], uploaded=d["uploaded"], verdict=d["verdict"],
                              reasons=tuple(d.get("reasons", ())), fixes=tuple(d.get("fixes", ())),
                              changes=tuple(d.get("changes", ())), notes=tuple(d.get("notes", ())),
                              stages=tuple((str(a), str(b), str(c)) for a, b, c in d.get("stages", ())),
                              ran_with=d.get("ran_with"), duration_s=float(d.get("duration_s", 0.0)),
                              venv_gib=d.get("venv_gib"), drift=d.get("drift"))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class UpgradeSummary:
    """What ``watch`` decided, stored as ``<workdir>/watch/summary.json`` (the HTML upgrade view reads it)."""

    package: str
    pinned_cell: str
    pinned_version: str
    launch_args: tuple[str, ...]
    created: str
    gpu: bool
    releases: tuple[ReleaseVerdict, ...]

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "package": self.package, "pinned_cell": self.pinned_cell,
                "pinned_version": self.pinned_version, "launch_args": list(self.launch_args), "created": self.created,
                "gpu": self.gpu, "releases": [r.to_json() for r in self.releases]}  # fmt: skip

    @staticmethod
    def from_json(d: dict[str, Any]) -> UpgradeSummary:
        return UpgradeSummary(package=d["package"], pinned_cell=d["pinned_cell"], pinned_version=d["pinned_version"],
                              launch_args=tuple(d.get("launch_args", ())), created=d["created"], gpu=bool(d["gpu"]),
                              releases=tuple(ReleaseVerdict.from_json(r) for r in d["releases"]))  # fmt: skip

    def render(self, width: int = 118) -> list[str]:
        """The one-screen upgrade summary: pin -> candidate: verdict and why, what changed, the fix."""
        out = [f"{self.package} {self.pinned_version} (pinned) -> newer releases"
               + ("" if self.gpu else " (no GPU here: at best 'safe to try on a GPU')")]  # fmt: skip
        for r in self.releases:
            whys = list(dict.fromkeys(_short(x) for x in r.reasons))
            out.append(_clip(f"{self.pinned_version} -> {r.version}: {r.verdict}"
                             + (f" — {'; '.join(whys)}" if whys else ""), width))  # fmt: skip
            pkgs = [re.sub(r"^(\S+) \S+ → ", r"\1 ", c) for c in r.changes
                    if c.split()[0] in ("torch", "flash-attn-4", "sglang-kernel", "transformers")]  # fmt: skip
            gone = [c.split()[1] for c in r.changes if c.startswith("removed --")]
            old = [c.split()[1] for c in r.changes if c.startswith("deprecated --")]
            if pkgs:
                out.append(_clip("    changed: " + "; ".join(pkgs), width))
            flags = [*(["removed " + ", ".join(gone)] if gone else []), *(["deprecated " + ", ".join(old)] if old else [])]
            if flags:
                out.append(_clip("    flags: " + "; ".join(flags), width))
            for f in dict.fromkeys(_short_fix(x) for x in r.fixes):
                out.append(_clip("    fix: " + f, width))
        return out


def _short(reason: str) -> str:
    """A reason in a few words: the stage, the slug and what it names (the record keeps the full text)."""
    stage, _, rest = reason.partition(": ")
    slug, _, message = rest.partition(" — ")
    if slug == "bad-flag":
        flags = list(dict.fromkeys(re.findall(r"(--[\w-]+) is gone", message)))
        return f"bad-flag {', '.join(flags)}" if flags else f"{stage}: bad-flag"
    if (m := re.search(r"Failed to build `([^`]+)`", message)) is not None:
        return f"{stage}: {slug} ({m.group(1)} cannot be built here)"
    return f"{stage}: {slug} — {re.sub(r' [(]log: [^)]*[)]', '', message)}"


def _short_fix(fix: str) -> str:
    if (m := re.fullmatch(r"replace (\S+) with (\S+)", fix)) is not None:
        return f"{m.group(1)} → {m.group(2)}"
    return re.sub(r" has no wheel here: its sdist downloads the real wheel from another index at build time; (.*?)"
                  r" \(or build where it is reachable\)$", r": a placeholder sdist, its wheel is on another index: \1",
                  fix)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def load_summary(path: Path) -> UpgradeSummary | None:
    """The stored summary, or None when there is none (or it is unreadable: it is rewritten then)."""
    try:
        return UpgradeSummary.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def decide(result: CellResult, *, gpu: bool, baseline: dict[str, Any] | None = None,
           tolerance: float = 0.10) -> tuple[str, list[str], list[str]]:  # fmt: skip
    """(verdict, reasons, fixes) from one candidate's stage results.

    ``blocked`` when a stage decided the cell is incompatible; ``undecided`` when one could not decide;
    ``safe to try on a GPU`` when everything up to the import/launch checks passed and there is no GPU;
    ``safe to upgrade`` only when the GPU stages passed too and speculation acceptance, decode tok/s and TTFT
    are within ``tolerance`` of the pin's ``baseline``.
    """
    reasons: list[str] = []
    fixes: list[str] = []
    for s in result.stages:
        if s.status is Status.FAIL:
            reasons.append(f"{s.name}: {s.reason.value} — {s.message}")
            fixes += [str(f) for f in s.details.get("fixes", []) or []]
            if s.name == "build":
                fixes += build_fixes(s.message)
    if reasons:
        return BLOCKED, reasons, fixes
    errors = [f"{s.name}: {s.reason.value} — {s.message}" for s in result.stages if s.status is Status.ERROR]
    if errors:
        return UNDECIDED, errors, []
    smoke = result.stage("smoke")
    if not gpu or smoke is None or smoke.status is Status.SKIP:
        return SAFE_TO_TRY, [], []
    base = baseline or {}
    spec = result.stage("smoke.spec")
    speed = result.stage("smoke.speed")
    acc = spec.details.get("acceptance_length") if spec is not None else None
    if acc is not None and base.get("spec_accept_length") and acc < base["spec_accept_length"] * (1 - tolerance):
        reasons.append(f"smoke.spec: spec-low-acceptance — acceptance length {acc:.2f} < pin's "
                       f"{base['spec_accept_length']:.2f} - {tolerance:.0%}")  # fmt: skip
    if speed is not None:
        tps, ttft = speed.details.get("decode_tokens_per_s"), speed.details.get("ttft_s")
        if tps is not None and base.get("decode_tokens_per_s") and tps < base["decode_tokens_per_s"] * (1 - tolerance):
            reasons.append(f"smoke.speed: perf-regression — decode {tps} tok/s < pin's {base['decode_tokens_per_s']}"
                           f" - {tolerance:.0%}")  # fmt: skip
        if ttft is not None and base.get("ttft_s") and ttft > base["ttft_s"] * (1 + tolerance):
            reasons.append(f"smoke.speed: perf-regression — TTFT {ttft:.3f} s > pin's {base['ttft_s']:.3f} s"
                           f" + {tolerance:.0%}")  # fmt: skip
    missing = [n for n in ("smoke.golden", "smoke.degeneracy") if (st := result.stage(n)) is None
               or st.status is not Status.PASS]  # fmt: skip
    if reasons:
        return BLOCKED, reasons, fixes
    if missing:
        return SAFE_TO_TRY, [f"{n} did not pass" for n in missing], []
    return SAFE_TO_UPGRADE, [], []


def build_fixes(message: str) -> list[str]:
    """A fix for a build that failed because a package's sdist fetches its real wheel from a host this machine
    cannot reach (cuda-tile 1.6.0rc5, pinned by sglang 0.5.18-0.5.22, is such a placeholder on the default index)."""
    m = re.search(r"Failed to build `([^`=]+)==([^`]+)`", message)
    if m is None or "could not resolve" not in message:
        return []
    return [f"{m.group(1)} {m.group(2)} has no wheel here: its sdist downloads the real wheel from another index "
            f"at build time; add that index to [resolve] indexes (or build where it is reachable)"]


def key_changes(pinned: dict[str, str], candidate: dict[str, str]) -> list[str]:
    """Key packages that moved between the pin's lock and the candidate's (``torch 2.11.0 → 2.13.0``)."""
    out = []
    for name in KEY_PACKAGES:
        a, b = pinned.get(name), candidate.get(name)
        if a != b and (a or b):
            out.append(f"{name} {a or '—'} → {b or '—'}")
    return out
