"""pin: make a known-good cell's lock the production one, with its provenance; and check it still holds.

``<workdir>/locks/production/pylock.toml`` is the cell's lock, byte for byte; ``provenance.json`` says
which cell, which checks passed with their numbers, on which runner, when, by which envbuilder, and
the image reference with its digest.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from envbuilder import __version__, atomic, children, lock
from envbuilder.errors import InputError
from envbuilder.matrix import Cell, Matrix
from envbuilder.pipeline import STAGE_ORDER, RunContext, Workspace
from envbuilder.resolve import as_of_date, build_request, compile_lock
from envbuilder.results import CellResult, Status


def production_dir(ws: Workspace) -> Path:
    return ws.root / "locks" / "production"


def not_passed(result: CellResult) -> list[str]:
    """Stages that did not pass, or did not run (a skipped GPU stage is not a pass)."""
    out = [f"{s.name} {s.status.value}" + (f" ({s.reason.value})" if s.reason.value != "ok" else "")
           for s in result.stages if s.status is not Status.PASS]  # fmt: skip
    ran = {s.name for s in result.stages}
    return out + [f"{name} not run" for name in STAGE_ORDER if name not in ran]


def write_pin(ws: Workspace, cell: Cell, result: CellResult, *, force: bool) -> dict[str, Any]:
    """Write the production pin; refuses a cell that has not passed every stage unless ``force``."""
    missing = not_passed(result)
    if not result.stages:
        raise InputError(str(ws.results.path(cell.id)), None, f"no results for {cell.id}: run it first")
    if missing and not force:
        raise InputError(cell.id, None, "has not passed every stage: " + ", ".join(missing) + " (use --force to pin anyway)")
    src = ws.locks(cell.id) / "pylock.toml"
    if not src.exists():
        raise InputError(str(src), None, "the cell has no lock: run resolve first")
    dest = production_dir(ws)
    dest.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(dest / "pylock.toml", src.read_bytes())
    built = result.environment()
    speed = result.stage("smoke.speed")
    spec = result.stage("smoke.spec")
    prov = {
        "cell": cell.id, "axes": cell.axes, "hash": cell.hash, "lock_sha256": lock.read(src).sha256,
        "pinned_at": datetime.datetime.now(datetime.UTC).isoformat(), "envbuilder": __version__,
        "forced": bool(missing) and force, "not_passed": missing,
        "image": built.image if built else None,
        "image_id": built.image_id if built else None,
        "checks": {s.name: {"status": s.status.value, "message": s.message} for s in result.stages},
        "baseline": {"decode_tokens_per_s": speed.details.get("decode_tokens_per_s") if speed else None,
                     "ttft_s": speed.details.get("ttft_s") if speed else None,
                     "spec_accept_length": spec.details.get("acceptance_length") if spec else None},
        "runner": result.env.get("host", {}),
    }  # fmt: skip
    atomic.write_json(dest / "provenance.json", prov)
    return prov


def read_provenance(ws: Workspace) -> dict[str, Any]:
    p = production_dir(ws) / "provenance.json"
    if not p.exists():
        raise InputError(str(p), None, "no production pin: run `envbuilder pin CELL` first")
    try:
        data: dict[str, Any] = json.loads(p.read_text())
    except ValueError as e:
        raise InputError(str(p), None, f"not JSON ({e})") from None
    return data


def check_pin(ctx: RunContext, cell: Cell) -> list[dict[str, str | None]]:
    """Re-resolve the pinned cell as of its release; the packages whose version differs from the pin."""
    pinned = lock.read(production_dir(ctx.workspace) / "pylock.toml")
    when, _ = as_of_date(ctx, cell)
    req = build_request(ctx.matrix, cell, when)
    with children.temp_dir(ctx.workspace.root, "pin-check") as tmp:
        res = compile_lock(req, tmp / "pylock.toml", timeout_s=ctx.matrix.resolve.timeout_s,
                           workdir=ctx.workspace.root)  # fmt: skip
        if res.lock is None:
            last = res.stderr.strip().splitlines()[-1:] or ["?"]
            return [{"name": "(resolution failed)", "old": None, "new": last[0]}]
        return lock.diff(pinned.versions(), res.lock.versions())


def pinned_cell(m: Matrix, prov: dict[str, Any]) -> Cell:
    """The pinned cell as a Cell of matrix ``m`` (its settings digest)."""
    axes = dict(prov["axes"])
    packages = tuple((a, axes[a]) for a in axes if a not in ("cuda", "driver", "os", "python"))
    return Cell(packages=packages, cuda=axes["cuda"], driver=axes["driver"], os=axes["os"], python=axes["python"],
                settings=m.settings_digest)  # fmt: skip
