"""Registers the stage commands with the CLI (kept apart so cli.py stays the plumbing)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from envbuilder import atomic, doctor, errors
from envbuilder.cli import Ui, _add_cells, register, run_stages
from envbuilder.precheck import PrecheckStage
from envbuilder.resolve import ResolveStage


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
