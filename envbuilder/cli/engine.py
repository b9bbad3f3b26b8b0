"""What a release's own wheel says about itself: engine-facts."""

from __future__ import annotations

import argparse
from pathlib import Path

from packaging.version import Version
from rich.markup import escape

from envbuilder import errors, indexconfig
from envbuilder import matrix as matrix_mod
from envbuilder.cli.options import Command
from envbuilder.cli.ui import Ui
from envbuilder.engines import facts as facts_mod
from envbuilder.pipeline import Workspace


def _configure_engine_facts(p: argparse.ArgumentParser) -> None:
    p.add_argument("version", help="the engine release, e.g. 0.5.20")
    p.add_argument("--package", default="sglang")
    p.add_argument("--check", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="launch flags to check against this release (the rest of the command line)")


def cmd_engine_facts(args: argparse.Namespace, ui: Ui) -> int:
    """What a release's own wheel says: launch flags (deprecated aliases, removals) and the log formats read."""
    ws = Workspace(args.workdir)
    m = matrix_mod.load(args.matrix) if Path(args.matrix).exists() else None
    index_url = indexconfig.require_read_url(m.resolve.indexes if m else (), str(args.matrix))
    try:
        f = facts_mod.facts_for(args.package, args.version, ws.cache, index_url)
    except facts_mod.EngineFactsError as e:
        raise errors.InputError("command line", args.version, str(e)) from None
    history = facts_mod.cached_history(ws.cache, args.package, args.version)
    check = facts_mod.check_flags(f, args.check, history) if args.check else None
    if ui.json:
        ui.print_json({**f.to_json(), **({"check": check.to_json()} if check else {})})
        return errors.EXIT_OK if not (check and check.problems) else errors.EXIT_CELLS_FAILED
    dep = [x for x in f.flags if x.deprecated]
    ui.out.print(f"{f.package} {f.version} (read from {f.wheel}, sha256 {f.sha256[:12]}…): {len(f.options())} launch "
                 f"options, {len(dep)} deprecated; server_args logged as {f.server_args_repr}")  # fmt: skip
    for x in dep:
        ui.out.print(escape(f"  deprecated {', '.join(x.names)}" + (f" -> {x.replacement}" if x.replacement else "")))
    if history:
        prev = max(history, key=lambda h: Version(h.version))
        gone = sorted(prev.options() - f.options())
        if gone:
            ui.out.print(escape(f"  removed since {prev.version}: " + ", ".join(gone)))
    ui.out.print("log formats the monitor reads:")
    for lf in f.logs:
        ui.out.print(escape(f"  {lf.milestone:<20} {lf.literal[:110]}  ({lf.source})"))
    if check:
        for p in check.problems:
            ui.out.print(escape(f"bad-flag: {p.message}"))
        for n in check.notes:
            ui.out.print(escape(f"note: {n.message}"))
        return errors.EXIT_CELLS_FAILED if check.problems else errors.EXIT_OK
    return errors.EXIT_OK


COMMANDS = {
    "engine-facts": Command("what a release's wheel says: launch flags, deprecated aliases, removals, log formats",
                            _configure_engine_facts, cmd_engine_facts),
}
