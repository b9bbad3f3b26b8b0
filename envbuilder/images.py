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
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from envbuilder import __version__, atomic, lock
from envbuilder.artifacts import BuiltEnvironment
from envbuilder.errors import StageFailure
from envbuilder.matrix import NONE, Cell
from envbuilder.pipeline import RunContext
from envbuilder.results import Reason, StageResult, Status
from envbuilder.uvbin import uv_bin

TEMPLATE = "cell.Dockerfile.j2"


def _template_text() -> str:
    packaged = resources.files("envbuilder").joinpath("_dockerfiles", TEMPLATE)
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parent.parent / "dockerfiles" / TEMPLATE).read_text()


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


def render(cell: Cell, lock_path: Path, out_dir: Path, *, base: str, buildkit: bool = False,
           install_env: dict[str, str] | None = None) -> tuple[str, str]:  # fmt: skip
    """Write the build context (Dockerfile, pylock.toml, uv) and return (Dockerfile text, content tag)."""
    lk = lock.read(lock_path)
    ca = os.environ.get("SSL_CERT_FILE")
    ca_bundle = bool(ca and Path(ca).is_file())
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)  # a Dockerfile, not HTML
    text_wo_tag = env.from_string(_template_text()).render(
        cell_id=cell.id, version=__version__, base_image=base, python=cell.python, driver=cell.driver,
        lock_sha256=lk.sha256, buildkit=buildkit, tag="{tag}", ca_bundle=ca_bundle,
        install_env=" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((install_env or {}).items())))  # fmt: skip
    digest = hashlib.sha256((text_wo_tag + lk.sha256).encode()).hexdigest()[:12]
    tag = f"envbuilder/{cell.id.lower()}:{digest}"
    text = text_wo_tag.replace("{tag}", tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_dir / "Dockerfile", text)
    atomic.write_bytes(out_dir / "pylock.toml", lock_path.read_bytes())
    if ca_bundle and ca:
        atomic.write_bytes(out_dir / "ca-certificates.crt", Path(ca).read_bytes())
    uv = out_dir / "uv"
    if not uv.exists() or uv.stat().st_size != Path(uv_bin()).stat().st_size:
        shutil.copy2(uv_bin(), uv)
    return text, tag


def docker_client() -> Any:
    """A connected Docker client, or StageFailure error/docker-unavailable."""
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except Exception as e:
        raise StageFailure(Status.ERROR, Reason.DOCKER_UNAVAILABLE,
                           f"no Docker engine: {str(e).splitlines()[0][:200]}") from None  # fmt: skip


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


def build(client: Any, context: Path, tag: str, log_path: Path, *, labels: dict[str, str],
          nocache: bool = False) -> dict[str, Any]:  # fmt: skip
    """Build ``context`` into ``tag`` through the SDK, streaming the log; returns what it did."""
    import docker

    try:
        client.images.get(tag)
        return {"image": tag, "built": False, "cached_steps": None, "steps": None}
    except docker.errors.ImageNotFound:
        pass
    log_path.parent.mkdir(parents=True, exist_ok=True)
    steps = cached = 0
    last_error = None
    with log_path.open("w") as log:
        for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True,
                                      network_mode="host", labels=labels, pull=False, nocache=nocache):  # fmt: skip
            if "stream" in chunk:
                s = chunk["stream"]
                log.write(s)
                if s.startswith("Step "):
                    steps += 1
                if "Using cache" in s:
                    cached += 1
            elif "error" in chunk:
                last_error = chunk["error"].strip()
                log.write(f"ERROR: {last_error}\n")
            log.flush()
    if last_error:
        if re.search(r"pull access denied|manifest unknown|not found: manifest|dial tcp|TLS handshake|"
                     r"failed to fetch|Could not resolve|Temporary failure resolving|i/o timeout", last_error, re.I):
            raise StageFailure(Status.ERROR, Reason.NETWORK,
                               f"docker build could not fetch: {last_error[-300:]} (log: {log_path})")  # fmt: skip
        raise StageFailure(Status.FAIL, Reason.BUILD_FAILED, f"docker build failed: {last_error[-300:]} (log: {log_path})")
    return {"image": tag, "built": True, "steps": steps, "cached_steps": cached}


def build_image_stage(ctx: RunContext, cell: Cell, lock_path: Path) -> StageResult:
    """The build stage with the docker runner."""
    override = ctx.options.base_image or ctx.matrix.build.base_image
    base = base_image(cell, override)
    _, tag = render(cell, lock_path, ctx.workspace.images(cell.id), base=base, install_env=ctx.matrix.build.env)
    client = docker_client()
    try:
        lk = lock.read(lock_path)
        info = build(client, ctx.workspace.images(cell.id), tag, ctx.workspace.logs(cell.id) / "build.log",
                     labels={"envbuilder.cell": cell.id, "envbuilder.lock-sha256": lk.sha256,
                             "envbuilder.version": __version__},
                     nocache=ctx.options.no_cache)  # fmt: skip
        image = client.images.get(tag)
        info["image_id"] = image.id
    finally:
        client.close()
    what = "built" if info["built"] else "exists, not rebuilt"
    return StageResult(name="build", status=Status.PASS, message=f"{tag} ({what}; base {base})",
                       artifact=BuiltEnvironment(kind="image", python="python", image=tag, image_id=info["image_id"]),
                       details={**info, "runner": "docker", "base_image": base,
                                "dockerfile": str(ctx.workspace.images(cell.id) / "Dockerfile")})  # fmt: skip
