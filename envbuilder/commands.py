"""Registers the stage commands with the CLI (kept apart so cli.py stays the plumbing)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from envbuilder import atomic, doctor, errors
from envbuilder.build import BuildStage
from envbuilder.cli import Ui, _add_cells, add_run_options, register, run_stages, stage_options
from envbuilder.importcheck import ImportStage
from envbuilder.pipeline import Stage, Workspace
from envbuilder.precheck import PrecheckStage
from envbuilder.resolve import ResolveStage
from envbuilder.smoke import SmokeStage, parse_checks


def _configure_resolve(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    p.add_argument("--drift", action="store_true", help="also resolve against today and list what differs")
    p.add_argument("--jobs", type=int, default=0, help="cells resolved at once (default: cores x 2)")
    p.add_argument("--force", action="store_true", help="re-resolve even when the inputs are unchanged")


def cmd_resolve(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(drift=args.drift, jobs=args.jobs)])


register("resolve", "lock every selected cell with uv (pylock.toml)", _configure_resolve, cmd_resolve)


def _configure_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save", type=Path, help="also write the facts to this file (default: <workdir>/doctor.json)")


def cmd_doctor(args: argparse.Namespace, ui: Ui) -> int:
    facts = doctor.collect()
    atomic.write_json(args.save or args.workdir / "doctor.json", facts)
    if ui.json:
        ui.print_json(facts)
        return errors.EXIT_OK
    t = Table(title="runner facts", show_header=False)
    drv = facts["driver"]
    gpus = facts["gpus"]
    rows = [
        ("GPUs", "; ".join(f"{g['index']}: {g['name']}, {g['memory_mib']} MiB, sm {g['compute_capability']}"
                           for g in gpus) or "none"),
        ("kernel module", f"{drv.get('kernel_module', 'unknown')} ({drv.get('kernel_module_flavor', '-')})"),
        ("userspace", ", ".join(drv.get("userspace_versions", [])) or "unknown"),
        ("CUDA (driver)", drv.get("cuda_supported", "unknown")),
        ("glibc", facts.get("glibc") or "unknown"),
        ("OS", facts.get("os", {}).get("pretty_name", "unknown")),
        ("Docker", "yes" + (" (nvidia runtime)" if facts["docker"].get("nvidia_runtime") else "")
         if facts["docker"].get("available") else "no"),
    ]  # fmt: skip
    for k, v in rows:
        t.add_row(k, escape(str(v)))
    for k, why in facts["unknown"].items():
        t.add_row(f"[dim]{k}[/]", f"[dim]unknown: {escape(why)}[/]")
    ui.out.print(t)
    return errors.EXIT_OK


def _configure_precheck(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    p.add_argument("--host-facts", type=Path, help="runner facts from `envbuilder doctor --json` (default: probe here)")
    p.add_argument("--force", action="store_true", help="re-run even when the inputs are unchanged")


def cmd_precheck(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(), PrecheckStage()])


register("doctor", "capture this runner's facts (GPUs, driver, CUDA, glibc, OS, Docker)", _configure_doctor, cmd_doctor)
register("precheck", "check every selected cell against the runner's NVIDIA stack", _configure_precheck, cmd_precheck)


def _configure_build(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    add_run_options(p, smoke=False)


def cmd_build(args: argparse.Namespace, ui: Ui) -> int:
    return run_stages(args, ui, [ResolveStage(), BuildStage(runner=args.runner), ImportStage()], **stage_options(args))


def _configure_smoke(p: argparse.ArgumentParser) -> None:
    _add_cells(p)
    add_run_options(p)


def cmd_smoke(args: argparse.Namespace, ui: Ui) -> int:
    checks = parse_checks(args.checks) if args.checks else None
    echo = (lambda line: ui.err.print(escape(line), style="dim", soft_wrap=True)) if args.verbose else None
    stages: list[Stage] = [ResolveStage(), PrecheckStage(), BuildStage(runner=args.runner), ImportStage(),
                           SmokeStage(checks=checks, echo=echo)]  # fmt: skip
    from envbuilder.runners import gc

    gc(Workspace(args.workdir).root / "run")  # servers a killed run left behind
    return run_stages(args, ui, stages, **stage_options(args))


def cmd_gc(args: argparse.Namespace, ui: Ui) -> int:
    from envbuilder.runners import gc
    from envbuilder.runners.docker import gc_containers

    removed = gc(Workspace(args.workdir).root / "run") + gc_containers()
    if ui.json:
        ui.print_json({"removed": removed})
    else:
        ui.out.print("\n".join(removed) if removed else "nothing left running")
    return errors.EXIT_OK


register("build", "build each selected cell's environment (Docker image or venv) and import-smoke it",
         _configure_build, cmd_build)  # fmt: skip
register("smoke", "start each selected cell's engine and run the smoke checks (--checks none: start and stop)",
         _configure_smoke, cmd_smoke)  # fmt: skip
register("gc", "stop servers and remove containers a killed run left behind", lambda p: None, cmd_gc)


def _configure_degeneracy(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-", help="JSON lines {\"id\", \"text\"} or plain text; - for stdin")


def cmd_degeneracy(args: argparse.Namespace, ui: Ui) -> int:
    """One verdict per text; exit 1 if any text is degenerate."""
    import json
    import sys

    from envbuilder.checks import degeneracy
    from envbuilder.errors import InputError

    if args.file == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        where = args.file
        try:
            text = Path(args.file).read_text()
        except OSError as e:
            raise InputError(args.file, None, f"cannot read ({e.strerror or e})") from None
    items: list[tuple[object, str, str | None]] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    as_jsonl = bool(lines) and all(ln.lstrip().startswith("{") for ln in lines)
    if as_jsonl:
        for n, ln in enumerate(lines, 1):
            try:
                obj = json.loads(ln)
            except ValueError as e:
                raise InputError(where, f"line {n}", f"not JSON ({e})") from None
            if not isinstance(obj, dict) or "text" not in obj:
                raise InputError(where, f"line {n}", "needs a \"text\" field")
            items.append((obj.get("id", n), "" if obj["text"] is None else str(obj["text"]), obj.get("finish_reason")))
    else:
        items.append((1, text, None))
    bad = False
    for ident, body, finish in items:
        v = degeneracy.detect(body, finish_reason=finish)
        bad |= v.degenerate
        if ui.json:
            sys.stdout.write(json.dumps({"id": ident, "verdict": v.label, "signals": list(v.signals)}) + "\n")
        else:
            sig = f" ({', '.join(v.signals)})" if v.signals else ""
            ui.out.print(f"{ident}: {v.label}{escape(sig)}")
    return errors.EXIT_CELLS_FAILED if bad else errors.EXIT_OK


register("degeneracy", "judge generated texts: degenerate or ok, with the signals that fired",
         _configure_degeneracy, cmd_degeneracy)  # fmt: skip
