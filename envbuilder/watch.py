"""watch: is a newer SGLang release safe to upgrade to? Candidates are the pinned cell with the engine
package at each newer release (read from the index's PEP 691 JSON API, cached with ETags)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from packaging.version import Version

from envbuilder.index import SimpleIndex
from envbuilder.matrix import Cell, Matrix
from envbuilder.pipeline import Workspace


def candidates(m: Matrix, ws: Workspace, pinned: Cell, package: str, *, include_prereleases: bool = False,
               index: SimpleIndex | None = None) -> list[tuple[Cell, str]]:  # fmt: skip
    """(candidate cell, its upload time) for every release of ``package`` newer than the pinned one."""
    axis = next((a for a, _ in pinned.packages if a.replace("_", "-") == package), None)
    if axis is None:
        return []
    current = Version(dict(pinned.packages)[axis])
    idx = index or SimpleIndex(m.resolve.indexes[0], ws.cache / "index")
    out = []
    for v, when in idx.versions(package):
        if v <= current or (v.is_prerelease and not include_prereleases):
            continue
        pkgs = tuple((a, str(v) if a == axis else val) for a, val in pinned.packages)
        out.append((replace(pinned, packages=pkgs), when.isoformat() if when else "?"))
    return out


def verdict(result: Any) -> tuple[bool, list[str]]:
    """Safe to upgrade when every stage passed (no skips, no perf regression); else the reasons."""
    reasons = [f"{s.name}: {s.status.value} {s.reason.value} — {s.message}" for s in result.stages
               if s.status.value != "pass"]  # fmt: skip
    return not reasons, reasons
