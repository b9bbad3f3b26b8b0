"""A PEP 691 JSON simple-API client (PyPI, mirrors and private indexes alike), cached on disk with ETags.

PyPI's per-version JSON API is not used: it answers 404 on some mirrors; the simple API with
``Accept: application/vnd.pypi.simple.v1+json`` carries ``upload-time`` for every file.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from envbuilder import atomic

ACCEPT = "application/vnd.pypi.simple.v1+json"
_MEMO_LOCK = threading.Lock()


class IndexUnreachable(Exception):
    """The index did not answer (after retries)."""


class ProjectNotFound(Exception):
    """The index answered 404 for the project."""


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    filename: str
    url: str
    version: Version
    upload_time: datetime.datetime | None
    platform_tags: tuple[str, ...]  # e.g. ("manylinux_2_34_x86_64",); ("any",) for pure wheels; () for sdists
    yanked: bool


class SimpleIndex:
    """Reads ``<index>/<project>/`` as PEP 691 JSON, retrying with backoff, caching with ETag."""

    def __init__(self, url: str, cache_dir: Path | None = None, *, retries: int = 3, backoff_s: float = 1.0,
                 timeout_s: float = 30.0) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self.cache_dir = cache_dir
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.session = requests.Session()

    def project(self, name: str) -> dict[str, Any]:
        """The project page as JSON (``files``, ``versions``, ``meta``)."""
        norm = canonicalize_name(name)
        url = f"{self.url}/{norm}/"
        cache = self._cache_path(url)
        cached: dict[str, Any] | None = None
        headers = {"Accept": ACCEPT}
        if cache is not None and cache.exists():
            try:
                cached = json.loads(cache.read_text())
            except ValueError:
                cached = None
            if cached and cached.get("etag"):
                headers["If-None-Match"] = cached["etag"]
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = self.session.get(url, headers=headers, timeout=self.timeout_s)
            except requests.RequestException as e:
                last = e
                continue
            if r.status_code == 304 and cached is not None:
                body: dict[str, Any] = cached["body"]
                return body
            if r.status_code == 404:
                raise ProjectNotFound(f"{name} is not on {self.url}")
            if r.status_code >= 500 or r.status_code == 429:
                last = IndexUnreachable(f"{url} answered {r.status_code}")
                continue
            if r.status_code != 200:
                raise IndexUnreachable(f"{url} answered {r.status_code}")
            try:
                body = r.json()
            except ValueError:
                raise IndexUnreachable(f"{url} did not answer PEP 691 JSON") from None
            if cache is not None:
                atomic.write_json(cache, {"etag": r.headers.get("ETag", ""), "body": body})
            return body
        raise IndexUnreachable(f"{url}: {last}")

    def files(self, name: str) -> list[IndexFile]:
        out = []
        for f in self.project(name).get("files", []):
            parsed = _parse_filename(f["filename"])
            if parsed is None:
                continue
            version, tags = parsed
            ut = f.get("upload-time")
            out.append(IndexFile(
                filename=f["filename"], url=f.get("url", ""), version=version,
                upload_time=datetime.datetime.fromisoformat(ut.replace("Z", "+00:00")) if ut else None,
                platform_tags=tags, yanked=bool(f.get("yanked", False)),
            ))  # fmt: skip
        return out

    def release_time(self, name: str, version: str) -> datetime.datetime | None:
        """When ``name==version`` was uploaded: its latest file's ``upload-time`` (None if not given).

        A release's date is read once and kept in the cache: re-runs ask the index nothing.
        """
        memo = self.cache_dir / "release-times.json" if self.cache_dir else None
        key = f"{self.url} {canonicalize_name(name)} {version}"
        known: dict[str, str | None] = {}
        if memo is not None and memo.exists():
            with contextlib.suppress(ValueError):
                known = json.loads(memo.read_text())
        if key in known:
            v = known[key]
            return datetime.datetime.fromisoformat(v) if v else None
        want = Version(version)
        files = [f for f in self.files(name) if f.version == want]
        if not files:
            raise ProjectNotFound(f"{name} {version} is not on {self.url}")
        times = [f.upload_time for f in files if f.upload_time]
        when = max(times) if times else None
        if memo is not None:
            with _MEMO_LOCK:
                current: dict[str, str | None] = {}
                if memo.exists():
                    with contextlib.suppress(ValueError):
                        current = json.loads(memo.read_text())
                current[key] = when.isoformat() if when else None
                atomic.write_json(memo, current)
        return when

    def platforms(self, name: str, version: str) -> list[str]:
        """The platform tags of the wheels of ``name==version`` (sorted, unique)."""
        want = Version(version)
        return sorted({t for f in self.files(name) if f.version == want for t in f.platform_tags})

    def versions(self, name: str) -> list[tuple[Version, datetime.datetime | None]]:
        """Every non-yanked version with its upload time, oldest version first."""
        by: dict[Version, datetime.datetime | None] = {}
        for f in self.files(name):
            if f.yanked:
                continue
            prev = by.get(f.version)
            if f.upload_time and (prev is None or f.upload_time > prev):
                by[f.version] = f.upload_time
            else:
                by.setdefault(f.version, prev)
        return sorted(by.items())

    def _cache_path(self, url: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / (hashlib.sha256(url.encode()).hexdigest()[:24] + ".json")


def _parse_filename(filename: str) -> tuple[Version, tuple[str, ...]] | None:
    try:
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            return version, tuple(sorted({t.platform for t in tags}))
        _, version = parse_sdist_filename(filename)
        return version, ()
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
