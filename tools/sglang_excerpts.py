"""Write the SGLang wheel excerpts the tests read (tests/fixtures/sglang-wheels/VERSION/PATH.txt).

    python3 tools/sglang_excerpts.py WHEEL...     # e.g. wheels fetched with `pip download --no-deps sglang==X`

From each wheel, verbatim: the ``add_argument`` calls and annotated fields of the launch flags envbuilder's
tests use (``FLAGS``), and every logging call the monitor reads (``engines.facts.ANCHORS``), each kept as the
release wrote it and wrapped in parentheses / a class body only so the excerpt parses on its own.
"""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

from envbuilder.engines import facts

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sglang-wheels"
FLAGS = {"--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
         "--speculative-num-draft-tokens", "--speculative-draft-model-path", "--mamba-scheduler-strategy",
         "--mamba-radix-cache-strategy", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode",
         "--cuda-graph-max-bs-prefill", "--reasoning-parser", "--tool-call-parser", "--tp-size", "--context-length",
         "--mem-fraction-static", "--model-path", "--host", "--port", "--enable-metrics", "--disable-radix-cache"}  # fmt: skip


def flag_nodes(src: str) -> tuple[list[ast.AST], list[ast.AST]]:
    """(add_argument calls, annotated fields) that define one of FLAGS."""
    calls, fields = [], []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            if names & FLAGS:
                calls.append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            fl = facts.parse_fields(ast.unparse(node))
            if fl and set(fl[0].names) & FLAGS:
                fields.append(node)
    return calls, fields


def excerpt(version: str, wheel: str, path: str, src: str, calls: list[ast.AST], fields: list[ast.AST]) -> str:
    lines = sorted({n.lineno for n in calls + fields})  # type: ignore[attr-defined]
    out = [f"# Excerpt of sglang {version} ({wheel}): {path}, verbatim at lines {', '.join(map(str, lines))};",
           "# each call is wrapped in parentheses and the fields in a class body so the excerpt parses alone.", ""]
    if fields:
        out.append("class _Fields:")
        out += ["    " + (ast.get_source_segment(src, n) or "") for n in sorted(fields, key=lambda n: n.lineno)]  # type: ignore[attr-defined]
        out.append("")
    if calls:
        out.append("def _calls(parser, logger):  # noqa")
        for n in sorted(calls, key=lambda n: n.lineno):  # type: ignore[attr-defined]
            out += ["    (", ast.get_source_segment(src, n) or "", "    )"]
    return "\n".join(out) + "\n"


def main(wheels: list[str]) -> None:
    for w in wheels:
        version = Path(w).name.split("-")[1]
        zf = zipfile.ZipFile(w)
        for name in sorted(n for n in zf.namelist() if n.startswith("sglang/srt/") and n.endswith(".py")):
            src = zf.read(name).decode(errors="replace")
            calls, fields = flag_nodes(src) if ("server_args" in name or "arg_groups/fields/" in name) else ([], [])
            logs = {int(lf.source.rsplit(":", 1)[1]) for lf in facts.parse_logs(src, name)}
            if logs:
                tree = ast.parse(src)
                calls += [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno in logs
                          and isinstance(n.func, (ast.Attribute, ast.Name))
                          and ast.unparse(n.func).split(".")[-1] in {*facts._LOG_METHODS} | {ast.unparse(n.func)}
                          and "log" in ast.unparse(n.func).lower()]  # fmt: skip
            if calls or fields or name == facts.SERVER_ARGS:
                dest = OUT / version / (name + ".txt")  # .txt: kept out of the linters' way
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(excerpt(version, Path(w).name, name, src, calls, fields))
        print(version, sum(1 for _ in (OUT / version).rglob("*.py.txt")), "files")


if __name__ == "__main__":
    main(sys.argv[1:])
