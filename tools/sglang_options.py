"""Regenerate envbuilder/data/sglang_options.json from SGLang wheels (run on a machine with network):

    python3 -m pip download --no-deps sglang==0.5.11 -d /tmp/sgl-wheels
    python3 tools/sglang_options.py /tmp/sgl-wheels/sglang-*.whl

For each release: every long option of ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py) with whether it
takes a value (``action="store_true"``/``"store_false"`` take none), and the ``--speculative-algorithm`` choices.
Read with ``ast`` from the release's own source, never imported.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).parent.parent / "envbuilder" / "data" / "sglang_options.json"


def options(source: str) -> tuple[dict[str, int], list[str]]:
    flags: dict[str, int] = {}
    algorithms: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        takes = 0 if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false") else 1
        for n in names:
            if n.startswith("--"):
                flags[n] = takes
        if "--speculative-algorithm" in names and isinstance(kw.get("choices"), ast.List):
            algorithms = [c.value for c in kw["choices"].elts if isinstance(c, ast.Constant)]  # type: ignore[attr-defined]
    return flags, algorithms


def main(wheels: list[str]) -> None:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    for w in wheels:
        version = Path(w).name.split("-")[1]
        with zipfile.ZipFile(w) as z:
            flags, algorithms = options(z.read("sglang/srt/server_args.py").decode())
        data[version] = {"source": f"sglang {version} sglang/srt/server_args.py ServerArgs.add_cli_args",
                         "speculative_algorithms": algorithms, "options": dict(sorted(flags.items()))}
    OUT.write_text(json.dumps(dict(sorted(data.items())), indent=0, sort_keys=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
