"""``python -m envbuilder`` and the ``envbuilder`` console script.

Imports are inside :func:`main` so that a Ctrl-C that arrives while they load (the first tens of
milliseconds) ends as one line and exit 130, never a traceback.
"""

import contextlib
import sys


def main() -> int:
    try:
        from envbuilder.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write("interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
