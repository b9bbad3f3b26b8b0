"""import: a CPU-only smoke of the cell's environment (image or venv) — imports, versions, the CUDA build
torch carries, and the engine's own argument parser against every flag the cell will be launched with.

argparse accepts unique prefixes (``--speculative-algo`` is ``--speculative-algorithm``); a flag that is
ambiguous or unknown in that engine version is ``fail``/``bad-flag``. An import that fails only because
there is no GPU driver here (``libcuda.so.1``, "no NVIDIA driver") is ``skip``, anything else
``fail``/``import-error`` with the exception's last line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuilder import engines, indexconfig, launchcheck, model
from envbuilder.artifacts import BuiltEnvironment
from envbuilder.backends import for_environment
from envbuilder.errors import StageFailure
from envbuilder.matrix import Cell
from envbuilder.pipeline import RunContext
from envbuilder.probe import NEEDS_GPU, read_marked
from envbuilder.results import CellResult, Reason, StageResult, Status

PROBE = r"""
import importlib, json, sys, traceback
out = {"python": sys.version.split()[0], "modules": {}}
for name in sys.argv[1:]:
    try:
        m = importlib.import_module(name)
        out["modules"][name] = {"ok": True, "version": getattr(m, "__version__", None)}
    except BaseException as e:
        out["modules"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:3000],
                                "traceback": traceback.format_exc()[-4000:]}
try:
    import torch
    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda}
except BaseException:
    pass
print("ENVBUILDER-JSON " + json.dumps(out))
"""


def modules_for(engine: str, locked: dict[str, str], axes: list[str] | None = None) -> list[str]:
    """The cell's key modules: the engine, torch, the engine's kernel package, flash-attn-4's cute.

    A lock without the engine (a plain package matrix) imports its package axes instead.
    """
    spec = engines.engine(engine)
    if spec.package in locked:
        mods = [spec.module.split(".")[0]]
    else:
        mods = [a.replace("-", "_") for a in (axes or []) if a in locked]
    if "torch" in locked:
        mods.append("torch")
    if "sgl-kernel" in locked or "sglang-kernel" in locked:
        mods.append("sgl_kernel")
    if "flash-attn-4" in locked:
        mods.append("flash_attn.cute")
    return mods


def help_options(help_text: str) -> set[str]:
    """Every long option an argparse ``--help`` lists."""
    return set(re.findall(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)", help_text))


def check_flags(args: Sequence[str], options: set[str]) -> tuple[list[str], list[str]]:
    """(problems, notes) for the flags in ``args`` under argparse's prefix rules."""
    problems: list[str] = []
    notes: list[str] = []
    for a in args:
        if not a.startswith("--"):
            continue
        flag = a.split("=", 1)[0]
        if flag in options:
            continue
        prefixed = sorted(o for o in options if o.startswith(flag))
        if len(prefixed) == 1:
            notes.append(f"{flag} is accepted as an abbreviation of {prefixed[0]}")
        elif prefixed:
            problems.append(f"{flag} is ambiguous: it could be {', '.join(prefixed[:5])}")
        else:
            close = difflib.get_close_matches(flag, sorted(options), n=3, cutoff=0.6)
            problems.append(f"{flag} does not exist" + (f" (close: {', '.join(close)})" if close else ""))
    return problems, notes


def explain_flags(ctx: RunContext, package: str, version: str, problems: list[str]) -> tuple[list[str], list[str]]:
    """``problems`` with each gone flag's replacement, read from the release's wheel and the cached earlier
    releases' (``envbuilder watch`` and ``engine-facts`` fill that cache); unchanged when they are not at hand."""
    from envbuilder.engines import facts

    index_url = indexconfig.read_url(ctx.matrix.resolve.indexes)
    if index_url is None:
        return problems, []
    try:
        known = facts.facts_for(package, version, ctx.workspace.cache, index_url)
    except facts.EngineFactsError:
        return problems, []
    if not problems:
        return problems, []
    check = facts.check_flags(known, ctx.matrix.server.args, facts.cached_history(ctx.workspace.cache, package, version))
    by_flag = {p.flag: p for p in check.problems}
    out = [by_flag[f].message if (f := p.split(" ", 1)[0]) in by_flag else p for p in problems]
    fixes = [f"replace {p.flag} with {p.replacement}" for p in check.problems if p.replacement]
    return out, fixes


def run_in_env(env: BuiltEnvironment, argv: list[str], timeout_s: float, *, mounts: Sequence[Path] = (),
               extra_env: Mapping[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
    """Run ``python <argv...>`` in the cell's environment (venv or image, no GPU). ``mounts``: host folders the
    command reads, visible read-only at the same path inside a container; ``extra_env``: more variables."""
    return for_environment(env).run_python(argv, timeout_s, mounts=mounts, extra_env=extra_env)


def summary_line(error: str) -> str:
    """``Type: first non-empty line`` of an exception's text (sgl_kernel's start with an empty line)."""
    kind, _, rest = error.partition(": ")
    first = next((ln.strip() for ln in rest.splitlines() if ln.strip()), "")
    return f"{kind}: {first}"[:500] if first else kind[:500]


def classify_import(name: str, info: dict[str, Any]) -> tuple[Status, Reason, str]:
    """A failed import: ``skip``/``no-gpu`` when only a GPU driver is missing here, else ``fail``/``import-error``."""
    err = str(info.get("error", ""))
    tb = str(info.get("traceback", ""))
    if NEEDS_GPU.search(err) or NEEDS_GPU.search(tb.splitlines()[-1] if tb else ""):
        return Status.SKIP, Reason.NO_GPU, f"import {name} needs a GPU driver here: {summary_line(err)}"
    return Status.FAIL, Reason.IMPORT_ERROR, f"import {name} failed: {summary_line(err)}"


class ImportStage:
    """``import``: no GPU needed."""

    name = "import"
    requires: tuple[str, ...] = ("resolve", "build")
    max_workers = 1

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        b = prior.stage("build")
        env = prior.environment()
        from dataclasses import asdict

        return {"build": b.inputs if b else None, "image": env.image_id if env else None,
                "args": list(ctx.matrix.server.args), "engine": ctx.matrix.server.engine, "env": ctx.matrix.server.env,
                "model": asdict(ctx.matrix.model)}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        return True

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        build = prior.stage("build")
        if build is None or build.not_applicable:
            raise StageFailure(Status.SKIP, Reason.NOT_APPLICABLE, "no built environment (custom command or no build)")
        built = prior.environment()
        if build.status is not Status.PASS or built is None:
            raise StageFailure(Status.SKIP, Reason.PREREQUISITE_FAILED, f"not run: build ended {build.status} ({build.reason})")
        resolved = prior.lock()
        locked = dict(resolved.packages) if resolved else {}
        engine = ctx.matrix.server.engine
        spec = engines.engine(engine)
        mods = modules_for(engine, locked, list(cell.requirements()))
        code, out = run_in_env(built, ["-c", PROBE, *mods], timeout_s=600)
        probe = read_marked(out)
        if probe is None:
            raise StageFailure(Status.FAIL, Reason.IMPORT_ERROR,
                               f"the import probe did not run (exit {code}): {out.strip().splitlines()[-1:] or ''}")  # fmt: skip
        details: dict[str, Any] = {"probe": probe, "modules": mods}
        failed = [(n, i) for n, i in probe["modules"].items() if not i["ok"]]
        verdicts = [classify_import(n, i) for n, i in failed]
        hard = [v for v in verdicts if v[0] is Status.FAIL]
        if hard:
            return StageResult(name=self.name, status=Status.FAIL, reason=hard[0][1], message=hard[0][2], details=details)
        engine_mod = spec.module.split(".")[0]
        if any(n == engine_mod for n, _ in failed):  # the parser check needs the engine imported: skipped too
            return StageResult(name=self.name, status=Status.SKIP, reason=Reason.NO_GPU, message=verdicts[0][2],
                               details=details)  # fmt: skip
        gpu_only = [n for n, _ in failed]  # e.g. sgl_kernel loads libcuda.so.1 at import; the engine itself imported
        details["needs_gpu"] = gpu_only
        if spec.package not in locked:
            return StageResult(name=self.name, status=Status.PASS,
                               message=f"imports {', '.join(mods)}; no {spec.package} in the lock: no flag check",
                               details=details)  # fmt: skip
        hcode, help_text = run_in_env(built, ["-m", spec.module, "--help"], timeout_s=600)
        details["help_exit"] = hcode
        if hcode != 0:
            last = [ln for ln in help_text.splitlines() if ln.strip()][-1:] or ["no output"]
            status, reason, _ = classify_import(spec.module, {"error": last[0], "traceback": help_text[-3000:]})
            return StageResult(name=self.name, status=status, reason=reason,
                               message=f"{spec.module} --help failed: {last[0]}", details=details)  # fmt: skip
        options = help_options(help_text)
        problems, notes = check_flags(ctx.matrix.server.args, options)
        details.update({"options": len(options), "flag_notes": notes, "flag_problems": problems})
        version = probe["modules"].get(mods[0], {}).get("version")
        if spec.wheel_facts and version:  # the release's wheel: a gone flag's replacement; the smoke's log formats
            problems, fixes = explain_flags(ctx, spec.package, str(version), problems)
            details["fixes"] = fixes
        if problems:
            return StageResult(name=self.name, status=Status.FAIL, reason=Reason.BAD_FLAG,
                               message=f"{spec.package} {version}: " + "; ".join(problems), details=details)  # fmt: skip
        launch_note = ""
        if spec.launch_check:
            config = model.find_config(ctx.matrix.model, ctx.matrix.path.parent, where=str(ctx.matrix.path))
            if config is not None:  # SGLang's own argument checks against the model's config: seconds, no weights
                args = launchcheck.launch_args(ctx.matrix)

                def execute(argv: Sequence[str], model_dir: Path) -> tuple[int, str, str]:
                    code, out = run_in_env(built, list(argv), timeout_s=300, mounts=[model_dir],
                                           extra_env=ctx.matrix.server.env)  # fmt: skip
                    return code, out, out

                verdict, _ = launchcheck.run([], config, args, execute=execute)
                details["launch_check"] = verdict.to_json()
                if verdict.status in (Status.FAIL, Status.ERROR):
                    return StageResult(name=self.name, status=verdict.status, reason=verdict.reason,
                                       message=f"launch-check: {verdict.message}", details=details)  # fmt: skip
                launch_note = f"; launch-check {verdict.status.value}: {verdict.message}"
        torch = probe.get("torch", {})
        extra = f", torch {torch.get('version')} (CUDA {torch.get('cuda')})" if torch else ""
        skipped = f" ({', '.join(gpu_only)}: needs a GPU, not imported here)" if gpu_only else ""
        imported = [x for x in mods if x not in gpu_only]
        return StageResult(name=self.name, status=Status.PASS,
                           message=f"imports {', '.join(imported)}{skipped}: {spec.package} {version}{extra}; "
                                   f"{len(ctx.matrix.server.args)} launch args parse{launch_note}", details=details)  # fmt: skip
