"""Where a cell runs, behind one protocol (:class:`Backend`): run Python in it, launch a server in it.

``local`` runs on this machine (a built venv, or the interpreter a custom ``[server] command`` names),
``docker`` in the cell's image, ``external`` is a server that already runs (only HTTP). How the environment
is built is the build stage's registry (:data:`envbuilder.build.BUILDERS`); :func:`for_environment` is the
registry from a built environment to its backend: no other code branches on where a cell runs.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from envbuilder import dockerapi
from envbuilder.artifacts import BuiltEnvironment
from envbuilder.build import clean_env
from envbuilder.runners import ExternalRunner, LocalRunner, ServerHandle
from envbuilder.runners.docker import DockerRunner


class Backend(Protocol):
    """Where a cell runs."""

    @property
    def name(self) -> str:
        """``local``, ``docker`` or ``external`` (recorded with the smoke stage)."""
        ...

    @property
    def logs(self) -> bool:
        """Whether a server started here has a log to watch (an external one answers over HTTP only)."""
        ...

    def run_python(self, argv: list[str], timeout_s: float, *, mounts: Sequence[Path] = (),
                   extra_env: Mapping[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
        """``python <argv>`` in the environment, no GPU: (exit status, output). ``mounts``: host folders the command
        reads (visible read-only at the same path in a container); ``extra_env``: more variables."""
        ...

    def server_view(self, host: str, model: str, env: Mapping[str, str]) -> tuple[str, str, str, dict[str, str]]:
        """How a server started here sees things: (its python, the host it binds, the model's path, its env)."""
        ...

    def serve(self, argv: list[str], *, env: Mapping[str, str], base_url: str,
              name: str) -> AbstractContextManager[ServerHandle]:  # fmt: skip
        """Start a server (``argv``) that answers at ``base_url``; stopped when the context ends."""
        ...


@dataclass(frozen=True, kw_only=True)
class LocalBackend:
    """This machine: a venv's interpreter (or the one a custom command names)."""

    python: str
    run_dir: Path | None = None  # pid files of the servers started here (``gc`` stops what a killed run left)
    venv: str | None = None
    name: str = "local"
    logs: bool = True

    def server_view(self, host: str, model: str, env: Mapping[str, str]) -> tuple[str, str, str, dict[str, str]]:
        return self.python, host, model, {**os.environ, **env}

    def run_python(self, argv: list[str], timeout_s: float, *, mounts: Sequence[Path] = (),
                   extra_env: Mapping[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
        env = {**(clean_env(Path(self.venv)) if self.venv else os.environ), **(extra_env or {})}
        try:
            p = subprocess.run([self.python, *argv], capture_output=True, text=True, timeout=timeout_s, check=False,
                               env=env)  # fmt: skip
        except subprocess.TimeoutExpired:
            return 124, f"timed out after {timeout_s:.0f} s"
        return p.returncode, p.stdout + p.stderr

    def serve(self, argv: list[str], *, env: Mapping[str, str], base_url: str,
              name: str) -> AbstractContextManager[ServerHandle]:  # fmt: skip
        run_dir = self.run_dir or Path(tempfile.gettempdir()) / "envbuilder-run"
        return LocalRunner(run_dir).start(argv, env=env, base_url=base_url, name=name)


@dataclass(frozen=True, kw_only=True)
class DockerBackend:
    """The cell's image: Python and the server run in containers (GPUs passed through for a CUDA cell)."""

    image: str
    python: str = "python"
    labels: Mapping[str, str] = field(default_factory=dict)
    model_dir: str | None = None  # a local model folder, mounted at /model
    gpus: int | None = -1  # GPUs passed through (-1: all; None: none, a CPU cell)
    driver: str = "host"  # the cell's driver axis (a baked userspace gets the device nodes only)
    name: str = "docker"
    logs: bool = True

    def server_view(self, host: str, model: str, env: Mapping[str, str]) -> tuple[str, str, str, dict[str, str]]:
        # inside the container: bind every interface (the port is published), a local model is mounted at /model
        return "python3", "0.0.0.0", "/model" if self.model_dir else model, dict(env)

    def run_python(self, argv: list[str], timeout_s: float, *, mounts: Sequence[Path] = (),
                   extra_env: Mapping[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
        client = dockerapi.connect(timeout_s=int(timeout_s) + 30)
        container = None
        try:
            container = client.containers.create(self.image, [self.python, *argv],
                                                 labels={"envbuilder.cell": "import-smoke"},
                                                 environment=dict(extra_env or {}),
                                                 volumes={str(m): {"bind": str(m), "mode": "ro"} for m in mounts})  # fmt: skip
            container.start()  # created first: a start Docker refuses still leaves a handle to remove
            try:
                code = int(container.wait(timeout=timeout_s).get("StatusCode", -1))
            except Exception:
                return 124, f"timed out after {timeout_s:.0f} s"
            return code, container.logs().decode(errors="replace")
        except dockerapi.sdk_errors() as e:
            raise dockerapi.failure(e) from None
        finally:
            if container is not None:
                container.remove(force=True)
            client.close()

    def serve(self, argv: list[str], *, env: Mapping[str, str], base_url: str,
              name: str) -> AbstractContextManager[ServerHandle]:  # fmt: skip
        return DockerRunner(labels=dict(self.labels)).start(argv, env=env, base_url=base_url, name=name,
                                                            image=self.image, model_dir=self.model_dir,
                                                            gpus=self.gpus, driver=self.driver)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ExternalBackend:
    """A server that already runs (``--base-url``, ``[server] base_url``): nothing to start, no Python to run."""

    name: str = "external"
    logs: bool = False

    def server_view(self, host: str, model: str, env: Mapping[str, str]) -> tuple[str, str, str, dict[str, str]]:
        return "", host, model, {**os.environ, **env}

    def run_python(self, argv: list[str], timeout_s: float, *, mounts: Sequence[Path] = (),
                   extra_env: Mapping[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
        return 127, "an external server: no Python environment to run in"

    def serve(self, argv: list[str], *, env: Mapping[str, str], base_url: str,
              name: str) -> AbstractContextManager[ServerHandle]:  # fmt: skip
        return ExternalRunner().start([], env=env, base_url=base_url, name=name)


def for_environment(env: BuiltEnvironment, *, run_dir: Path | None = None, labels: Mapping[str, str] | None = None,
                    model_dir: str | None = None, gpus: int | None = -1, driver: str = "host") -> Backend:  # fmt: skip
    """The backend a built environment runs in (the registry from :attr:`BuiltEnvironment.kind`)."""
    makers: dict[str, Callable[[], Backend]] = {
        "venv": lambda: LocalBackend(python=env.python, venv=env.venv, run_dir=run_dir),
        "image": lambda: DockerBackend(image=env.image or "", python=env.python, labels=labels or {},
                                       model_dir=model_dir, gpus=gpus, driver=driver),
    }
    backend: Backend = makers[env.kind]()
    return backend
