"""launch-check: SGLang's own argument checks, run against the model's config.json without a GPU or weights.

In the cell's environment, the launch arguments are parsed and ``ServerArgs`` is built the way
``sglang.launch_server`` does (``prepare_server_args``), against a folder holding only the model's
``config.json`` (and tokenizer files when present). What the engine refuses is ``fail``/``bad-config``
with its message and, where the message names one, the fix; what it silently changed (radix cache,
attention backend, max running requests, …) are notes. Code that needs a GPU to decide is ``skip``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.matrix import Matrix
from envbuilder.probe import NEEDS_GPU, read_marked
from envbuilder.results import Reason, Status

MARK = "ENVBUILDER-LAUNCH "
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model")  # fmt: skip

PROBE = r"""
import contextlib, dataclasses, io, json, logging, sys, traceback
buf = io.StringIO()
err = io.StringIO()
logging.basicConfig(level=logging.INFO, stream=buf, force=True)
argv = json.loads(sys.argv[1])
out = {}
try:
    import argparse
    from sglang.srt.server_args import ServerArgs, prepare_server_args
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    with contextlib.redirect_stderr(err):
        requested = vars(parser.parse_args(argv))
    sa = prepare_server_args(argv)
    out = {"ok": True, "changed": {}}  # SGLang accepted the launch; what follows only reads what it changed
    try:  # a dataclass up to 0.5.19, a msgspec.Struct from 0.5.20 (its fields in __struct_fields__)
        names = ([f.name for f in dataclasses.fields(sa)] if dataclasses.is_dataclass(sa)
                 else list(getattr(type(sa), "__struct_fields__", ())))
        final = {n: getattr(sa, n) for n in names if hasattr(sa, n)}
        def plain(v):
            return v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
        out["changed"] = {k: [plain(requested[k]), plain(v)] for k, v in final.items()
                          if k in requested and plain(requested[k]) != plain(v)}
    except Exception as e:
        out["read_error"] = f"{type(e).__name__}: {e}"[:300]
except BaseException as e:
    said = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
    msg = said[-1].split("error: ", 1)[-1] if isinstance(e, SystemExit) and said else f"{type(e).__name__}: {e}"
    out = {"ok": False, "error": msg, "traceback": traceback.format_exc()[-4000:]}
out["log"] = buf.getvalue()[-6000:]
print("ENVBUILDER-LAUNCH " + json.dumps(out))
"""

# changes that are bookkeeping, not decisions worth a note
_IGNORED = {"model_path", "tokenizer_path", "served_model_name", "random_seed", "host", "port", "base_gpu_id",
            "nccl_port", "dist_init_addr", "file_storage_path", "log_level", "enable_metrics"}  # fmt: skip
_NOTEWORTHY = ("radix", "attention_backend", "max_running_requests", "chunked_prefill", "cuda_graph", "mamba",
               "speculative", "page_size", "mem_fraction", "context_length", "schedule", "overlap", "sampling")  # fmt: skip
# fixes the engine's messages point at, as data: message pattern -> what to add to the launch
FIX_HINTS = (
    (re.compile(r"not compatible with radix cache", re.I),
     ["--disable-radix-cache", "--mamba-scheduler-strategy extra_buffer with SGLANG_ENABLE_SPEC_V2=1"]),
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LaunchCheck:
    status: Status
    reason: Reason
    message: str
    notes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    changed: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": self.reason.value, "message": self.message,
                "notes": self.notes, "fixes": self.fixes, "changed": self.changed}  # fmt: skip


def config_dir(config: Path, dest: Path) -> Path:
    """A model folder with only the config (and tokenizer) files: no weights are needed."""
    dest.mkdir(parents=True, exist_ok=True)
    src = config.parent
    for name in CONFIG_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    if config.name != "config.json":
        shutil.copy2(config, dest / "config.json")
    return dest


def suggest(message: str) -> list[str]:
    """Fixes named by the engine's message (flags and environment variables), plus known alternatives."""
    out: list[str] = []
    for pattern, fixes in FIX_HINTS:
        if pattern.search(message):
            out += fixes
    if out:  # a known message: its fixes are the data's, not every flag the message mentions
        return out
    for flag in re.findall(r"(--[a-z0-9][a-z0-9-]+(?: [a-z_0-9]+)?)", message):
        if not any(flag in f for f in out):
            out.append(flag)
    for env in re.findall(r"\b([A-Z][A-Z0-9_]{3,}=\S+?)(?=[\s.,;]|$)", message):
        if not any(env in f for f in out):
            out.append(env)
    return out


def interpret(probe: dict[str, Any]) -> LaunchCheck:
    """The verdict from the probe's JSON."""
    if not probe.get("ok"):
        err = str(probe.get("error", ""))
        tb = str(probe.get("traceback", ""))
        if NEEDS_GPU.search(err) or NEEDS_GPU.search(tb[-600:]):
            return LaunchCheck(status=Status.SKIP, reason=Reason.NO_GPU,
                               message=f"SGLang's argument code needs a GPU to decide: {err[:300]}")  # fmt: skip
        if err.startswith(("argument --", "unrecognized arguments", "ambiguous option")):  # argparse's own refusal
            return LaunchCheck(status=Status.FAIL, reason=Reason.BAD_FLAG, message=err[:600])
        fixes = suggest(err)
        msg = err[:600] + (f" — fix: {' or '.join(fixes)}" if fixes else "")
        return LaunchCheck(status=Status.FAIL, reason=Reason.BAD_CONFIG, message=msg, fixes=fixes)
    changed = {k: v for k, v in probe.get("changed", {}).items() if k not in _IGNORED}
    notes = [f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in sorted(changed.items()) if any(w in k for w in _NOTEWORTHY)]
    log = str(probe.get("log", ""))
    notes += [ln.split("] ", 1)[-1] for ln in log.splitlines() if re.search(r"[Dd]isabl|[Ff]all(ing)? back|is set to", ln)][:10]
    return LaunchCheck(status=Status.PASS, reason=Reason.OK,
                       message="SGLang accepts the launch" + (f" ({len(notes)} adjustment(s))" if notes else ""),
                       notes=notes, changed=changed)  # fmt: skip


def launch_args(m: Matrix) -> list[str]:
    """The flags SGLang's checks see: the context length (when set) and the user's ``[server] args``."""
    args = list(m.server.args)
    return ["--context-length", str(m.model.context_length), *args] if m.model.context_length else args


Execute = Callable[[Sequence[str], Path], tuple[int, str, str]]


def run(python_cmd: Sequence[str], model_config: Path, args: Sequence[str], *, timeout_s: float = 300,
        env: dict[str, str] | None = None, execute: Execute | None = None) -> tuple[LaunchCheck, dict[str, Any]]:  # fmt: skip
    """Build SGLang's ServerArgs for ``args`` against ``model_config`` with ``python_cmd``, or with ``execute``
    (python's arguments and the model folder it must see -> exit code, stdout, stderr: e.g. in a container)."""
    with tempfile.TemporaryDirectory(prefix="eb-launch-check-") as tmp:
        model_dir = config_dir(model_config, Path(tmp) / "model")
        argv = ["--model-path", str(model_dir), *args]
        probe_args = ["-c", PROBE, json.dumps(argv)]
        if execute is not None:
            code, stdout, stderr = execute(probe_args, model_dir)
            if code == 124 and MARK not in stdout:
                return LaunchCheck(status=Status.ERROR, reason=Reason.INTERNAL_ERROR,
                                   message=f"the launch check did not finish in {timeout_s:.0f} s"), {}  # fmt: skip
        else:
            try:
                p = subprocess.run([*python_cmd, *probe_args], capture_output=True, text=True,
                                   timeout=timeout_s, check=False, env=env)  # fmt: skip
            except subprocess.TimeoutExpired:
                return LaunchCheck(status=Status.ERROR, reason=Reason.INTERNAL_ERROR,
                                   message=f"the launch check did not finish in {timeout_s:.0f} s"), {}  # fmt: skip
            stdout, stderr = p.stdout, p.stderr
        probe = read_marked(stdout, MARK)
        if probe is None:
            tail = (stderr.strip().splitlines() or ["no output"])[-1]
            return LaunchCheck(status=Status.FAIL, reason=Reason.IMPORT_ERROR,
                               message=f"the launch check could not run: {tail}"), {"stderr": stderr[-3000:]}  # fmt: skip
        return interpret(probe), probe
