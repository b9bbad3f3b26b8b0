"""Secrets never reach a result, a log, a report or the terminal: one redaction function, every writer."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from envbuilder.cli import main
from envbuilder.redact import redact, redact_obj, restore_urls
from tests.conftest import Ran, write
from tests.localindex import LocalIndex, serve

SECRET = "s3cr3t-TOKEN-value"


def cli(*args: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize(("text", "kept"), [
    (f"http://__token__:{SECRET}@host/simple", "http://****@host/simple"),
    (f"--index-url https://user:{SECRET}@idx.example/simple/ --extra-index-url x", "https://****@idx.example/simple/"),
    (f"https://{SECRET}@host/simple", "https://****@host/simple"),
    (f"Authorization: Bearer {SECRET}", "Authorization: Bearer ****"),
    (f"HF_TOKEN={SECRET} python", "HF_TOKEN=**** python"),
    (f"UV_INDEX_PRIVATE_PASSWORD: {SECRET}", "UV_INDEX_PRIVATE_PASSWORD: ****"),
    ("hf_" + "a" * 34, "****"),
])  # fmt: skip
def test_redact(text: str, kept: str) -> None:
    out = redact(text)
    assert SECRET not in out and "a" * 34 not in out and kept in out
    assert redact(out) == out  # idempotent


@pytest.mark.parametrize("text", ["piecewise_cuda_graph_max_tokens: None -> 8192", "num_tokens=5", "max_new_tokens: 64",
                                  "https://host/simple", "tokenizer_path: /x", "user@example.org"])
def test_redact_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_obj_and_restore() -> None:
    url = f"http://__token__:{SECRET}@127.0.0.1:1/simple"
    obj = redact_obj({"details": {"index_args": ["--index-url", url], url: [url, 3]}})
    assert SECRET not in json.dumps(obj)
    assert restore_urls(obj["details"]["index_args"], [url, "https://other/simple"]) == ["--index-url", url]


def test_index_credentials_never_stored_or_printed(tmp_path: Path) -> None:
    """A passing resolve (details.command, index_args) and a failing one (the message names the URL): the results,
    stdout, stderr and every report format carry the redacted URL only."""
    idx = LocalIndex(tmp_path / "idx")
    idx.add("engine-pkg", "1.0")
    with serve(idx):
        authed = idx.url.replace("http://", f"http://__token__:{SECRET}@")
        dead = f"http://__token__:{SECRET}@127.0.0.1:9/simple"
        outputs: list[str] = []
        for name, url, as_of in (("ok", authed, "fresh"), ("dead", dead, "release")):
            m = write(tmp_path / name / "matrix.toml", f'[matrix]\nengine_pkg = ["1.0"]\ncuda = ["none"]\nos = ["ubuntu24.04"]\n'
                      f'python = ["3.11"]\n[model]\npath = "m"\n[server]\nengine = "llama-cpp"\n[resolve]\nindexes = ["{url}"]\nas_of = "{as_of}"\n')
            wd = tmp_path / name / "wd"
            runs = (("resolve", "-v"), ("resolve", "--json"), ("report", "--all")) if name == "ok" else (("resolve",), ("report", "--all"))
            for args in runs:
                r = cli("--matrix", str(m), "--workdir", str(wd), *args)
                outputs += [r.out, r.err]
            for fmt in ("table", "md", "html", "json", "junit"):
                r = cli("--matrix", str(m), "--workdir", str(wd), "report", "--format", fmt)
                outputs += [r.out, r.err]
            stored = [p.read_text(errors="replace") for p in wd.rglob("*") if p.is_file() and p.suffix != ".toml"]
            assert not [s for s in stored if SECRET in s]
            res = json.loads((next((wd / "results").glob("*.json"))).read_text())
            s = res["stages"][0]
            if name == "ok":
                assert s["status"] == "pass", s
                assert "http://****@127.0.0.1" in s["details"]["command"] and "http://****@" in " ".join(s["details"]["index_args"])
            else:
                assert s["status"] == "error" and "****@127.0.0.1:9" in s["message"], s
    assert not [o for o in outputs if SECRET in o]
    assert any("****@" in o for o in outputs)


def test_server_logs_are_written_redacted(tmp_path: Path) -> None:
    """The server log envbuilder writes (what a report may link) carries no token a launch printed."""
    from envbuilder import engines, monitor
    from tests.conftest import RUNS

    lines = [*monitor.read_log(RUNS / "0.5.11-h200/spec_standalone.log")]
    lines.insert(1, f"[2026-05-07 10:00:00] HF_TOKEN={SECRET} api_key via Authorization: Bearer {SECRET}")
    log = tmp_path / "smoke.log"
    with log.open("w") as f:
        monitor.watch(monitor.replay_events(lines, None), engines.SGLANG, ready_check=lambda: None, log=f)
    text = log.read_text()
    assert SECRET not in text and "HF_TOKEN=****" in text and "Bearer ****" in text
