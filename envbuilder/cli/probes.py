"""Checks without the pipeline: launch-check (SGLang's own argument checks), degeneracy (judge texts)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from envbuilder import errors, launchcheck, model
from envbuilder.checks import degeneracy
from envbuilder.cli.options import (
    Command,
    one_cell,
)
from envbuilder.cli.ui import Ui, write_stdout
from envbuilder.errors import InputError
from envbuilder.pipeline import Workspace
from envbuilder.results import Status


def _configure_launch_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="the cell (an id or a filter matching one cell)")
    p.add_argument("--python", help="run in this interpreter instead of the cell's venv (e.g. a runner's python3)")


def cmd_launch_check(args: argparse.Namespace, ui: Ui) -> int:
    """SGLang's own argument checks for the cell's launch, against the model's config.json, no GPU needed."""
    m, cell = one_cell(args)
    config = model.find_config(m.model, args.matrix.parent, where=str(args.matrix))
    if config is None:
        raise errors.InputError(str(args.matrix), "[model]", "no config.json found: set [model] config or a local path")
    if args.python:
        python = shlex.split(args.python)
    else:
        r = Workspace(args.workdir).results.load(cell.id)
        built = r.environment() if r else None
        if built is None or not built.on_this_machine:
            raise errors.InputError("command line", "--python", "no venv for this cell: build it or pass --python")
        python = [built.python]
    verdict, probe = launchcheck.run(python, config, launchcheck.launch_args(m), env={**os.environ, **m.server.env})
    if ui.json:
        ui.print_json({"cell": cell.id, **verdict.to_json(), "log": probe.get("log", "")[-2000:]})
    else:
        ui.out.print(f"{cell.id}: {verdict.status.value} {verdict.reason.value} — {escape(verdict.message)}")
        for n in verdict.notes:
            ui.out.print(f"  note: {escape(n)}")
    return errors.EXIT_OK if verdict.status in (Status.PASS, Status.SKIP) else errors.EXIT_CELLS_FAILED


def _configure_degeneracy(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-",
                   help="JSON lines {\"id\", \"text\", [\"finish_reason\"], [\"expected\": \"degenerate\"|\"ok\"]} "
                        "or plain text; - for stdin. With labels, precision and recall are printed too")  # fmt: skip


def cmd_degeneracy(args: argparse.Namespace, ui: Ui) -> int:
    """One verdict per text; exit 1 if any text is degenerate."""
    if args.file == "-":
        raw, where = sys.stdin.buffer.read(), "stdin"
    else:
        where = args.file
        try:
            raw = Path(args.file).read_bytes()
        except OSError as e:
            raise InputError(args.file, None, f"cannot read ({e.strerror or e})") from None
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:
        raise InputError(where, f"byte {e.start}", "not UTF-8 text (generated texts are UTF-8)") from None
    items: list[tuple[object, str, str | None, bool | None]] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    as_jsonl = bool(lines) and all(ln.lstrip().startswith("{") for ln in lines)
    if as_jsonl:
        for n, ln in enumerate(lines, 1):
            try:
                obj = json.loads(ln)
            except RecursionError:
                raise InputError(where, f"line {n}", "not JSON (nested too deep)") from None
            except ValueError as e:
                raise InputError(where, f"line {n}", f"not JSON ({e})") from None
            if not isinstance(obj, dict) or "text" not in obj:
                raise InputError(where, f"line {n}", "needs a \"text\" field")
            for key in ("text", "finish_reason"):
                if obj.get(key) is not None and not isinstance(obj[key], str):
                    raise InputError(where, f"line {n}", f"{key!r} is {type(obj[key]).__name__}, not a string")
            raw_label = obj.get("expected", obj.get("label"))
            if raw_label is not None and (not isinstance(raw_label, str) or raw_label not in degeneracy.LABELS):
                raise InputError(where, f"line {n}", f"label {raw_label!r} is not one of {', '.join(degeneracy.LABELS)}")
            label = None if raw_label is None else degeneracy.LABELS[raw_label]
            items.append((obj.get("id", n), obj["text"] or "", obj.get("finish_reason"),
                          label))  # fmt: skip
    else:
        items.append((1, text, None, None))
    bad = False
    pairs: list[tuple[bool, bool]] = []
    for ident, body, finish, label in items:
        v = degeneracy.detect(body, finish_reason=finish)
        bad |= v.degenerate
        if label is not None:
            pairs.append((label, v.degenerate))
        if ui.json:
            findings = [{"signal": f.signal, "start": f.start, "end": f.end, "detail": f.detail, "strong": f.strong}
                        for f in v.findings]  # fmt: skip
            write_stdout(json.dumps({"id": ident, "verdict": v.label, "signals": list(v.signals),
                                         "turned_at": v.turned_at, "findings": findings}) + "\n")  # fmt: skip
        else:
            why = f" ({escape(v.explain())})" if v.findings else ""
            ui.out.print(f"{ident}: {v.label}{why}")
    if pairs:
        s = degeneracy.score(pairs)
        summary = {"labelled": len(pairs), "precision": round(s.precision, 4), "recall": round(s.recall, 4),
                   "false_alarm_rate": round(s.false_alarm_rate, 4), "tp": s.tp, "fn": s.fn, "fp": s.fp, "tn": s.tn}
        if ui.json:
            write_stdout(json.dumps({"summary": summary}) + "\n")
        else:
            ui.out.print(f"{len(pairs)} labelled texts: {s.summary()}")
    return errors.EXIT_CELLS_FAILED if bad else errors.EXIT_OK


def _configure_kv_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("logs", nargs="+", type=Path, help="SGLang server logs as envbuilder writes them (first line CMD ...)")
    p.add_argument("--config", type=Path, required=True, help="the served model's config.json")
    p.add_argument("--host-facts", type=Path, required=True, help="`envbuilder doctor --json` of the machine that ran it")
    p.add_argument("--sglang", default=None, help="the SGLang release that ran (default: the newest known)")


def cmd_kv_check(args: argparse.Namespace, ui: Ui) -> int:
    """Predicted vs logged max_total_num_tokens for recorded starts; exit 1 if one is more than 15 % off."""
    from envbuilder import memory

    cfg = model.read_config(args.config)
    try:
        facts = json.loads(args.host_facts.read_text())
        gpu_mib = float(facts["gpus"][0]["memory_mib"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise InputError(str(args.host_facts), "gpus[0].memory_mib", f"not readable ({e})") from None
    off_any = False
    rows: list[dict[str, Any]] = []
    for log in args.logs:
        try:
            rec = memory.read_log(log.read_text(errors="replace"))
        except OSError as e:
            raise InputError(str(log), None, f"cannot read ({e.strerror or e})") from None
        if not rec.argv:
            raise InputError(str(log), "line 1", "not a server log as envbuilder writes it (first line `CMD <argv>`)")
        if rec.weights_gib is None:
            rows.append({"log": str(log), "predicted": None, "logged": None, "why": "the start ended before the weights loaded"})
            continue
        try:
            plan = memory.predict(cfg=cfg, weight_bytes=rec.weights_gib * memory.GIB, gpu_mib=gpu_mib,
                                  argv=list(rec.argv), version=args.sglang)  # fmt: skip
        except memory.BadLaunchFlag as e:
            rows.append({"log": str(log), "predicted": None, "logged": None, "why": str(e)})
            continue
        cmp = memory.KvComparison.of(plan, rec.max_total_num_tokens)
        off_any |= cmp.within is False
        row = {"log": str(log), **cmp.to_json(), "logged_max_running_requests": rec.max_running_requests,
               "logged_max_mamba_cache_size": rec.max_mamba_cache_size}
        predicted_free = plan.free_before_weights / memory.GIB
        if rec.free_before_weights_gib is not None and rec.free_before_weights_gib < 0.95 * predicted_free:
            row["why"] = (f"the GPU was not empty at this start: {rec.free_before_weights_gib:.2f} GiB free when the "
                          f"weights began to load, {predicted_free:.2f} GiB on an idle GPU (another server held it)")
        rows.append(row)
    if ui.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for r in rows:
            off = f"{r['off']:+.2%}" if r.get("off") is not None else "-"
            pred = r["predicted"] if r["predicted"] is not None else "-"
            logged = r["logged"] if r["logged"] is not None else "none (start refused)"
            extra = "" if r.get("predicted") is None or r["predicted"] > 0 else " (no pool: SGLang refuses the start)"
            extra += f"; {r['why']}" if r.get("why") and r.get("predicted") is not None else ""
            if r["predicted"] is None and r.get("why"):
                ui.out.print(escape(f"{r['log']}: no prediction: {r['why']}"))
                continue
            ui.out.print(escape(f"{r['log']}: predicted {pred}, logged {logged}, off {off}{extra}"))
    return errors.EXIT_CELLS_FAILED if off_any else errors.EXIT_OK


COMMANDS = {
    "launch-check": Command("SGLang's own argument checks against the model's config.json (no GPU, no weights)", _configure_launch_check, cmd_launch_check),
    "kv-check": Command("predicted (SGLang's own sizing) vs logged KV tokens of recorded SGLang starts", _configure_kv_check, cmd_kv_check),
    "degeneracy": Command("judge generated texts: degenerate or ok, with the span that says so; labels give precision/recall", _configure_degeneracy, cmd_degeneracy),
}
