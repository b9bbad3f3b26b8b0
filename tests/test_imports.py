"""envbuilder's import graph has no cycles (imports inside functions count; ``if TYPE_CHECKING:`` blocks do not)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "envbuilder"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Every envbuilder module ``tree`` imports, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def target(name: str) -> str | None:
        while name and name not in known:  # `from envbuilder.x import y`: y may be a module or a name in x
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if (t := target(a.name)) is not None:
                    found.add(t)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                if (t := target(f"{base}.{a.name}")) is not None:
                    found.add(t)
        for sub in ast.iter_child_nodes(node):
            visit(sub)

    visit(tree)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    return {m: _imports(ast.parse(p.read_text()), m, p.name == "__init__.py", known) for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_graph_sees_function_level_imports_and_skips_type_checking() -> None:
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from envbuilder import b\n"
            "def f():\n    from envbuilder.c import thing\n    import envbuilder.d\n"
            "from . import e\n")  # fmt: skip
    known = {"envbuilder", "envbuilder.a", "envbuilder.b", "envbuilder.c", "envbuilder.d", "envbuilder.e"}
    assert _imports(ast.parse(code), "envbuilder.a", False, known) == {"envbuilder.c", "envbuilder.d", "envbuilder.e"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_envbuilder_has_no_import_cycles() -> None:
    graph = import_graph()
    assert graph.get("envbuilder.cli")
    assert cycles(graph) == []


WHERE_AND_WHAT = {"sglang", "llama-cpp", "venv", "docker", "image", "external", "local"}
REGISTRIES = {"envbuilder/engines/__init__.py", "envbuilder/backends.py", "envbuilder/build.py",
              "envbuilder/artifacts.py"}  # artifacts: the storage boundary reads version-1 files' "runner"


def test_no_branching_on_engine_or_runner_names_outside_the_registries() -> None:
    """``x == "sglang"`` / ``runner == "docker"`` belong to the engine and backend registries, nowhere else."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in REGISTRIES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Constant) and side.value in WHERE_AND_WHAT:
                        found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
