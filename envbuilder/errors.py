"""Every exception envbuilder raises on purpose, with the exit code the CLI gives it.

One class, one exit code:

====================  ====  =========================================================
class                 exit  meaning
====================  ====  =========================================================
``InputError``        2     the user's input is wrong (matrix, host facts, prompt set,
                            cell filter, command-line usage); one line names file and key
``StageFailure``      1     a stage decided a cell is ``fail``/``error``/``skip``; caught
                            per cell by the pipeline, it only reaches the CLI when a
                            command works on a single cell
``EnvbuilderError``   3     anything else raised on purpose (a bug if it escapes)
====================  ====  =========================================================

Exit 0 means every selected cell passed (or was skipped as not applicable here); exit 1
means at least one cell failed or could not be decided.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envbuilder.results import Reason, Status

EXIT_OK = 0
EXIT_CELLS_FAILED = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3


class EnvbuilderError(Exception):
    """Base of every error envbuilder raises on purpose."""

    exit_code = EXIT_INTERNAL


class InputError(EnvbuilderError):
    """Bad user input. The message is one line that names the file and the key."""

    exit_code = EXIT_INPUT

    def __init__(self, where: str, key: str | None, problem: str) -> None:
        self.where = one_line(where, 300)
        self.key = one_line(key, 200) if key is not None else None
        self.problem = one_line(problem, 600)
        super().__init__(f"{self.where}: {self.key}: {self.problem}" if key else f"{self.where}: {self.problem}")


class StageFailure(EnvbuilderError):
    """Raised inside a stage to end it with a decided status, reason slug and one-sentence message."""

    exit_code = EXIT_CELLS_FAILED

    def __init__(
        self,
        status: Status,
        reason: Reason,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}
        super().__init__(message)


def one_line(text: str, limit: int) -> str:
    """``text`` as one printable line: control characters escaped (``\\n``), cut at ``limit`` characters."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ``did you mean 'x'?`` suffix for an unknown name, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
