"""A PEP 691 JSON simple-API client (PyPI, mirrors and private indexes alike), cached on disk with ETags.

PyPI's per-version JSON API is not used: it answers 404 on some mirrors; the simple API with
``Accept: application/vnd.pypi.simple.v1+json`` carries ``upload-time`` for every file.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
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
log = logging.getLogger(__name__)


class IndexUnreachable(Exception):
    """The index did not answer (after retries), or answered something that is not a package index."""


NOT_AN_INDEX = "the index answered something that is not a package index"
MAX_ANSWER_BYTES = 256 * 2**20


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
        self.timeout_s = timeout_s  # the whole request, answer included (not per read: a drip never ends)
        self.session = requests.Session()

    def _get(self, url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        """One request whose every part — connect, headers, body — ends within ``timeout_s`` in all."""
        deadline = time.monotonic() + self.timeout_s
        with self.session.request(method, url, headers=headers, stream=True, timeout=(self.timeout_s, self.timeout_s)) as r:
            body = bytearray()
            if method == "GET" and r.status_code in (200, 404):
                while chunk := r.raw.read1(64 * 1024, decode_content=True):  # whatever arrived: no waiting to fill
                    body += chunk
                    if time.monotonic() > deadline:
                        raise requests.Timeout(f"no complete answer within {self.timeout_s:.0f} s")
                    if len(body) > MAX_ANSWER_BYTES:
                        raise IndexUnreachable(f"{url}: {NOT_AN_INDEX} (over {MAX_ANSWER_BYTES >> 20} MiB)")
            if time.monotonic() > deadline:
                raise requests.Timeout(f"no complete answer within {self.timeout_s:.0f} s")
            return r.status_code, dict(r.headers), bytes(body)

    def is_index(self) -> bool:
        """Whether the index's root answers at all (a project's 404 from a dead or wrong URL is not a verdict)."""
        try:
            code, _, _ = self._get(f"{self.url}/", {"Accept": ACCEPT}, method="HEAD")
        except (requests.RequestException, IndexUnreachable):
            return False
        return code not in (404, 410)

    def project(self, name: str) -> dict[str, Any]:
        """The project page as JSON (``files``, ``versions``, ``meta``)."""
        norm = canonicalize_name(name)
        url = f"{self.url}/{norm}/"
        cache = self._cache_path(url)
        cached: dict[str, Any] | None = None
        headers = {"Accept": ACCEPT}
        if cache is not None and cache.exists():
            cached = _read_cache(cache, lambda d: isinstance(d.get("etag"), str) and _is_project_page(d.get("body")))
            if cached and cached.get("etag"):
                headers["If-None-Match"] = cached["etag"]
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                code, got_headers, raw = self._get(url, headers)
            except requests.RequestException as e:
                last = e
                continue
            if code == 304 and cached is not None:
                body: dict[str, Any] = cached["body"]
                return body
            if code == 404:
                if not self.is_index():
                    raise IndexUnreachable(f"{self.url}: {NOT_AN_INDEX} (404 for the whole index)")
                raise ProjectNotFound(f"{name} is not on {self.url}")
            if code >= 500 or code == 429:
                last = IndexUnreachable(f"{url} answered {code}")
                continue
            if code != 200:
                raise IndexUnreachable(f"{url} answered {code}")
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                body = {}
            if not _is_project_page(body):
                kind = got_headers.get("Content-Type", "?").split(";")[0]
                raise IndexUnreachable(f"{url}: {NOT_AN_INDEX} ({kind}, not a PEP 691 project page)")
            if cache is not None:
                atomic.write_json(cache, {"etag": got_headers.get("ETag", ""), "body": body})
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
                upload_time=_time(ut),
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
            known = _read_cache(memo, _is_release_times) or {}
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
                current: dict[str, str | None] = (_read_cache(memo, _is_release_times) or {}) if memo.exists() else {}
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


def _is_project_page(body: object) -> bool:
    """A PEP 691 project page: an object whose ``files`` is a list of objects with a ``filename``."""
    if not isinstance(body, dict) or not isinstance(body.get("files"), list):
        return False
    return all(isinstance(f, dict) and isinstance(f.get("filename"), str) for f in body["files"])


def _time(text: object) -> datetime.datetime | None:
    """An index's ``upload-time``; anything else is treated as not given."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def _is_release_times(d: dict[str, Any]) -> bool:
    return all(v is None or _time(v) is not None for v in d.values())


def _read_cache(path: Path, valid: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """A cache file envbuilder wrote, or None: unreadable or of the wrong shape, it is named, removed and rebuilt."""
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and valid(data):
            return data
        problem = "not the expected shape"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        problem = f"unreadable ({type(e).__name__})"
    log.warning("cache file %s is %s; removed, it will be rebuilt", path, problem)
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def _parse_filename(filename: str) -> tuple[Version, tuple[str, ...]] | None:
    try:
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            return version, tuple(sorted({t.platform for t in tags}))
        _, version = parse_sdist_filename(filename)
        return version, ()
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
