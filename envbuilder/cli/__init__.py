"""The command line. It owns all output; the library below it never prints.

Exit codes: 0 every selected cell passed or was skipped as not applicable here, 1 some cell failed
or could not be decided, 2 usage or input error (one line naming the file and key).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.markup import escape

from envbuilder import __version__, children, errors, validate
from envbuilder import matrix as matrix_mod
from envbuilder.cli import airgap, engine, pin, probes, report, stages
from envbuilder.cli.options import Command
from envbuilder.cli.ui import Ui, WarningLine, consoles
from envbuilder.errors import EnvbuilderError, InputError

DEFAULT_MAX_CELLS = matrix_mod.MAX_CELLS

# One module per command family (argparse and output only; the stage modules do the work): stages, report, pin,
# airgap, probes; ui (all output) and options (what the families share).
COMMANDS: dict[str, Command] = {**stages.COMMANDS, **report.COMMANDS, **pin.COMMANDS, **airgap.COMMANDS,
                                **probes.COMMANDS, **engine.COMMANDS}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit 2 (never a traceback)."""

    def error(self, message: str) -> NoReturn:
        raise InputError("command line", None, f"{message} (see `{self.prog} --help`)")


def _common(suppress: bool) -> _Parser:
    """Global options, accepted before and after the sub-command (sub-parsers must not reset them)."""
    d: Callable[[Any], Any] = (lambda _v: argparse.SUPPRESS) if suppress else (lambda v: v)
    c = _Parser(add_help=False)
    c.add_argument("--matrix", type=Path, default=d(Path("matrix.toml")), help="matrix file (default: ./matrix.toml)")
    c.add_argument("--workdir", type=Path, default=d(Path(".envbuilder")), help="work folder (default: .envbuilder/)")
    c.add_argument("--json", action="store_true", default=d(False), help="print results as JSON")
    c.add_argument("-v", "--verbose", action="store_true", default=d(False), help="stream logs live")
    c.add_argument("--max-cells", type=validate.int_arg(1), default=d(matrix_mod.MAX_CELLS), metavar="N",
                   help=f"refuse a matrix of more cells (default: {matrix_mod.MAX_CELLS}, GitHub's jobs per matrix)")
    return c


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="envbuilder", description=__doc__, parents=[_common(False)],
                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--version", action="version", version=f"envbuilder {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub_common = _common(True)
    for name, command in COMMANDS.items():
        sp = sub.add_parser(name, help=command.help, description=command.help, parents=[sub_common])
        command.configure(sp)
    return p


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # the same orderly stop as Ctrl-C: children stopped, nothing half-stored


def main(argv: Sequence[str] | None = None) -> int:
    json_mode = "--json" in (argv if argv is not None else sys.argv[1:])
    out, err = consoles(json_mode)
    warnings = WarningLine(err)
    lib_log = logging.getLogger("envbuilder")
    lib_log.addHandler(warnings)
    propagate, lib_log.propagate = lib_log.propagate, False
    main_thread = threading.current_thread() is threading.main_thread()
    old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return errors.EXIT_INPUT
        matrix_mod.MAX_CELLS = args.max_cells
        validate.workdir(args.workdir)
        ui = Ui(out=out, err=err, json=args.json, verbose=args.verbose)
        return COMMANDS[args.command].handler(args, ui)
    except EnvbuilderError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except (KeyboardInterrupt, children.Interrupted):
        err.print("interrupted: stopped; stored results are kept")
        return 130
    except BrokenPipeError:  # `envbuilder ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return errors.EXIT_OK
    except OSError as e:  # a file or folder the command line named that cannot be read or written
        if e.filename is None:
            raise
        err.print(f"[bold red]error:[/] {escape(str(e.filename))}: {escape(e.strerror or str(e))}", highlight=False,
                  soft_wrap=True)  # fmt: skip
        return errors.EXIT_INPUT
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, old_sigterm)
        lib_log.removeHandler(warnings)
        lib_log.propagate = propagate
        matrix_mod.MAX_CELLS = DEFAULT_MAX_CELLS
