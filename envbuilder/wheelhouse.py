"""wheelhouse: every wheel of a cell's lock, downloaded and verified against the lock's sha256, so an
air-gapped GPU runner installs with no network. ``--exclude-from`` takes a ``pip freeze`` of the runner
(or its base image) and leaves out what it already has at the same version: only the overlay travels.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from envbuilder import lock
from envbuilder.errors import InputError, StageFailure
from envbuilder.results import Reason, Status


def read_freeze(path: Path) -> dict[str, str]:
    """``pip freeze`` output -> {normalised name: version} (editable and URL lines are ignored)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(str(path), None, f"cannot read ({e.strerror or e})") from None
    out: dict[str, str] = {}
    for line in text.splitlines():
        if m := re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line):
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out


@dataclass(frozen=True, kw_only=True)
class Fetched:
    files: list[Path]
    skipped: list[str]
    bytes: int


def _pick_wheel(p: lock.LockedPackage, python: str | None) -> lock.Artifact | None:
    """The lock lists the wheels for the cell's platform: prefer a platform wheel for the cell's Python over
    a pure one (soundfile's ``any`` wheel lacks the libsndfile its manylinux wheel bundles)."""
    if not p.wheels:
        return None
    cp = "cp" + python.replace(".", "") if python else None

    def rank(w: lock.Artifact) -> tuple[int, int]:
        _, _, _, tags = parse_wheel_filename(w.filename)
        fits = any(isinstance(t, Tag) and (t.interpreter == cp or t.interpreter.startswith("py")) for t in tags)
        platform = any(t.platform != "any" for t in tags)
        return (int(fits), int(platform))

    return max(p.wheels, key=rank)


def fetch(lock_path: Path, dest: Path, *, exclude: dict[str, str] | None = None, python: str | None = None,
          progress: Callable[[str, int], None] | None = None, session: requests.Session | None = None) -> Fetched:  # fmt: skip
    """Download the lock's artifacts into ``dest`` (atomically per file), verifying every sha256."""
    lk = lock.read(lock_path)
    dest.mkdir(parents=True, exist_ok=True)
    s = session or requests.Session()
    files: list[Path] = []
    skipped: list[str] = []
    total = 0
    for name, p in sorted(lk.packages.items()):
        if exclude and exclude.get(name) == p.version:
            skipped.append(f"{name}=={p.version}")
            continue
        art = _pick_wheel(p, python) or p.sdist
        if art is None:
            raise StageFailure(Status.FAIL, Reason.NO_WHEEL_FOR_PLATFORM, f"{name} {p.version}: no artifact in the lock")
        target = dest / art.filename
        if target.exists() and _sha256(target) == art.sha256:
            files.append(target)
            total += target.stat().st_size
            continue
        tmp = target.with_name(target.name + ".part")
        try:
            with s.get(art.url, stream=True, timeout=120) as r:
                r.raise_for_status()
                h = hashlib.sha256()
                with tmp.open("wb") as f:
                    for chunk in r.iter_content(1 << 20):
                        f.write(chunk)
                        h.update(chunk)
        except requests.RequestException as e:
            tmp.unlink(missing_ok=True)
            raise StageFailure(Status.ERROR, Reason.NETWORK, f"download of {art.filename} failed: {e}") from None
        if art.sha256 and h.hexdigest() != art.sha256:
            tmp.unlink(missing_ok=True)
            raise StageFailure(Status.FAIL, Reason.BUILD_FAILED,
                               f"{art.filename}: sha256 {h.hexdigest()} does not match the lock's {art.sha256}")  # fmt: skip
        tmp.replace(target)
        files.append(target)
        total += target.stat().st_size
        if progress is not None:
            progress(art.filename, target.stat().st_size)
    return Fetched(files=files, skipped=skipped, bytes=total)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
