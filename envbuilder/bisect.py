"""bisect: name the package(s) whose newer version breaks a cell.

The as-of lock passes a test (the import smoke by default) and today's lock fails it. Each trial moves a
subset of the drifted packages to today's versions: uv re-resolves with those pins and the as-of versions
as preferences (an unresolvable subset is skipped, never counted as bad), the result is synced into a
throwaway venv and the test runs there. Delta debugging (ddmin) narrows the drift to a minimal culprit
set; the fix constraint (``kernels<0.15``) is then verified on today's resolution, and bisection repeats
while today's lock still fails with it (independent breakages).

Offline (``find_links``) it resolves and installs from wheel folders only; ``provided`` names packages the
interpreter already has (a GPU box's torch): they are kept out of resolution and seen by every trial.
"""

from __future__ import annotations

import enum
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder import build, importcheck, probe, wheelhouse
from envbuilder.errors import StageFailure
from envbuilder.matrix import Cell, Matrix
from envbuilder.resolve import build_request
from envbuilder.results import Reason, Status
from envbuilder.uvbin import uv_bin


class Outcome(enum.StrEnum):
    GOOD = "good"
    BAD = "bad"
    UNRESOLVED = "unresolved"  # the subset cannot be resolved or installed: skipped, not bad


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One environment tried: which packages were pinned to today's versions and what the test said."""

    pinned: tuple[str, ...]
    outcome: Outcome
    message: str
    constraints: tuple[str, ...] = ()  # fix constraints added to this trial
    today: bool = False  # today's resolution (preferring today's versions) rather than the as-of one
    moved: dict[str, str] = field(default_factory=dict)  # every package not at its as-of version: name -> version
    seconds: float = 0.0
    log: str = ""

    def describe(self) -> str:
        if self.today:
            return "today's resolution" + (f" with {', '.join(self.constraints)}" if self.constraints else "")
        what = ", ".join(self.pinned) if len(self.pinned) <= 3 else f"{len(self.pinned)} packages"
        base = f"as-of + today's {what}" if self.pinned else "the as-of lock"
        return base + (f" ({', '.join(self.constraints)})" if self.constraints else "")

    def to_json(self) -> dict[str, Any]:
        return {"pinned": list(self.pinned), "constraints": list(self.constraints), "today": self.today,
                "outcome": self.outcome.value, "message": self.message, "moved": self.moved,
                "seconds": round(self.seconds, 2), "log": self.log}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Culprit:
    name: str
    good: str
    bad: str

    @property
    def constraint(self) -> str:
        return fix_constraint(self.name, self.good, self.bad)


@dataclass(frozen=True, kw_only=True)
class Bisection:
    """What ``envbuilder bisect`` found; ``verdict`` is one sentence."""

    cell: str
    test: str
    drifted: list[str]
    culprits: list[Culprit]
    verdict: str
    fix: list[str]
    verified: bool | None
    trials: list[Trial]
    seconds: float

    @property
    def decided(self) -> bool:
        """Either culprits were named, or today's lock does not fail at all."""
        return bool(self.culprits) or not any(t.outcome is Outcome.BAD for t in self.trials)

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "test": self.test, "verdict": self.verdict, "drifted": self.drifted,
                "culprits": [{"name": c.name, "good": c.good, "bad": c.bad, "constraint": c.constraint}
                             for c in self.culprits],
                "fix": self.fix, "verified": self.verified, "seconds": round(self.seconds, 1),
                "trials": [t.to_json() for t in self.trials]}  # fmt: skip


def fix_constraint(name: str, good: str, bad: str) -> str:
    """The widest constraint that keeps ``good``'s release series and excludes ``bad``'s:
    kernels 0.14.0 -> 0.17.2 gives ``kernels<0.15``; 1.0 -> 2.0 gives ``<2``; 4.0.0b12 -> 4.0.0b15 ``<4.0.0b15``."""
    try:
        g, b = Version(good), Version(bad)
    except InvalidVersion:
        return f"{name}!={bad}"
    width = max(len(g.release), len(b.release))
    gr, br = g.release + (0,) * (width - len(g.release)), b.release + (0,) * (width - len(b.release))
    for i, (x, y) in enumerate(zip(gr, br, strict=True)):
        if x != y:
            bound = ".".join(str(v) for v in (*gr[:i], x + 1)) if x < y else bad
            return f"{name}<{bound}"
    return f"{name}<{bad}"


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """Where trials resolve, install and run."""

    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    python_version: str  # the cell's: what uv resolves for
    platform: str
    index_args: tuple[str, ...]
    interpreter: str  # what venvs are made from
    workdir: Path
    modules: tuple[str, ...] = ()  # the default test: import these
    test_command: str | None = None  # or run this (shell) in the venv; exit 0 = good
    provided: frozenset[str] = frozenset()
    provider_paths: tuple[str, ...] = ()
    timeout_s: float = 900

    def describe_test(self) -> str:
        return self.test_command or "import " + ", ".join(self.modules)

    def resolve(self, pins: Mapping[str, str], prefer: Mapping[str, str], extra: Sequence[str],
                tmp: Path) -> tuple[dict[str, str] | None, str]:  # fmt: skip
        """uv's resolution with ``pins`` exact and ``prefer`` as preferences; None when unsatisfiable."""
        (tmp / "requirements.in").write_text("\n".join(self.requirements) + "\n")
        cons = [*self.constraints, *(f"{n}=={v}" for n, v in sorted(pins.items())), *extra]
        (tmp / "constraints.txt").write_text("\n".join(cons) + "\n")
        out = tmp / "requirements.txt"  # an existing output file is uv's set of preferred versions
        out.write_text("".join(f"{n}=={v}\n" for n, v in sorted(prefer.items()) if n not in self.provided))
        argv = [uv_bin(), "pip", "compile", str(tmp / "requirements.in"), "-c", str(tmp / "constraints.txt"),
                "-o", str(out), "--python-version", self.python_version, "--python-platform", self.platform,
                "--no-header", "--no-annotate", "--no-python-downloads", "--quiet", *self.index_args]  # fmt: skip
        if self.provided:  # a never-true marker removes a requirement: the interpreter supplies it
            (tmp / "provided.txt").write_text("".join(f'{n}; python_version < "0"\n' for n in sorted(self.provided)))
            argv += ["--override", str(tmp / "provided.txt")]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=build.clean_env())
        if p.returncode != 0:
            return None, _last_line(p.stderr)
        return read_pins(out.read_text()), ""

    def run_test(self, versions: Mapping[str, str], tmp: Path) -> tuple[Outcome, str, str]:
        """Install ``versions`` into a fresh venv under ``tmp`` and run the test there."""
        venv = tmp / "venv"
        reqs = tmp / "install.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items())))
        with (tmp / "install.log").open("w") as log:
            if not build.create_venv(self.interpreter, venv, log, self.provider_paths):
                raise StageFailure(Status.ERROR, Reason.NOT_APPLICABLE, f"cannot make a venv with {self.interpreter}")
            code = build.sync_venv(venv, reqs, self.index_args, log, hashes=False, timeout_s=self.timeout_s)
        if code != 0:
            return Outcome.UNRESOLVED, "install failed: " + _last_line((tmp / "install.log").read_text()), ""
        env = build.clean_env(venv)
        try:
            if self.test_command:
                p = subprocess.run(["bash", "-c", self.test_command], capture_output=True, text=True, env=env,
                                   timeout=self.timeout_s, check=False, cwd=tmp)  # fmt: skip
                text = p.stdout + p.stderr
                return (Outcome.GOOD if p.returncode == 0 else Outcome.BAD), f"exit {p.returncode}: {_last_line(text)}", text
            p = subprocess.run([str(build.venv_python(venv)), "-c", importcheck.PROBE, *self.modules],
                               capture_output=True, text=True, env=env, timeout=self.timeout_s, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Outcome.BAD, f"the test did not finish in {self.timeout_s:.0f} s", ""
        text = p.stdout + p.stderr
        marked = probe.read_marked(p.stdout)
        if marked is None:
            return Outcome.BAD, f"the import probe did not run (exit {p.returncode}): {_last_line(text)}", text
        for name, info in marked["modules"].items():
            if not info["ok"]:
                status, _, msg = importcheck.classify_import(name, info)
                if status is Status.FAIL:
                    return Outcome.BAD, msg, str(info.get("traceback", ""))
        return Outcome.GOOD, "imports " + ", ".join(self.modules), ""


def sandbox_for(m: Matrix, cell: Cell, workdir: Path, as_of: Mapping[str, str], *, python: str | None = None,
                find_links: Sequence[str] | None = None, provided: Path | None = None,
                test_command: str | None = None) -> Sandbox:  # fmt: skip
    """The cell's trials' sandbox: its requirements and platform, the index (or offline wheel folders), the
    interpreter (with what it already provides, from a ``pip freeze``), the import test or ``test_command``."""
    req = build_request(m, cell, None)
    freeze = wheelhouse.read_freeze(provided) if provided else {}
    interpreter, provider_paths = build.venv_base(python or cell.python, provides=bool(freeze))
    return Sandbox(
        requirements=req.requirements, constraints=req.constraints, python_version=cell.python,
        platform=req.platform, index_args=tuple(build.offline_index_args(find_links) if find_links
                                                else req.index_args()),
        interpreter=interpreter, workdir=workdir, test_command=test_command,
        modules=tuple(importcheck.modules_for(m.server.engine, dict(as_of), list(cell.requirements()))),
        provided=frozenset(freeze), provider_paths=tuple(provider_paths),
    )  # fmt: skip


def drifted(as_of: Mapping[str, str], fresh: Mapping[str, str], provided: Collection[str] = ()) -> list[str]:
    """Packages in both locks at different versions, less the provided ones (new or dropped packages move with
    their parents)."""
    return sorted(n for n in as_of if n in fresh and as_of[n] != fresh[n] and n not in provided)


def read_pins(text: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file (uv's compile output) -> {normalised name: version}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            out[canonicalize_name(name.split("[", 1)[0].strip())] = version.split(";", 1)[0].strip()
    return out


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:500] if lines else "no output"


class Bisector:
    """Runs trials (cached, ``jobs`` at once) and the ddmin search over them."""

    def __init__(self, box: Sandbox, as_of: Mapping[str, str], fresh: Mapping[str, str], *, jobs: int = 2,
                 on_trial: Callable[[Trial], None] | None = None) -> None:  # fmt: skip
        self.box = box
        self.as_of = {k: v for k, v in as_of.items() if k not in box.provided}
        self.fresh = {k: v for k, v in fresh.items() if k not in box.provided}
        self.jobs = max(1, jobs)
        self.on_trial = on_trial
        self.trials: list[Trial] = []
        self._cache: dict[tuple[frozenset[str], tuple[str, ...], bool], Trial] = {}
        self._lock = threading.Lock()

    @property
    def drifted(self) -> list[str]:
        return drifted(self.as_of, self.fresh, self.box.provided)

    def trial(self, pinned: Iterable[str], extra: Sequence[str] = (), *, prefer_fresh: bool = False) -> Trial:
        """Pin ``pinned`` to today's versions, prefer the as-of versions (or today's) for the rest, test."""
        key = (frozenset(pinned), tuple(extra), prefer_fresh)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        names = tuple(sorted(key[0]))
        start = time.monotonic()
        self.box.workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="trial-", dir=self.box.workdir) as t:
            tmp = Path(t)
            prefer = self.fresh if prefer_fresh else self.as_of
            versions, why = self.box.resolve({n: self.fresh[n] for n in names}, prefer, extra, tmp)
            if versions is None:
                result = Trial(pinned=names, outcome=Outcome.UNRESOLVED, message=f"does not resolve: {why}",
                               constraints=tuple(extra), today=prefer_fresh, seconds=time.monotonic() - start)  # fmt: skip
            else:
                outcome, message, log = self.box.run_test(versions, tmp)
                moved = {n: v for n, v in sorted(versions.items()) if self.as_of.get(n) != v}
                venv = str(tmp / "venv")  # trial folders are deleted: keep paths readable
                result = Trial(pinned=names, outcome=outcome, message=message.replace(venv, "<venv>"), moved=moved,
                               constraints=tuple(extra), today=prefer_fresh, seconds=time.monotonic() - start,
                               log=log[-3000:].replace(venv, "<venv>"))  # fmt: skip
            shutil.rmtree(tmp / "venv", ignore_errors=True)
        with self._lock:
            self._cache[key] = result
            self.trials.append(result)
        if self.on_trial is not None:
            self.on_trial(result)
        return result

    def _map(self, subsets: list[list[str]], extra: Sequence[str]) -> list[Trial]:
        if self.jobs == 1 or len(subsets) == 1:
            return [self.trial(s, extra) for s in subsets]
        with ThreadPoolExecutor(max_workers=min(self.jobs, len(subsets)), thread_name_prefix="eb-bisect") as pool:
            return list(pool.map(lambda s: self.trial(s, extra), subsets))

    def ddmin(self, candidates: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
        """A 1-minimal subset of ``candidates`` whose move to today's versions fails the test (Zeller's ddmin)."""
        cands = list(candidates)
        n = 2
        while len(cands) >= 2:
            size = -(-len(cands) // n)
            chunks = [cands[i : i + size] for i in range(0, len(cands), size)]
            results = self._map(chunks, extra)
            bad = next((c for c, r in zip(chunks, results, strict=True) if r.outcome is Outcome.BAD), None)
            if bad is not None:
                cands, n = bad, 2
                continue
            if len(chunks) > 2:
                complements = [[x for x in cands if x not in set(c)] for c in chunks]
                results = self._map(complements, extra)
                bad = next((c for c, r in zip(complements, results, strict=True) if r.outcome is Outcome.BAD), None)
                if bad is not None:
                    cands, n = bad, max(n - 1, 2)
                    continue
            if n >= len(cands):
                break
            n = min(len(cands), 2 * n)
        return cands


def bisect(cell_id: str, box: Sandbox, as_of: Mapping[str, str], fresh: Mapping[str, str], *, jobs: int = 2,
           rounds: int = 3, on_trial: Callable[[Trial], None] | None = None) -> Bisection:  # fmt: skip
    """Find the minimal set(s) of packages whose move from ``as_of`` to ``fresh`` versions fails the test."""
    start = time.monotonic()
    b = Bisector(box, as_of, fresh, jobs=jobs, on_trial=on_trial)
    drifted = b.drifted
    test = box.describe_test()

    def done(verdict: str, culprits: list[Culprit], fix: list[str], verified: bool | None) -> Bisection:
        return Bisection(cell=cell_id, test=test, drifted=drifted, culprits=culprits, verdict=verdict, fix=fix,
                         verified=verified, trials=list(b.trials), seconds=time.monotonic() - start)  # fmt: skip

    good, bad = b._map([[], drifted], ())
    if good.outcome is not Outcome.GOOD:
        raise StageFailure(Status.ERROR if good.outcome is Outcome.UNRESOLVED else Status.FAIL, Reason.NOT_APPLICABLE,
                           f"the as-of lock does not pass `{test}` here ({good.outcome}: {good.message}): "
                           f"nothing to bisect against", {"bisection": done("", [], [], None).to_json()})  # fmt: skip
    if bad.outcome is Outcome.GOOD:
        return done(f"today's lock passes `{test}` too: nothing broke ({len(drifted)} packages drifted)", [], [], None)
    if bad.outcome is Outcome.UNRESOLVED:
        raise StageFailure(Status.ERROR, Reason.UNSATISFIABLE,
                           f"today's versions do not resolve or install here: {bad.message}",
                           {"bisection": done("", [], [], None).to_json()})  # fmt: skip
    culprits: list[Culprit] = []
    fix: list[str] = []
    remaining = list(drifted)
    verified: bool | None = None
    failure = bad.message
    for _ in range(rounds):
        found = b.ddmin(remaining, tuple(fix))
        alone = b.trial(found, tuple(fix))
        if alone.outcome is not Outcome.BAD:  # ddmin's answer must fail on its own; otherwise stop honestly
            break
        failure = alone.message
        new = [Culprit(name=n, good=b.as_of[n], bad=b.fresh[n]) for n in found]
        culprits += new
        fix += [c.constraint for c in new]
        remaining = [n for n in remaining if n not in set(found)]
        check = b.trial([], tuple(fix), prefer_fresh=True)  # today's resolution with the fix
        verified = check.outcome is Outcome.GOOD
        if verified or not remaining or check.outcome is Outcome.UNRESOLVED:
            break
        again = b.trial(remaining, tuple(fix))
        if again.outcome is not Outcome.BAD:
            break
    if not culprits:
        return done(f"today's lock fails `{test}` ({failure}) but no subset of the drift fails alone", [], [], None)
    moves = "; ".join(f"{c.name} {c.good} → {c.bad}" for c in culprits)
    verb = "breaks" if len(culprits) == 1 else "break"
    return done(f"{moves} {verb} `{test}`: {failure}", culprits, fix, verified)

