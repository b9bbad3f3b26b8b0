"""nox sessions: `matrix` (the main job), `tests`, `lint`, `bench`. All use the uv backend."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# llama.cpp's native build segfaults at the first token on these CPUs; the portable build works.
CPU_ENGINE_ENV = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}


@nox.session
def matrix(session: nox.Session) -> None:
    """Every stage for every cell of ./matrix.toml, then the reports. `nox -s matrix -- ARGS` passes ARGS on."""
    session.install(".")
    session.run("envbuilder", "run", *session.posargs, success_codes=[0, 1])  # prints the table once
    # every format written; says where (the table is not printed a second time)
    session.run("envbuilder", "report", "--all", "--quiet", success_codes=[0, 1])


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite: real uv, real PyPI, real Docker, real llama.cpp server."""
    session.env.update(CPU_ENGINE_ENV)
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


FAST = "not slow and not network and not docker and not engine"


@nox.session
def coverage(session: nox.Session) -> None:
    """Line coverage of envbuilder across subprocesses (the CLI runs in them); the fast tier unless ARGS say else."""
    session.env.update(CPU_ENGINE_ENV)
    session.install("-e", ".[test]")
    session.run("coverage", "erase")
    session.run("coverage", "run", "-m", "pytest", *(session.posargs or ["-m", FAST]))
    session.run("coverage", "combine", "-q")
    session.run("coverage", "report", "--skip-covered", "--sort=cover")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", ".")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (speed goals are measured here, never asserted in tests)."""
    session.env.update(CPU_ENGINE_ENV)
    session.install("-e", ".[test]")
    session.run("python", "-m", "benchmarks", *session.posargs)
