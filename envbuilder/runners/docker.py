"""The Docker runner: the cell's image as a container, asked of Docker the way SGLang's own Docker
instructions run it — GPUs through a device request (``--gpus``), ``--ipc=host`` and ``--shm-size 32g``,
``memlock``/``stack`` ulimits, the Hugging Face cache or the model directory mounted (read-only here), the port
published on 127.0.0.1 only. Sources: SGLang's install docs (docs/get_started/install.md, "Method 3: Using
Docker": ``docker run --gpus all --shm-size 32g -v ~/.cache/huggingface:/root/.cache/huggingface --ipc=host``)
and its ``docker/compose.yaml`` (``ipc: host``, ``ulimits: memlock: -1, stack: 67108864``, ``capabilities: [gpu]``).

``driver = "host"``: the NVIDIA runtime injects the host's driver userspace (``NVIDIA_DRIVER_CAPABILITIES``).
A baked userspace (``driver = "590.48.01"``): only the device nodes are passed (``/dev/nvidia*``), so the
image's own libraries are the ones loaded. The container is removed on every path; ``envbuilder gc`` removes
any left behind (by label).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from envbuilder import dockerapi
from envbuilder.errors import StageFailure
from envbuilder.monitor import Event, Exited, LogLine
from envbuilder.results import Reason, Status

LABEL = "envbuilder.cell"
SHM_SIZE = "32g"  # SGLang's install docs
ULIMITS = (("memlock", -1, -1), ("stack", 67108864, 67108864))  # SGLang's docker/compose.yaml
# memlock is for GPU containers (NCCL pins host memory); a CPU container does not ask for it, so it also runs on an
# engine that may not raise that limit (dockerd inside a container).
GPU_ONLY_ULIMITS = frozenset({"memlock"})
HF_CACHE_IN_IMAGE = "/root/.cache/huggingface"
MODEL_IN_IMAGE = "/model"


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """Everything asked of Docker to start a cell's server container (``containers.create`` keyword arguments)."""

    image: str
    command: tuple[str, ...]
    name: str
    port: int | None
    labels: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: int | None = None  # None: no GPU; -1: all; n: the first n (the cell's tp)
    driver: str = "host"  # "host": the runtime injects the host's userspace; a version: baked, devices only
    model_dir: str | None = None  # a local model folder, mounted read-only at /model
    hf_cache: str | None = None  # the Hugging Face cache, mounted read-only (a hub id, already downloaded)
    device_nodes: tuple[str, ...] = ()  # baked userspace: the /dev/nvidia* nodes passed through

    def kwargs(self) -> dict[str, Any]:
        from docker.types import DeviceRequest, Ulimit

        env = dict(self.env)
        out: dict[str, Any] = {
            "command": list(self.command), "labels": dict(self.labels), "name": self.name,
            "ipc_mode": "host", "shm_size": SHM_SIZE,
            "ulimits": [Ulimit(name=n, soft=soft, hard=hard) for n, soft, hard in ULIMITS
                        if self.gpus is not None or n not in GPU_ONLY_ULIMITS],
        }  # fmt: skip
        if self.port is not None:
            out["ports"] = {f"{self.port}/tcp": ("127.0.0.1", self.port)}
        volumes: dict[str, dict[str, str]] = {}
        if self.model_dir:
            volumes[self.model_dir] = {"bind": MODEL_IN_IMAGE, "mode": "ro"}
        if self.hf_cache:
            volumes[self.hf_cache] = {"bind": HF_CACHE_IN_IMAGE, "mode": "ro"}
            env.setdefault("HF_HUB_OFFLINE", "1")  # read-only cache: load what is there, never download
        if volumes:
            out["volumes"] = volumes
        if self.gpus is not None:
            if self.driver == "host":
                out["device_requests"] = [DeviceRequest(count=self.gpus, capabilities=[["gpu"]])]
                env.setdefault("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
            else:  # the image's baked userspace: device nodes only, nothing of the host's driver injected
                out["devices"] = [f"{d}:{d}:rwm" for d in self.device_nodes]
        out["environment"] = env
        return out


def gpu_device_nodes(count: int) -> tuple[str, ...]:
    """The host's NVIDIA device nodes for the first ``count`` GPUs (-1: all) and the control nodes."""
    found = [str(d) for d in Path("/dev").glob("nvidia[0-9]*")]
    gpus = sorted(found, key=lambda d: int(d.removeprefix("/dev/nvidia")))
    chosen = gpus if count < 0 else gpus[:count]
    control = [d for d in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
               if Path(d).exists()]  # fmt: skip
    return tuple(chosen + control)


def hf_cache_dir() -> str | None:
    """The host's Hugging Face cache (``HF_HOME`` or ``~/.cache/huggingface``), when it exists."""
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return str(home) if home.is_dir() else None


def container_spec(image: str, argv: Sequence[str], *, env: Mapping[str, str], base_url: str, name: str,
                   labels: Mapping[str, str], model_dir: str | None, gpus: int | None, driver: str) -> ContainerSpec:  # fmt: skip
    """The container a cell's server runs in: ``gpus`` None (CPU), -1 (all) or the cell's ``tp``."""
    return ContainerSpec(
        image=image, command=tuple(argv), env=dict(env), labels=dict(labels), port=urlparse(base_url).port,
        name=name.lower().replace("_", "-")[:120] + f"-{int(time.time())}", gpus=gpus, driver=driver,
        model_dir=model_dir, hf_cache=None if model_dir else hf_cache_dir(),
        device_nodes=gpu_device_nodes(gpus) if gpus is not None and driver != "host" else (),
    )  # fmt: skip


def require_gpu_runtime(client: Any, spec: ContainerSpec) -> None:
    """Refuse, before any pull or start, a GPU container this engine cannot give GPUs to."""
    if spec.gpus is None:
        return
    if spec.driver == "host" and not dockerapi.nvidia_runtime(client):
        raise StageFailure(Status.ERROR, Reason.DOCKER_UNAVAILABLE,
                           f"Docker on this runner has no NVIDIA runtime (`docker info` runtimes: "
                           f"{', '.join(sorted(client.info().get('Runtimes', {}) or {})) or 'none'}), so the "
                           f"container cannot get GPUs: {dockerapi.NVIDIA_TOOLKIT_FIX}")  # fmt: skip
    if spec.driver != "host" and not any(d.removeprefix("/dev/nvidia").isdigit() for d in spec.device_nodes):
        raise StageFailure(Status.ERROR, Reason.NO_GPU,
                           "no /dev/nvidia<N> device nodes on this host to pass to a container with a baked "
                           "driver userspace: load the NVIDIA kernel module (`nvidia-smi` on the host), then run again")  # fmt: skip


@dataclass
class ContainerHandle:
    container: Any
    base_url: str
    events: queue.Queue[Event] = field(default_factory=queue.Queue)
    pid: int | None = None


class DockerRunner:
    def __init__(self, labels: dict[str, str], grace_s: int = 10) -> None:
        self.labels = labels
        self.grace_s = grace_s

    @contextmanager
    def start(self, argv: Sequence[str], *, env: Mapping[str, str], base_url: str, name: str, image: str,
              model_dir: str | None = None, gpus: int | None = -1, driver: str = "host") -> Iterator[ContainerHandle]:  # fmt: skip
        spec = container_spec(image, argv, env=env, base_url=base_url, name=name, labels=self.labels,
                              model_dir=model_dir, gpus=gpus, driver=driver)  # fmt: skip
        client = dockerapi.connect(timeout_s=120)
        container = None
        try:
            require_gpu_runtime(client, spec)
            try:  # created, then started: a start Docker refuses still leaves a handle to remove
                container = client.containers.create(spec.image, **spec.kwargs())
                container.start()
            except dockerapi.sdk_errors() as e:
                raise dockerapi.failure(e) from None
            handle = ContainerHandle(container=container, base_url=base_url)

            def pump() -> None:
                for raw in container.logs(stream=True, follow=True):
                    for part in raw.decode(errors="replace").rstrip("\n").split("\r"):
                        if part.strip():
                            handle.events.put(LogLine(text=part.rstrip(), t=time.monotonic()))
                code = container.wait().get("StatusCode", -1)
                handle.events.put(Exited(code=int(code), t=time.monotonic()))

            threading.Thread(target=pump, daemon=True).start()
            yield handle
        finally:
            if container is not None:
                with contextlib.suppress(Exception):
                    container.stop(timeout=self.grace_s)
                with contextlib.suppress(Exception):
                    container.remove(force=True)
            client.close()


def gc_containers() -> list[str]:
    """Remove every container envbuilder labelled (what a killed orchestrator left)."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception:
        return []
    removed = []
    try:
        for c in client.containers.list(all=True, filters={"label": LABEL}):
            with contextlib.suppress(Exception):
                c.remove(force=True)
                removed.append(f"container {c.name}")
    finally:
        client.close()
    return removed
