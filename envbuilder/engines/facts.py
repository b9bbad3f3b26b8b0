"""Engine knowledge read from the release itself: launch flags and the log formats the monitor reads.

For an SGLang version, the release's wheel is downloaded from the configured index (never installed, no
GPU) and read with :mod:`ast`:

* ``sglang/srt/server_args.py``: every ``parser.add_argument(...)`` — its option strings, ``choices`` (when
  literal), ``dest``, and deprecated aliases (an action named ``Deprecated*`` with ``new_flag=``, or a help
  text that starts with "Deprecated");
* every ``logger.*(...)`` call under ``sglang/`` whose format (f-string, ``%``-string or literal) carries one
  of the phrases in :data:`ANCHORS` — the start-up lines the monitor turns into milestones.

Facts are cached per version as JSON under ``<workdir>/cache/engine-facts/``: a release never changes.
What the wheel cannot tell stays hand-kept, and says so where it is kept: *which* lines matter
(:data:`ANCHORS`), uvicorn's own lines, and the failure patterns (``engines.SGLANG.failures``).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from packaging.version import InvalidVersion, Version

from envbuilder import atomic
from envbuilder.errors import EnvbuilderError

SCHEMA = 1
SERVER_ARGS = "sglang/srt/server_args.py"

# Hand-kept (the wheel cannot say which of its thousands of log lines mark a start-up phase): milestone ->
# a regex over a logging template's literal text (its fields written as ``{}``).
ANCHORS: dict[str, str] = {
    "torch_distributed": r"^Init (?:torch distributed|parallel) begin\.",
    "load_weight_begin": r"^Load weight begin\.",
    "load_weight_end": r"^Load weight end\. elapsed=",
    # "{cache_name} is allocated" from 0.5.17; 0.5.18+ sizes the KV pool after graph capture ("Post-capture …")
    "kv_cache": r"^(?:(?:KV Cache|\{\}) is allocated|Post-capture KV sizing: KV cache allocated)\. "
                r"(?:dtype: \{\}, )?#tokens: ",
    "mamba_cache": r"^Mamba Cache is allocated\.",
    # "Capture cuda graph begin." (≤ 0.5.13), "Capture {capture_name} CUDA graph begin." (0.5.14+), draft ones
    "graph_capture_begin": r"^Capture (?:\{\} |(?:draft |draft extend |draft decode |target )?)(?:cuda|CUDA|\{\})"
                           r"(?: graph)? begin\b",
    "graph_capture_end": r"^Capture (?:\{\} |(?:draft |draft extend |draft decode |target )?)(?:cuda|CUDA|\{\})"
                         r"(?: graph)? end\.",
    "piecewise_begin": r"^Capture piecewise CUDA graph begin\.",
    "piecewise_end": r"^Capture piecewise CUDA graph end\.",
    "max_tokens": r"^max_total_num_tokens=\{\}.*context_len=",
    "ready": r"^The server is fired up and ready to roll!",
    "server_args": r"^server_args=\{\}$",
}
_LOG_METHODS = {"info", "warning", "error", "debug", "critical", "exception"}


class EngineFactsError(EnvbuilderError):
    """The release's wheel could not be fetched or read."""


@dataclass(frozen=True, kw_only=True)
class Flag:
    """One ``add_argument`` of the release's launch parser."""

    names: tuple[str, ...]
    dest: str | None = None
    choices: tuple[str, ...] | None = None  # literal choices only
    choices_expr: str | None = None  # the source of non-literal choices (e.g. ``ATTENTION_BACKEND_CHOICES``)
    action: str | None = None
    deprecated: bool = False
    replacement: str | None = None  # ``new_flag=`` of a deprecated alias

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "dest": self.dest,
                "choices": None if self.choices is None else list(self.choices), "choices_expr": self.choices_expr,
                "action": self.action, "deprecated": self.deprecated, "replacement": self.replacement}  # fmt: skip

    @staticmethod
    def from_json(d: dict[str, Any]) -> Flag:
        ch = d.get("choices")
        return Flag(names=tuple(d["names"]), dest=d.get("dest"), choices=None if ch is None else tuple(ch),
                    choices_expr=d.get("choices_expr"), action=d.get("action"),
                    deprecated=bool(d.get("deprecated")), replacement=d.get("replacement"))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Field:
    """A ``{…}`` of a logging template: its source expression and format spec."""

    expr: str
    spec: str = ""


@dataclass(frozen=True, kw_only=True)
class LogFormat:
    """One logging call the monitor depends on, as the release writes it."""

    milestone: str
    parts: tuple[str | Field, ...]
    source: str  # "sglang/srt/...py:LINE"

    @property
    def needles(self) -> tuple[str, ...]:
        """The literal parts every line this call prints contains."""
        return tuple(p for p in self.parts if isinstance(p, str) and p.strip())

    def search(self, line: str) -> re.Match[str] | None:
        return re.search(self.regex(), line) if all(n in line for n in self.needles) else None

    @property
    def literal(self) -> str:
        return "".join(p if isinstance(p, str) else "{}" for p in self.parts)

    def regex(self) -> str:
        """A regex matching the rendered line: literals escaped, each field a (named where it can be) group."""
        out: list[str] = []
        used: set[str] = set()
        for i, p in enumerate(self.parts):
            if isinstance(p, str):
                out.append(re.escape(p))
                continue
            name = field_name(self.parts[i - 1] if i else "", p, used)
            used.add(name)
            last = i == len(self.parts) - 1
            body = r"[-+\d.eE]+" if re.fullmatch(r"[.\d]*[fdge]", p.spec) else (r".*" if last else r".*?")
            out.append(f"(?P<{name}>{body})")
        return "".join(out)

    def render(self, values: dict[str, str]) -> str:
        """The line this call prints, with each field's value taken from ``values`` by its group name."""
        out: list[str] = []
        used: set[str] = set()
        for i, p in enumerate(self.parts):
            if isinstance(p, str):
                out.append(p)
                continue
            name = field_name(self.parts[i - 1] if i else "", p, used)
            used.add(name)
            out.append(values.get(name, values.get("*", "0")))
        return "".join(out)

    def to_json(self) -> dict[str, Any]:
        return {"milestone": self.milestone, "source": self.source,
                "parts": [p if isinstance(p, str) else {"expr": p.expr, "spec": p.spec} for p in self.parts]}  # fmt: skip

    @staticmethod
    def from_json(d: dict[str, Any]) -> LogFormat:
        parts = tuple(p if isinstance(p, str) else Field(expr=p["expr"], spec=p.get("spec", "")) for p in d["parts"])
        return LogFormat(milestone=d["milestone"], parts=parts, source=d["source"])


# the group names the hand-kept patterns use, which the smoke stage and the reports read
_GROUP_ALIASES = {"max_total_num_tokens": "tokens", "context_len": "ctx"}


def field_name(before: str | Field, f: Field, used: set[str]) -> str:
    """A group name for a field: the key printed before it (``#tokens: {n}`` -> ``tokens``, ``elapsed={t}``
    -> ``elapsed``), else its expression's last identifier; made unique within the template."""
    base = ""
    if isinstance(before, str) and (m := re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*[:=]\s*$", before)):
        base = m.group(1)
    if not base:
        ids = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.expr)
        base = ids[-1] if ids else "value"
    base = _GROUP_ALIASES.get(base, base)
    name, k = base, 2
    while name in used:
        name, k = f"{base}_{k}", k + 1
    return name


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """What one release says about itself (see the module docstring)."""

    package: str
    version: str
    wheel: str  # the file read
    sha256: str
    flags: tuple[Flag, ...]
    logs: tuple[LogFormat, ...]
    server_args_repr: str  # how the start-up prints its arguments: "dataclass" (ServerArgs(...)) or "dict"

    def options(self) -> set[str]:
        return {n for f in self.flags for n in f.names if n.startswith("--")}

    def flag(self, name: str) -> Flag | None:
        return next((f for f in self.flags if name in f.names), None)

    def formats(self, milestone: str) -> list[LogFormat]:
        return [lf for lf in self.logs if lf.milestone == milestone]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "package": self.package, "version": self.version, "wheel": self.wheel,
                "sha256": self.sha256, "server_args_repr": self.server_args_repr,
                "flags": [f.to_json() for f in self.flags], "logs": [lf.to_json() for lf in self.logs]}  # fmt: skip

    @staticmethod
    def from_json(d: dict[str, Any]) -> EngineFacts:
        return EngineFacts(package=d["package"], version=d["version"], wheel=d["wheel"], sha256=d["sha256"],
                           flags=tuple(Flag.from_json(f) for f in d["flags"]),
                           logs=tuple(LogFormat.from_json(x) for x in d["logs"]),
                           server_args_repr=d.get("server_args_repr", "dataclass"))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Reading sources
# --------------------------------------------------------------------------------------------


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def parse_flags(source: str) -> list[Flag]:
    """Every ``*.add_argument("--…", …)`` in ``server_args.py``'s source."""
    out: list[Flag] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):  # fmt: skip
            continue
        names = tuple(s for a in node.args if (s := _const_str(a)) is not None and s.startswith("-"))
        if not names:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        choices: tuple[str, ...] | None = None
        choices_expr: str | None = None
        if "choices" in kw:
            c = kw["choices"]
            if isinstance(c, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) for e in c.elts):
                choices = tuple(str(e.value) for e in c.elts if isinstance(e, ast.Constant))
            else:
                choices_expr = ast.unparse(c)
        action = None
        if "action" in kw:
            a = kw["action"]
            action = _const_str(a) or ast.unparse(a)
        help_text = ""
        if "help" in kw:
            h = kw["help"]
            help_text = _const_str(h) or (ast.unparse(h) if not isinstance(h, ast.Attribute) else "")
        replacement = _const_str(kw["new_flag"]) if "new_flag" in kw else None
        deprecated = (action or "").startswith("Deprecated") or bool(
            re.match(r"\W*deprecated", help_text, re.I))
        if deprecated and replacement is None and (m := re.search(r"[Uu]se (--[\w-]+)", help_text)):
            replacement = m.group(1)
        out.append(Flag(names=names, dest=_const_str(kw["dest"]) if "dest" in kw else None, choices=choices,
                        choices_expr=choices_expr, action=action, deprecated=deprecated,
                        replacement=replacement))  # fmt: skip
    return out


def parse_fields(source: str) -> list[Flag]:
    """Flags SGLang derives from annotated dataclass fields (0.5.14+): ``name: A[T, "help"]`` or
    ``A[T, Arg(help=…, choices=…, aliases=…, cli_name=…)]`` -> ``--name`` (``_`` -> ``-``) and its aliases
    (``sglang/srt/arg_groups/arg_utils.py``: ``add_cli_args_from_dataclass``)."""
    out: list[Flag] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(node.annotation, ast.Subscript)):  # fmt: skip
            continue
        ann = node.annotation
        if ast.unparse(ann.value) not in ("A", "Annotated", "typing.Annotated") or not isinstance(ann.slice, ast.Tuple):
            continue
        elts = ann.slice.elts
        meta = next((e for e in elts[1:] if _const_str(e) is not None
                     or (isinstance(e, ast.Call) and ast.unparse(e.func) == "Arg")), None)  # fmt: skip
        if meta is None:
            continue
        kw = {k.arg: k.value for k in meta.keywords if k.arg} if isinstance(meta, ast.Call) else {}
        if "no_cli" in kw and isinstance(kw["no_cli"], ast.Constant) and kw["no_cli"].value is True:
            continue
        name = node.target.id
        cli = _const_str(kw["cli_name"]) if "cli_name" in kw else None
        names = [cli or "--" + name.replace("_", "-")]
        aliases = kw.get("aliases")
        if isinstance(aliases, (ast.List, ast.Tuple)):
            names += [s for e in aliases.elts if (s := _const_str(e)) is not None]
        choices: tuple[str, ...] | None = None
        choices_expr: str | None = None
        c = kw.get("choices")
        if c is None and (lit := re.search(r"Literal\[(.*?)\]", ast.unparse(elts[0]))):
            c = ast.parse(f"[{lit.group(1)}]", mode="eval").body
        if isinstance(c, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) for e in c.elts):
            choices = tuple(str(e.value) for e in c.elts if isinstance(e, ast.Constant))
        elif c is not None:
            choices_expr = ast.unparse(c)
        help_text = _const_str(meta) or (_const_str(kw["help"]) if "help" in kw else None) or ""
        action = ast.unparse(kw["action"]) if "action" in kw else None
        deprecated = bool(re.match(r"\W*deprecated", help_text, re.I)) or (action or "").startswith("Deprecated")
        repl = m.group(1) if deprecated and (m := re.search(r"[Uu]se (--[\w-]+)", help_text)) else None
        out.append(Flag(names=tuple(names), dest=name, choices=choices, choices_expr=choices_expr, action=action,
                        deprecated=deprecated, replacement=repl))  # fmt: skip
    return out


def _template(node: ast.AST) -> tuple[str | Field, ...] | None:
    """A logging call's first argument as literal parts and fields (f-string, ``%``-string or a literal)."""
    if (s := _const_str(node)) is not None:
        return _percent_parts(s)
    if isinstance(node, ast.JoinedStr):
        parts: list[str | Field] = []
        for v in node.values:
            if (s := _const_str(v)) is not None:
                if parts and isinstance(parts[-1], str):
                    parts[-1] += s
                else:
                    parts.append(s)
            elif isinstance(v, ast.FormattedValue):
                spec = ""
                if isinstance(v.format_spec, ast.JoinedStr):
                    spec = "".join(x.value for x in v.format_spec.values
                                   if isinstance(x, ast.Constant) and isinstance(x.value, str))  # fmt: skip
                parts.append(Field(expr=ast.unparse(v.value), spec=spec))
        return tuple(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _percent_parts(s: str) -> tuple[str | Field, ...]:
    parts: list[str | Field] = []
    pos = 0
    for m in re.finditer(r"%(?:\.\d+)?[sdfr]", s):
        if m.start() > pos:
            parts.append(s[pos:m.start()])
        parts.append(Field(expr="%", spec=m.group(0)[1:] if m.group(0)[-1] in "df" else ""))
        pos = m.end()
    if pos < len(s) or not parts:
        parts.append(s[pos:])
    return tuple(parts)


def parse_logs(source: str, path: str) -> list[LogFormat]:
    """The logging calls in one module whose template matches an :data:`ANCHORS` phrase."""
    if not any(w in source for w in ("Capture", "Init ", "Load weight", "Cache is allocated", "max_total_num_tokens",
                                     "ready to roll", "server_args=", "KV sizing")):  # fmt: skip
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out: list[LogFormat] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in _LOG_METHODS:  # logger.info(f"…")
            if "log" not in ast.unparse(node.func.value).lower():
                continue
            arg = node.args[0]
        elif isinstance(node.func, ast.Name) and node.func.id.startswith("log_"):  # log_info_on_rank0(logger, f"…")
            arg = next((a for a in node.args if isinstance(a, (ast.JoinedStr, ast.Constant))), node.args[0])
        else:
            continue
        parts = _template(arg)
        if parts is None:
            continue
        lit = "".join(p if isinstance(p, str) else "{}" for p in parts)
        for milestone, anchor in ANCHORS.items():
            if re.search(anchor, lit):
                out.append(LogFormat(milestone=milestone, parts=parts, source=f"{path}:{node.lineno}"))
                break
    return out


def server_args_repr(logs: Iterable[LogFormat]) -> str:
    """``dict`` when the start-up logs ``server_args=`` from a dict (0.5.19+: ``resolved_dict()``), else
    ``dataclass`` (``ServerArgs(...)``)."""
    for lf in logs:
        if lf.milestone == "server_args" and lf.source.startswith("sglang/srt/entrypoints/"):
            f = next((p for p in lf.parts if isinstance(p, Field)), None)
            if f is not None and re.search(r"dict|_for_logging|vars\(", f.expr):
                return "dict"
    return "dataclass"


def read_wheel(path: Path, package: str = "sglang") -> EngineFacts:
    """The facts of one release, from its wheel file (no install)."""
    data = path.read_bytes()
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise EngineFactsError(f"{path}: not a wheel ({e})") from None
    version = path.name.split("-")[1]
    mod = package.replace("-", "_")
    names = [n for n in zf.namelist() if n.startswith(f"{mod}/") and n.endswith(".py")]
    server_args_path = f"{mod}/srt/server_args.py"
    if server_args_path not in names:
        raise EngineFactsError(f"{path.name}: has no {server_args_path}")
    flags = parse_flags(zf.read(server_args_path).decode())
    for n in [server_args_path, *sorted(x for x in names if x.startswith(f"{mod}/srt/arg_groups/fields/"))]:
        flags += parse_fields(zf.read(n).decode())
    logs: list[LogFormat] = []
    for n in sorted(names):
        if not n.startswith(f"{mod}/srt/"):
            continue
        src = zf.read(n).decode(errors="replace")
        logs += parse_logs(src, n)
    return EngineFacts(package=package, version=version, wheel=path.name, sha256=hashlib.sha256(data).hexdigest(),
                       flags=tuple(flags), logs=tuple(logs), server_args_repr=server_args_repr(logs))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Fetching and caching
# --------------------------------------------------------------------------------------------


def cached(package: str, version: str, cache: Path) -> EngineFacts | None:
    """The facts of ``package==version`` if the cache holds them (no index asked)."""
    import json

    path = cache / "engine-facts" / f"{package}-{version}.json"
    try:
        d = json.loads(path.read_text())
        return EngineFacts.from_json(d) if d.get("schema") == SCHEMA else None
    except (OSError, ValueError, KeyError):
        return None


def facts_for(package: str, version: str, cache: Path, index_url: str) -> EngineFacts:
    """The facts of ``package==version``: from the cache, else from its wheel on ``index_url``."""
    path = cache / "engine-facts" / f"{package}-{version}.json"
    if (known := cached(package, version, cache)) is not None:
        return known
    wheel = download_wheel(package, version, cache / "engine-wheels", index_url)
    facts = read_wheel(wheel, package)
    atomic.write_json(path, facts.to_json())
    wheel.unlink()  # the facts are kept; the wheel (up to ~40 MB) is not
    return facts


def cached_history(cache: Path, package: str, version: str) -> list[EngineFacts]:
    """The facts already cached for releases of ``package`` older than ``version``."""
    import json

    out = []
    for p in sorted((cache / "engine-facts").glob(f"{package}-*.json")):
        try:
            d = json.loads(p.read_text())
            if d.get("schema") == SCHEMA and Version(d["version"]) < Version(version):
                out.append(EngineFacts.from_json(d))
        except (ValueError, KeyError, InvalidVersion):
            continue
    return out


def download_wheel(package: str, version: str, dest: Path, index_url: str) -> Path:
    """One wheel of ``package==version`` (any platform: the Python sources are the same), sha256-checked."""
    from envbuilder.index import IndexUnreachable, ProjectNotFound, SimpleIndex

    idx = SimpleIndex(index_url, dest.parent / "index")
    try:
        project = idx.project(package)
    except (IndexUnreachable, ProjectNotFound) as e:
        raise EngineFactsError(f"{package} {version}: {e}") from None
    try:
        want = Version(version)
    except InvalidVersion:
        raise EngineFactsError(f"{package}: {version!r} is not a version") from None
    files = [f for f in project.get("files", []) if f["filename"].endswith(".whl")
             and _wheel_version(f["filename"]) == want]  # fmt: skip
    if not files:
        raise EngineFactsError(f"{package} {version}: no wheel on the index")
    files.sort(key=lambda f: (not f["filename"].endswith("-none-any.whl"), f["filename"]))
    f = files[0]
    url = requests.compat.urljoin(f"{idx.url}/{package}/", f["url"])
    try:
        r = idx.session.get(url, timeout=120)
        r.raise_for_status()
    except requests.RequestException as e:
        raise EngineFactsError(f"{package} {version}: downloading {f['filename']} failed: {e}") from None
    want_sha = (f.get("hashes") or {}).get("sha256")
    if want_sha and hashlib.sha256(r.content).hexdigest() != want_sha:
        raise EngineFactsError(f"{f['filename']}: sha256 differs from the index's")
    out: Path = dest / str(f["filename"])
    dest.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(out, r.content)
    return out


def _wheel_version(filename: str) -> Version | None:
    try:
        return Version(filename.split("-")[1])
    except (InvalidVersion, IndexError):
        return None


# --------------------------------------------------------------------------------------------
# Using them: the flag check
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FlagProblem:
    flag: str
    kind: str  # "unknown" | "ambiguous" | "deprecated" | "bad-choice"
    message: str
    replacement: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "kind": self.kind, "message": self.message, "replacement": self.replacement}


@dataclass(frozen=True, kw_only=True)
class FlagCheck:
    problems: tuple[FlagProblem, ...] = ()  # the launch fails
    notes: tuple[FlagProblem, ...] = field(default_factory=tuple)  # accepted, but deprecated or abbreviated

    def to_json(self) -> dict[str, Any]:
        return {"problems": [p.to_json() for p in self.problems], "notes": [n.to_json() for n in self.notes]}


def check_flags(facts: EngineFacts, args: Sequence[str], history: Sequence[EngineFacts] = ()) -> FlagCheck:
    """The launch ``args`` against one release's parser, under argparse's prefix rules.

    ``history`` (earlier releases' facts) names the replacement of a flag that is gone: the ``new_flag`` of
    the deprecated alias it last was, and since when.
    """
    options = facts.options()
    problems: list[FlagProblem] = []
    notes: list[FlagProblem] = []
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        flag, _, inline = a.partition("=")
        value = inline or (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None)
        if flag in options:
            f = facts.flag(flag)
            if f is not None and f.deprecated:
                notes.append(FlagProblem(flag=flag, kind="deprecated", replacement=f.replacement,
                                         message=f"{flag} is deprecated in {facts.package} {facts.version}"
                                                 + (f"; use {f.replacement}" if f.replacement else "")))  # fmt: skip
            if f is not None and f.choices is not None and value is not None and value not in f.choices:
                problems.append(FlagProblem(flag=flag, kind="bad-choice",
                                            message=f"{flag} {value}: not one of {', '.join(f.choices)}"))  # fmt: skip
            continue
        prefixed = sorted(o for o in options if o.startswith(flag))
        if len(prefixed) == 1:
            notes.append(FlagProblem(flag=flag, kind="abbreviation", replacement=prefixed[0],
                                     message=f"{flag} is taken as an abbreviation of {prefixed[0]}"))  # fmt: skip
            continue
        repl, since, gone_after = _replacement(flag, history)
        why = (f"ambiguous (argparse: could match {', '.join(prefixed[:5])})" if prefixed else "unknown")
        if gone_after is not None:  # an earlier release accepted it
            msg = f"{flag} is gone from {facts.package} {facts.version}: {why}"
        elif prefixed:
            msg = f"{flag} is not a flag of {facts.package} {facts.version}: {why}"
        else:  # no release envbuilder has facts for ever accepted it
            close = difflib.get_close_matches(flag[2:], [o[2:] for o in options], n=1, cutoff=0.8)  # "--" alike
            msg = f"{flag} is not a flag of {facts.package} {facts.version}" + (
                f" (did you mean '--{close[0]}'?)" if close else "")
        if repl:
            msg += f"; use {repl}" + (f" (its replacement since {since}" + (
                f", last accepted in {gone_after})" if gone_after else ")") if since else "")
        problems.append(FlagProblem(flag=flag, kind="ambiguous" if prefixed else "unknown", message=msg,
                                    replacement=repl))  # fmt: skip
    return FlagCheck(problems=tuple(problems), notes=tuple(notes))


def _replacement(flag: str, history: Sequence[EngineFacts]) -> tuple[str | None, str | None, str | None]:
    """(replacement, the first release that named it, the last release that accepted ``flag``)."""
    repl = since = last = None
    for h in sorted(history, key=lambda x: Version(x.version)):
        f = h.flag(flag)
        if f is None:
            continue
        last = h.version
        if f.deprecated and f.replacement and repl != f.replacement:
            repl, since = f.replacement, h.version
    return repl, since, last


def flag_changes(old: EngineFacts, new: EngineFacts) -> list[str]:
    """What changed for a user's launch between two releases: flags removed, newly deprecated, added."""
    o, n = old.options(), new.options()
    out = [f"removed {x}" + (f" (use {r})" if (r := _replacement(x, [old])[0]) else "") for x in sorted(o - n)]
    for x in sorted(o & n):
        fo, fn = old.flag(x), new.flag(x)
        if fn is not None and fn.deprecated and not (fo is not None and fo.deprecated):
            out.append(f"deprecated {x}" + (f" (use {fn.replacement})" if fn.replacement else ""))
    out += [f"added {x}" for x in sorted(n - o)]
    return out


# --------------------------------------------------------------------------------------------
# Using them: the monitor's patterns for one release
# --------------------------------------------------------------------------------------------

_SLOW = {"load_weight_begin", "graph_capture_begin", "piecewise_begin"}
_NOT_MILESTONES = {"ready", "server_args"}


def engine_spec(base: Any, facts: EngineFacts) -> Any:
    """``base`` (an :class:`envbuilder.engines.EngineSpec`) with the start-up milestones and the ready line
    compiled from the release's own logging calls; the hand-kept ones stay for what the wheel does not
    print itself (uvicorn's "Uvicorn running on") and for a milestone the release has no call for."""
    from dataclasses import replace as dc_replace

    from envbuilder.engines import Milestone

    derived: list[Any] = []
    have: set[str] = set()
    for lf in facts.logs:
        if lf.milestone in _NOT_MILESTONES:
            continue
        derived.append(Milestone(name=lf.milestone, pattern=re.compile(lf.regex()), slow=lf.milestone in _SLOW,
                                 needles=lf.needles))  # fmt: skip
        have.add(lf.milestone)
    kept = [ms for ms in base.milestones if ms.name not in have]
    ready = tuple(re.compile(lf.regex()) for lf in facts.formats("ready")) or base.ready
    return dc_replace(base, milestones=tuple(derived + kept), ready=ready, options=frozenset(facts.options()))


# --------------------------------------------------------------------------------------------
# Replaying a recorded start-up in another release's formats (tests, tools/replay)
# --------------------------------------------------------------------------------------------

_KIND = re.compile(r"\b(decode|verify|prefill|extend)\b")


def _fill(lf: LogFormat, values: dict[str, str], capture: str) -> dict[str, str]:
    """``values`` plus what a target template needs that the source line did not print: the capture name
    (``target decode``) and the graph kind. The latter is the ``"cuda": "CUDA graph"`` entry of the
    release's own ``graph_backend`` table (0.5.23 cuda_graph_setup.py), which is a dict, not a logging call."""
    out = dict(values)
    used: set[str] = set()
    for i, p in enumerate(lf.parts):
        if isinstance(p, Field):
            name = field_name(lf.parts[i - 1] if i else "", p, used)
            used.add(name)
            if name in out:
                continue
            if "capture_name" in p.expr:
                out[name] = capture
            elif "graph_backend" in p.expr:
                out[name] = "CUDA graph"
            elif "cache_name" in p.expr:  # 0.5.17+: `… if self.allocation_label is not None else "KV Cache"`
                out[name] = "KV Cache"
    return out


def translate_line(line: str, src: EngineFacts, dst: EngineFacts) -> str | None:
    """``line`` (printed by release ``src``) as release ``dst`` prints the same event; None when ``dst`` has
    no logging call for it (the line is dropped), the line itself when it is not a monitored one."""
    from envbuilder.engines import milestone_name

    for lf in src.logs:
        m = lf.search(line)
        if m is None or lf.milestone == "server_args":
            continue
        prefix = line[: m.start()]
        values = {k: v for k, v in m.groupdict().items() if v is not None}
        want_name = milestone_name(lf.milestone, line)
        named = any(isinstance(p, Field) and "capture_name" in p.expr for f in dst.formats("graph_capture_begin")
                    for p in f.parts)  # fmt: skip
        if want_name.startswith("draft_prefill_") and not named:
            return None  # ≤ 0.5.13 captures no draft prefill graph
        target_ms = want_name.replace("draft_", "").replace("prefill_", "")
        if want_name == "prefill_" + target_ms and dst.formats(target_ms.replace("graph_capture_", "piecewise_")):
            target_ms = want_name = target_ms.replace("graph_capture_", "piecewise_")  # ≤ 0.5.13's prefill graph
        kind_m = _KIND.search(line[: line.find("graph")] if "graph" in line else "")
        kind = kind_m.group(1) if kind_m else "decode"
        for k in ("device", "capture_name"):  # re-derived below: a lazy group may have split "target verify"
            values.pop(k, None)
        if want_name.startswith("piecewise_") and not dst.formats(want_name):  # 0.5.14+: the target's prefill graph
            target_ms, kind = want_name.replace("piecewise_", "graph_capture_"), "prefill"
            want_name = "prefill_" + target_ms
        role = "draft" if want_name.startswith("draft_") else "target"
        cands = sorted(dst.formats(target_ms), key=lambda f: ("/npu/" in f.source or "hardware_backend" in f.source,
                                                              -len(f.parts), f.source))  # fmt: skip
        texts = [t for c in cands if milestone_name(target_ms, t := c.render(_fill(c, values, f"{role} {kind}")))
                 == want_name]  # fmt: skip
        best = [t for t in texts if kind in t] or [t for t in texts if not _KIND.search(t.split("graph")[0])]
        return prefix + best[0] if best else None
    return line
