"""What one stage hands the next, typed: the resolved lock (resolve), the built environment (build).

A stage stores its artifact with its result (``StageResult.artifact``); later stages read it from there
(``CellResult.lock()``, ``CellResult.environment()``), never from the free-form ``details``. JSON exists
only at the storage boundary: :func:`artifact_to_json` / :func:`artifact_from_json`, used by
:mod:`envbuilder.results`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, kw_only=True)
class ResolvedLock:
    """``resolve``'s output: the cell's pylock.toml and what it pins."""

    path: str
    sha256: str
    packages: Mapping[str, str] = field(default_factory=dict)  # name -> version
    index_args: tuple[str, ...] = ()  # the uv index flags it was resolved with (a venv installs from the same)
    cuda: str | None = None  # the CUDA the lock's wheels carry

    def to_json(self) -> dict[str, Any]:
        return {"kind": "lock", "path": self.path, "sha256": self.sha256, "packages": dict(self.packages),
                "index_args": list(self.index_args), "cuda": self.cuda}  # fmt: skip

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ResolvedLock:
        return cls(path=str(d.get("path", "")), sha256=str(d.get("sha256", "")),
                   packages={str(k): str(v) for k, v in dict(d.get("packages") or {}).items()},
                   index_args=tuple(str(a) for a in d.get("index_args") or ()),
                   cuda=None if d.get("cuda") is None else str(d["cuda"]))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class BuiltEnvironment:
    """``build``'s output: where the cell's Python runs — a venv on this machine or a Docker image."""

    kind: Literal["venv", "image"]
    python: str  # the venv's interpreter, or the image's ``python``
    venv: str | None = None
    image: str | None = None  # the image's tag
    image_id: str | None = None

    @property
    def on_this_machine(self) -> bool:
        """A venv here (its interpreter runs directly), as opposed to an image."""
        return self.kind == "venv"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "python": self.python, "venv": self.venv, "image": self.image,
                "image_id": self.image_id}  # fmt: skip

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BuiltEnvironment:
        kind: Literal["venv", "image"] = "image" if d.get("kind") in ("image", "docker") else "venv"
        opt = {k: None if d.get(k) is None else str(d[k]) for k in ("venv", "image", "image_id")}
        return cls(kind=kind, python=str(d.get("python") or "python"), **opt)


Artifact = ResolvedLock | BuiltEnvironment


def artifact_to_json(a: Artifact) -> dict[str, Any]:
    return a.to_json()


def artifact_from_json(d: Mapping[str, Any]) -> Artifact:
    if d.get("kind") == "lock":
        return ResolvedLock.from_json(d)
    return BuiltEnvironment.from_json(d)


def from_v1_details(stage: str, details: Mapping[str, Any]) -> Artifact | None:
    """The artifact a version-1 result file kept in its stage's ``details`` (read back for old files only)."""
    if stage == "resolve" and details.get("lock_sha256"):
        return ResolvedLock.from_json({"path": details.get("lock", ""), "sha256": details["lock_sha256"],
                                       "packages": details.get("packages"), "index_args": details.get("index_args"),
                                       "cuda": details.get("cuda")})  # fmt: skip
    if stage == "build" and details.get("runner") in ("venv", "docker"):
        kind = "image" if details["runner"] == "docker" else "venv"
        return BuiltEnvironment.from_json({**details, "kind": kind})
    return None


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU of the runner, as ``envbuilder doctor`` found it."""

    index: int | None = None
    name: str | None = None
    memory_mib: int | None = None
    compute_capability: str | None = None  # "8.6"


@dataclass(frozen=True, kw_only=True)
class DriverFacts:
    kernel_module: str | None = None  # the loaded kernel module's version
    userspace: str | None = None  # libcuda / NVML's version
    cuda_supported: str | None = None  # the newest CUDA the driver supports


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """The runner's facts the stages decide on (``envbuilder doctor`` or ``--host-facts FILE``); ``document`` is
    the whole doctor document, stored with each result (``env.host``)."""

    gpus: tuple[Gpu, ...] = ()
    driver: DriverFacts = DriverFacts()
    glibc: str | None = None
    document: Mapping[str, Any] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        """Whether any facts were collected or given (an empty document: none)."""
        return bool(self.document)

    def key(self) -> dict[str, Any]:
        """What the stages' cache keys cover of the facts (not the timestamp or the hostname)."""
        return {"gpus": [vars(g) for g in self.gpus], "driver": vars(self.driver), "glibc": self.glibc}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HostFacts:
        def opt(v: Any) -> str | None:
            return None if v is None else str(v)

        gpus = tuple(Gpu(index=g.get("index"), name=opt(g.get("name")),
                         memory_mib=None if g.get("memory_mib") is None else int(g["memory_mib"]),
                         compute_capability=opt(g.get("compute_capability")))
                     for g in d.get("gpus") or [] if isinstance(g, Mapping))  # fmt: skip
        drv = d.get("driver") or {}
        return cls(gpus=gpus, driver=DriverFacts(kernel_module=opt(drv.get("kernel_module")),
                                                 userspace=opt(drv.get("userspace")),
                                                 cuda_supported=opt(drv.get("cuda_supported"))),
                   glibc=opt(d.get("glibc")), document=dict(d))  # fmt: skip
