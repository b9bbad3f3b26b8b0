"""Replays a recorded SGLang start-up as a real process: the log line by line (its original spacing
compressed), then the answers recorded from that server's endpoints, then the exit it had.

    python tests/replay_sglang.py --log LOG [--answers JSON] [--port N] [--compress 20] [--exit CODE]

Built only from real output recorded on an H200 (tests/fixtures/sglang-runs/); it is the fake of what
cannot run here (a GPU), used to test the monitor and the SGLang code paths of the checks.
Negative ``--exit`` codes kill the process with that signal (the OOM run ended by SIGKILL).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")


def serve(port: int, answers: dict[str, Any]) -> None:
    chats = answers.get("chats", [])

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            return None

        def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            rec = answers.get(self.path) or answers.get({"/server_info": "server_info_after"}.get(self.path, ""))
            if self.path == "/metrics" and "metrics" in answers:
                rec = answers["metrics"]
            if isinstance(rec, list) and len(rec) == 2:
                self._send(int(rec[0]), rec[1], "text/plain" if self.path == "/metrics" else "application/json")
            else:
                self._send(404, "{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/v1/chat/completions":
                prompt = body.get("messages", [{}])[-1].get("content", "")
                rec = next((c for c in chats if c["prompt"] == prompt), chats[0] if chats else None)
                if rec is None:
                    self._send(404, "{}")
                    return
                self._send(int(rec["status"]), rec["body"])
            elif self.path == "/generate" and "generate" in answers:
                self._send(int(answers["generate"][0]), answers["generate"][1])
            else:
                self._send(404, "{}")

    server = ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", type=Path)
    ap.add_argument("--answers", type=Path)
    ap.add_argument("--recordings", type=Path, help="a folder: spec_standalone.* when launched with "
                    "--speculative-algorithm, else plain.* (what the H200 answered with and without speculation)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--compress", type=float, default=20.0, help="divide the recorded gaps by this")
    ap.add_argument("--max-gap", type=float, default=0.5)
    ap.add_argument("--exit", type=int, default=None, help="exit code at the end (negative: that signal)")
    a, engine_args = ap.parse_known_args()  # the engine's own flags: recorded, not interpreted
    if a.recordings is not None:
        spec = any(x.startswith("--speculative-algo") for x in engine_args)  # argparse accepts the prefix
        name = "spec_standalone" if spec else "plain"
        a.log, a.answers = a.recordings / f"{name}.log", a.recordings / f"{name}.json"
    if a.log is None:
        ap.error("--log or --recordings is required")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    answers = json.loads(a.answers.read_text()) if a.answers else {}
    prev: datetime.datetime | None = None
    for line in a.log.read_text(errors="replace").splitlines():
        if line.startswith("CMD "):
            continue
        if m := _TS.match(line):
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            if prev is not None:
                time.sleep(min(a.max_gap, max(0.0, (t - prev).total_seconds() / a.compress)))
            prev = t
        if "Uvicorn running on" in line and a.port:
            serve(a.port, answers)
        print(line, flush=True)
    if a.exit is not None:
        if a.exit < 0:
            os.kill(os.getpid(), -a.exit)
            time.sleep(5)
        return int(a.exit)
    while True:  # a ready server keeps running until it is stopped
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())
