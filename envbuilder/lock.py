"""Reading PEP 751 ``pylock.toml`` files: package versions, wheels with hashes, the CUDA a lock carries."""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envbuilder.errors import InputError


@dataclass(frozen=True, kw_only=True)
class Artifact:
    url: str
    filename: str
    sha256: str
    size: int | None


@dataclass(frozen=True, kw_only=True)
class LockedPackage:
    name: str
    version: str
    wheels: tuple[Artifact, ...]
    sdist: Artifact | None


@dataclass(frozen=True, kw_only=True)
class Lock:
    path: Path
    sha256: str
    packages: dict[str, LockedPackage]

    def versions(self) -> dict[str, str]:
        return {n: p.version for n, p in sorted(self.packages.items())}

    def version(self, name: str) -> str | None:
        p = self.packages.get(canonicalize_name(name))
        return p.version if p else None

    def cuda(self) -> str | None:
        """The CUDA runtime the lock installs, as ``major.minor`` (None for a CPU-only lock).

        Read from the NVIDIA runtime wheel it pulled (``nvidia-cuda-runtime-cu12 12.8.90`` -> 12.8,
        ``nvidia-cuda-runtime 13.0.96`` -> 13.0), else from torch's local version (``+cu128`` -> 12.8).
        """
        for name in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                     "nvidia-cuda-runtime-cu11"):  # fmt: skip
            v = self.version(name)
            if v:
                rel = Version(v).release
                return f"{rel[0]}.{rel[1] if len(rel) > 1 else 0}"
        torch = self.version("torch")
        if torch and (m := re.search(r"\+cu(\d{2,3})$", torch)):
            digits = m.group(1)
            return f"{digits[:-1]}.{digits[-1]}"
        return None

    def manylinux_floor(self) -> tuple[int, int] | None:
        """The highest glibc any locked wheel needs (from its manylinux tags)."""
        best: tuple[int, int] | None = None
        for p in self.packages.values():
            for w in p.wheels:
                need = wheel_glibc(w.filename)
                if need and (best is None or need > best):
                    best = need
        return best


def wheel_glibc(filename: str) -> tuple[int, int] | None:
    """The lowest glibc a wheel accepts (its most permissive manylinux tag), or None if not manylinux."""
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    floors = []
    for t in tags:
        if m := re.match(r"manylinux_(\d+)_(\d+)_", t.platform):
            floors.append((int(m.group(1)), int(m.group(2))))
        elif t.platform.startswith("manylinux2014"):
            floors.append((2, 17))
        elif t.platform.startswith("manylinux2010"):
            floors.append((2, 12))
        elif t.platform.startswith("manylinux1"):
            floors.append((2, 5))
    return min(floors) if floors else None


def _artifact(d: dict[str, object]) -> Artifact:
    url = str(d.get("url", ""))
    name = str(d.get("name", "")) or url.rsplit("/", 1)[-1]
    hashes = d.get("hashes", {})
    sha = str(hashes.get("sha256", "")) if isinstance(hashes, dict) else ""
    size = d.get("size")
    return Artifact(url=url, filename=name, sha256=sha, size=int(size) if isinstance(size, int) else None)


def read(path: Path) -> Lock:
    """Parse a pylock.toml; a malformed one is an input error naming it."""
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode())
        pkgs: dict[str, LockedPackage] = {}
        for p in data.get("packages", []):
            name = canonicalize_name(p["name"])
            pkgs[name] = LockedPackage(
                name=name, version=str(p.get("version", "")),
                wheels=tuple(_artifact(w) for w in p.get("wheels", [])),
                sdist=_artifact(p["sdist"]) if "sdist" in p else None,
            )  # fmt: skip
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise InputError(str(path), None, f"not a readable pylock.toml ({e})") from None
    return Lock(path=path, sha256=hashlib.sha256(raw).hexdigest(), packages=pkgs)


def diff(old: dict[str, str], new: dict[str, str]) -> list[dict[str, str | None]]:
    """Packages whose version differs between two ``name -> version`` maps (added/removed included)."""
    out: list[dict[str, str | None]] = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            out.append({"name": name, "old": old.get(name), "new": new.get(name)})
    return out


def requirements_with_hashes(lk: Lock, exclude: Collection[str] = ()) -> str:
    """The lock as pinned requirements with every artifact's sha256 (``uv pip sync --require-hashes``).

    Installing by name and hash fetches exactly the lock's artifacts and, unlike a pylock install, lets
    uv reuse wheels it built before (a source-only package is compiled once, not per venv).
    ``exclude``: normalised names left out (what the runner's interpreter provides).
    """
    lines = []
    for p in sorted(lk.packages.values(), key=lambda p: p.name):
        if p.name in exclude:  # provided by the runner's interpreter
            continue
        hashes = [w.sha256 for w in p.wheels if w.sha256] + ([p.sdist.sha256] if p.sdist and p.sdist.sha256 else [])
        lines.append(f"{p.name}=={p.version}" + "".join(f" --hash=sha256:{h}" for h in hashes))
    return "\n".join(lines) + "\n"
