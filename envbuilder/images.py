"""Docker images per cell: a jinja2 Dockerfile rendered into ``<workdir>/images/<cell-id>/`` and built with the
Docker SDK for Python, tagged by content (``envbuilder/<cell-id>:<hash of Dockerfile + lock>``).

A cell whose tag already exists is not rebuilt; cells that share a base share every layer but the
lock's. The base image comes from the cell's ``cuda`` and ``os`` axes (``nvidia/cuda:<ver>-cudnn-devel-
<os>``), or ``[build] base_image`` / ``--base-image``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from envbuilder import __version__, atomic, dockerapi, layers, lock, validate
from envbuilder.artifacts import BuiltEnvironment
from envbuilder.errors import StageFailure
from envbuilder.layers import Layer
from envbuilder.matrix import NONE, Cell
from envbuilder.pipeline import RunContext
from envbuilder.redact import redact
from envbuilder.results import Reason, StageResult, Status
from envbuilder.uvbin import uv_bin

TEMPLATE = "cell.Dockerfile.j2"
STACK_TEMPLATE = "stack.Dockerfile.j2"


def _template_text(name: str = TEMPLATE) -> str:
    packaged = resources.files("envbuilder").joinpath("_dockerfiles", name)
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parent.parent / "dockerfiles" / name).read_text()


def base_image(cell: Cell, override: str | None) -> str:
    """The image a cell builds FROM."""
    if override:
        return override
    data = tomllib.loads(resources.files("envbuilder").joinpath("data/platforms.toml").read_text())
    suffix = data["os"][cell.os]["cuda_image_suffix"]
    if cell.cuda == NONE:
        return cell.os.replace("ubuntu", "ubuntu:").replace("debian", "debian:")
    tag = data["cuda_image"].get(cell.cuda)
    if not tag or not suffix:
        raise StageFailure(Status.FAIL, Reason.BUILD_FAILED,
                           f"no nvidia/cuda image for CUDA {cell.cuda} on {cell.os}: set [build] base_image")  # fmt: skip
    return f"nvidia/cuda:{tag}-cudnn-devel-{suffix}"


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """A cell's two build contexts: the shared stack image (base, Python, uv, venv, torch's stack) and the cell's."""

    stack_dir: Path
    stack_tag: str
    stack: Layer
    heavy: Layer
    kernels: Layer
    dockerfile: str
    tag: str


def _ca_bundle() -> Path | None:
    """The host's CA bundle (``SSL_CERT_FILE``), for indexes behind a TLS-intercepting proxy."""
    ca = os.environ.get("SSL_CERT_FILE")
    return Path(ca) if ca and Path(ca).is_file() else None


def _context_files(out_dir: Path) -> None:
    """Copy uv (and the host's CA bundle) into a build context."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ca = _ca_bundle()
    if ca is not None:
        atomic.write_bytes(out_dir / "ca-certificates.crt", ca.read_bytes())
    uv = out_dir / "uv"
    if not uv.exists() or uv.stat().st_size != Path(uv_bin()).stat().st_size:
        shutil.copy2(uv_bin(), uv)


def names(layer: Layer) -> str:
    """``torch 2.11.0, triton 3.6.0, …``"""
    return ", ".join(f"{p.name} {p.version}" for p in layer.packages)


def _jinja() -> jinja2.Environment:
    return jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)  # a Dockerfile, not HTML


def render_layers(cell: Cell, lock_path: Path, out_dir: Path, *, base: str, buildkit: bool = False,
                  install_env: dict[str, str] | None = None) -> Rendered:  # fmt: skip
    """Write the stack context (``<out_dir>/../_stack/<key>/``) and the cell's context (Dockerfile, heavy.txt,
    pylock.toml, uv); both tags are content hashes of what they install."""
    # the sink checks again what the matrix loader refused: nothing unquoted reaches a Dockerfile
    validate.image_reference(base, "Dockerfile", "base_image")
    for k in install_env or {}:
        validate.env_key(k, "Dockerfile", f"env.{k[:40]!r}")
    lk = lock.read(lock_path)
    parts = layers.split(lk)
    stack, heavy, kernels = parts.stack, parts.heavy, parts.kernels
    env_line = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((install_env or {}).items()))
    stack_text = _jinja().from_string(_template_text(STACK_TEMPLATE)).render(
        version=__version__, base_image=base, python=cell.python, buildkit=buildkit, tag="{tag}", key=stack.key,
        ca_bundle=_ca_bundle() is not None, install_env=env_line, packages=names(stack))  # fmt: skip
    stack_digest = hashlib.sha256((stack_text + stack.requirements).encode()).hexdigest()[:12]
    stack_tag = f"envbuilder/stack-py{cell.python}:{stack_digest}"
    stack_dir = out_dir.parent / "_stack" / stack_digest
    _context_files(stack_dir)
    atomic.write_text(stack_dir / "Dockerfile", stack_text.replace("{tag}", stack_tag))
    atomic.write_text(stack_dir / "stack.txt", stack.requirements)
    text_wo_tag = _jinja().from_string(_template_text()).render(
        cell_id=cell.id, version=__version__, stack_image=stack_tag, driver=cell.driver,
        lock_sha256=lk.sha256, buildkit=buildkit, tag="{tag}", install_env=env_line, kernels=names(kernels),
        heavy=[(pk.name, layers.Layer(name=pk.name, packages=(pk,)).requirements.strip()) for pk in heavy.packages])  # fmt: skip
    digest = hashlib.sha256((text_wo_tag + lk.sha256).encode()).hexdigest()[:12]
    tag = f"envbuilder/{cell.id.lower()}:{digest}"
    text = text_wo_tag.replace("{tag}", tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_dir / "Dockerfile", text)
    atomic.write_text(out_dir / "kernels.txt", kernels.requirements)
    atomic.write_bytes(out_dir / "pylock.toml", lock_path.read_bytes())
    return Rendered(stack_dir=stack_dir, stack_tag=stack_tag, stack=stack, heavy=heavy, kernels=kernels,
                    dockerfile=text, tag=tag)  # fmt: skip


def render(cell: Cell, lock_path: Path, out_dir: Path, *, base: str, buildkit: bool = False,
           install_env: dict[str, str] | None = None) -> tuple[str, str]:  # fmt: skip
    """Write the build contexts and return (the cell's Dockerfile text, its content tag)."""
    r = render_layers(cell, lock_path, out_dir, base=base, buildkit=buildkit, install_env=install_env)
    return r.dockerfile, r.tag


def docker_client() -> Any:
    """A connected Docker client, or StageFailure error/docker-unavailable with what to do."""
    return dockerapi.connect()


def image_exists(tag: str) -> bool:
    """Whether the Docker engine has ``tag`` (False when there is no engine)."""
    try:
        client = docker_client()
    except StageFailure:
        return False
    try:
        client.images.get(tag)
        return True
    except Exception:
        return False
    finally:
        client.close()


Progress = Callable[[str], None]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _quiet(_: str) -> None:
    return None


def build(client: Any, context: Path, tag: str, log_path: Path, *, labels: dict[str, str],
          nocache: bool = False, progress: Progress = _quiet) -> dict[str, Any]:  # fmt: skip
    """Build ``context`` into ``tag`` through the SDK, streaming the log (each step to ``progress``)."""
    import docker

    try:
        client.images.get(tag)
        return {"image": tag, "built": False, "cached_steps": None, "steps": None, "seconds": 0.0}
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as e:
        raise dockerapi.failure(e) from None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    steps = cached = 0
    last_error = None
    t0 = time.monotonic()
    with log_path.open("w") as log:
        try:
            for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True,
                                          network_mode="host", labels=labels, pull=False, nocache=nocache):  # fmt: skip
                if "stream" in chunk:
                    s = chunk["stream"]
                    log.write(redact(s))
                    s = ANSI.sub("", s)
                    if s.startswith("Step "):
                        steps += 1
                        progress(f"{tag.split(':')[0]}: {s.strip()[:160]}")
                    for line in s.splitlines():  # uv's own lines inside a step: the wheels it fetches, what it installed
                        if re.match(r"\s*(Prepared|Installed|Downloading|Uninstalled) ", line):
                            progress(f"{tag.split(':')[0]}:   {line.strip()[:160]}")
                    if "Using cache" in s:
                        cached += 1
                elif "error" in chunk:
                    last_error = chunk["error"].strip()
                    log.write(redact(f"ERROR: {last_error}") + "\n")
                log.flush()
        except docker.errors.DockerException as e:
            raise dockerapi.failure(e) from None
    if last_error:
        reason, sentence = dockerapi.explain(RuntimeError(last_error))
        if reason is Reason.NETWORK:
            raise StageFailure(Status.ERROR, Reason.NETWORK, f"docker build could not fetch: {sentence} (log: {log_path})")
        if "no space left" in last_error:
            raise StageFailure(Status.ERROR, Reason.BUILD_FAILED, f"{sentence} (log: {log_path})")
        raise StageFailure(Status.FAIL, Reason.BUILD_FAILED, f"docker build failed: {last_error[-300:]} (log: {log_path})")
    return {"image": tag, "built": True, "steps": steps, "cached_steps": cached, "seconds": time.monotonic() - t0}


def build_image_stage(ctx: RunContext, cell: Cell, lock_path: Path, progress: Progress = _quiet) -> StageResult:
    """The build stage with the docker runner: the shared stack image (once per stack), then the cell's image."""
    client = docker_client()  # no engine: that is the first thing to fix
    try:
        override = ctx.options.base_image or ctx.matrix.build.base_image
        base = base_image(cell, override)
        r = render_layers(cell, lock_path, ctx.workspace.images(cell.id), base=base, install_env=ctx.matrix.build.env)
        lk = lock.read(lock_path)
        nocache = ctx.options.no_cache
        stack = build(client, r.stack_dir, r.stack_tag, ctx.workspace.logs(cell.id) / "build-stack.log",
                      labels={"envbuilder.stack": r.stack.key, "envbuilder.version": __version__},
                      nocache=nocache, progress=progress)  # fmt: skip
        info = build(client, ctx.workspace.images(cell.id), r.tag, ctx.workspace.logs(cell.id) / "build.log",
                     labels={"envbuilder.cell": cell.id, "envbuilder.lock-sha256": lk.sha256,
                             "envbuilder.version": __version__},
                     nocache=nocache, progress=progress)  # fmt: skip
        image = client.images.get(r.tag)
        info["image_id"] = image.id
        info["size_bytes"] = int(image.attrs.get("Size", 0))
    except dockerapi.sdk_errors() as e:
        raise dockerapi.failure(e) from None
    finally:
        client.close()
    what = "built" if info["built"] else "exists, not rebuilt"
    shared = "built" if stack["built"] else "reused"
    layers_info = {"stack": {"image": r.stack_tag, "built": stack["built"], "seconds": stack["seconds"],
                             "packages": len(r.stack.packages), "wheel_bytes": r.stack.wheel_bytes},
                   "heavy": {"packages": [p.name for p in r.heavy.packages], "wheel_bytes": r.heavy.wheel_bytes},
                   "kernels": {"packages": [p.name for p in r.kernels.packages], "wheel_bytes": r.kernels.wheel_bytes}}  # fmt: skip
    return StageResult(name="build", status=Status.PASS,
                       message=f"{r.tag} ({what}; stack image {r.stack_tag} {shared}: {len(r.stack.packages)} "
                               f"packages; base {base})",
                       artifact=BuiltEnvironment(kind="image", python="python", image=r.tag, image_id=info["image_id"]),
                       details={**info, "runner": "docker", "base_image": base, "layers": layers_info,
                                "dockerfile": str(ctx.workspace.images(cell.id) / "Dockerfile")})  # fmt: skip
