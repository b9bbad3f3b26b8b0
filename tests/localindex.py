"""Test helpers: small real wheels made on the fly, and a real local package index serving them.

The index answers PEP 503 HTML and PEP 691 JSON (with ``upload-time``) over HTTP on 127.0.0.1,
so uv and envbuilder's index client talk to it exactly as they talk to PyPI.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import html
import json
import random
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name


def make_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    requires: Sequence[str] = (),
    tag: str = "py3-none-any",
    files: dict[str, str] | None = None,
) -> Path:
    """Write a real, installable wheel. ``files`` maps archive paths to text (default: an importable module)."""
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    contents = dict(files) if files is not None else {f"{dist}/__init__.py": f"__version__ = {version!r}\n"}
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    contents[f"{info}/METADATA"] = "\n".join(meta) + "\n"
    contents[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: envbuilder-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / filename
    with zipfile.ZipFile(out, "w") as z:
        for path, text in contents.items():
            z.writestr(path, text)
    return out


@dataclass
class LocalIndex:
    """A folder of wheels served as a simple index at ``url``; upload times are set per file."""

    root: Path
    url: str = ""
    upload_times: dict[str, datetime.datetime] = field(default_factory=dict)
    delay_s: float = 0.0  # every answer waits this long (a slow index: something to interrupt)

    def add(self, name: str, version: str, *, uploaded: str = "2026-01-01T00:00:00Z", **kw: object) -> Path:
        w = make_wheel(self.root, name, version, **kw)  # type: ignore[arg-type]
        self.upload_times[w.name] = datetime.datetime.fromisoformat(uploaded.replace("Z", "+00:00"))
        return w

    def project_files(self, project: str) -> list[Path]:
        return sorted(p for p in self.root.glob("*.whl")
                      if canonicalize_name(p.name.split("-")[0]) == canonicalize_name(project))


OLD, NEW = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"


def breaking_index(root: Path) -> LocalIndex:
    """app 1.0 (released with lib 1.0, util 1.0, noise 1.0); later lib 1.1 (fine), lib 2.0 (drops ``helper``,
    which app imports), util 1.5 and noise 2.0 (both fine)."""
    idx = LocalIndex(root)
    app = "from lib import helper\nimport util, noise\n__version__ = '1.0'\n"
    idx.add("app", "1.0", requires=["lib>=1", "util", "noise"], files={"app/__init__.py": app}, uploaded=OLD)
    idx.add("lib", "1.0", files={"lib/__init__.py": "def helper(): return 1\n"}, uploaded=OLD)
    idx.add("lib", "1.1", files={"lib/__init__.py": "def helper(): return 2\n"}, uploaded=NEW)
    idx.add("lib", "2.0", files={"lib/__init__.py": "def renamed(): return 3\n"}, uploaded=NEW)
    for name, old, new in (("util", "1.0", "1.5"), ("noise", "1.0", "2.0")):
        idx.add(name, old, uploaded=OLD)
        idx.add(name, new, uploaded=NEW)
    return idx


def _handler(index: LocalIndex) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_HEAD(self) -> None:
            self._head_only = True
            self.do_GET()

        def do_GET(self) -> None:
            if index.delay_s:
                time.sleep(index.delay_s)
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if len(parts) == 2 and parts[0] == "files":
                f = index.root / parts[1]
                if f.exists():
                    self._send(200, f.read_bytes(), "application/octet-stream")
                    return
                self._send(404, b"", "text/plain")
                return
            if parts == ["simple"]:  # the index's root: its projects (PEP 691 JSON or PEP 503 HTML)
                names = sorted({canonicalize_name(p.name.split("-")[0]) for p in index.root.glob("*.whl")})
                if "application/vnd.pypi.simple.v1+json" in (self.headers.get("Accept") or ""):
                    root = {"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}
                    self._send(200, json.dumps(root).encode(), "application/vnd.pypi.simple.v1+json")
                else:
                    links = "".join(f'<a href="{n}/">{n}</a>\n' for n in names)
                    self._send(200, f"<html><body>{links}</body></html>".encode(), "text/html")
                return
            if len(parts) == 2 and parts[0] == "simple":
                files = index.project_files(parts[1])
                if not files:
                    self._send(404, b"not found", "text/plain")
                    return
                base = f"http://{self.headers['Host']}/files"
                if "application/vnd.pypi.simple.v1+json" in (self.headers.get("Accept") or ""):
                    body = {"meta": {"api-version": "1.1"}, "name": parts[1], "files": [
                        {"filename": f.name, "url": f"{base}/{f.name}",
                         "hashes": {"sha256": hashlib.sha256(f.read_bytes()).hexdigest()},
                         "upload-time": index.upload_times[f.name].strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
                        for f in files]}
                    self._send(200, json.dumps(body).encode(), "application/vnd.pypi.simple.v1+json")
                    return
                links = "".join(
                    f'<a href="{base}/{html.escape(f.name)}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
                    f"{html.escape(f.name)}</a>\n" for f in files)
                self._send(200, f"<html><body>{links}</body></html>".encode(), "text/html")
                return
            self._send(404, b"", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not getattr(self, "_head_only", False):
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client killed mid-answer
                    self.wfile.write(body)

    return H


@contextmanager
def serve(index: LocalIndex) -> Iterator[LocalIndex]:
    """Serve ``index`` on 127.0.0.1 (a free port) for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    index.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)


FAULTS = ("html", "empty-json", "404", "random", "drip")


def _fault_handler(fault: str, drip_s: float) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, *, head: bool) -> None:
            body, code, ctype = {
                "html": (b"<html><head><title>Sign in to the network</title></head><body><form>Accept the terms"
                         b"</form></body></html>", 200, "text/html"),
                "empty-json": (b"{}", 200, "application/vnd.pypi.simple.v1+json"),
                "404": (b"<html>Not Found</html>", 404, "text/html"),
                "random": (random.Random(self.path).randbytes(2048), 200, "application/vnd.pypi.simple.v1+json"),
                "drip": (b'{"meta": {"api-version": "1.1"}, "files": []}' * 50, 200,
                         "application/vnd.pypi.simple.v1+json"),
            }[fault]
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if head:
                return
            try:
                if fault == "drip":  # one byte at a time: every read succeeds, the answer never completes
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(drip_s)
                else:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return

    return H


@contextmanager
def serve_fault(fault: str, *, drip_s: float = 0.2) -> Iterator[str]:
    """A broken "index" on 127.0.0.1 answering every request the same wrong way (``FAULTS``); yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _fault_handler(fault, drip_s))
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)
