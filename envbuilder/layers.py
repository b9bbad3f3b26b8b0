"""Split a cell's lock into image layers, most shared first, so cells that pin the same heavy wheels share them.

* ``stack``: torch, triton and the ``nvidia-*`` CUDA libraries torch loads — the bulk of an SGLang
  environment (several GB installed) and the part that changes least between engine releases. It is built
  into a shared image tagged by the exact pins and hashes (``envbuilder/stack-py3.11:<key>``), once, and
  every cell with the same stack and base builds ``FROM`` it.
* ``heavy``: every other package whose wheel is at least :data:`HEAVY_BYTES` (sizes from the lock's wheel
  entries) and is not a kernel package (pyarrow, scipy, …): one layer each, in name order, shared through the
  builder's cache by cells with the same stack up to that package.
* ``kernels``: the engine's kernel packages (flashinfer, sgl-kernel, cutlass-dsl, flash-attn, xgrammar), which move with
  nearly every engine release: their own layer, after the ones that change less.
* the rest: the whole lock, synced last (what the layers above installed is already there).

Docker shares a layer only when every layer below it is the same, hence this order: what changes least first.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from envbuilder.lock import Lock, LockedPackage

HEAVY_BYTES = 20_000_000
# torch's own stack: what torch needs at import (its CUDA libraries, triton); NVIDIA's CUTLASS DSL follows
# the kernel packages (flash-attn-4, sglang-kernel), not torch, so it is not part of the shared stack
STACK = re.compile(r"^(torch|triton|pytorch-triton|nvidia-(?!cutlass)[a-z0-9-]+)$")
KERNELS = re.compile(r"^(flashinfer(-[a-z]+)?|sgl-kernel|sglang-kernel|nvidia-cutlass-dsl.*|flash-attn.*|xgrammar)$")


@dataclass(frozen=True, kw_only=True)
class Layer:
    """A set of locked packages installed in one image layer."""

    name: str
    packages: tuple[LockedPackage, ...]

    @property
    def requirements(self) -> str:
        """Pinned, hash-checked requirement lines (``uv pip install --require-hashes --no-deps``)."""
        lines = []
        for p in self.packages:
            hashes = [w.sha256 for w in p.wheels if w.sha256] + ([p.sdist.sha256] if p.sdist and p.sdist.sha256 else [])
            lines.append(f"{p.name}=={p.version}" + "".join(f" --hash=sha256:{h}" for h in sorted(hashes)))
        return "".join(ln + "\n" for ln in lines)

    @property
    def key(self) -> str:
        """Content key: the exact pins and hashes (nothing else: two locks with the same stack share it)."""
        return hashlib.sha256(self.requirements.encode()).hexdigest()[:12]

    @property
    def wheel_bytes(self) -> int:
        return sum(wheel_bytes(p) for p in self.packages)


def wheel_bytes(p: LockedPackage) -> int:
    """The size of a package's largest locked wheel (a lock for one platform has one), 0 when unknown."""
    return max((w.size or 0 for w in p.wheels), default=0)


@dataclass(frozen=True, kw_only=True)
class Split:
    """A lock's layers, most shared first (the rest of the lock is synced after them)."""

    stack: Layer
    heavy: Layer
    kernels: Layer


def split(lk: Lock, heavy_bytes: int = HEAVY_BYTES) -> Split:
    """The layers of a lock; packages with only an sdist stay with the rest (they are built, not downloaded)."""
    stack: list[LockedPackage] = []
    heavy: list[LockedPackage] = []
    kernels: list[LockedPackage] = []
    for p in sorted(lk.packages.values(), key=lambda p: p.name):
        if not p.wheels:
            continue
        if STACK.match(p.name):
            stack.append(p)
        elif KERNELS.match(p.name):
            kernels.append(p)
        elif wheel_bytes(p) >= heavy_bytes:
            heavy.append(p)
    if not any(p.name == "torch" for p in stack):  # no torch: nothing of torch's stack to share
        heavy = sorted(stack + heavy, key=lambda p: p.name)
        stack = []
    return Split(stack=Layer(name="stack", packages=tuple(stack)), heavy=Layer(name="heavy", packages=tuple(heavy)),
                 kernels=Layer(name="kernels", packages=tuple(kernels)))  # fmt: skip
