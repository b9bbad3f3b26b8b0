"""The Docker runner: the cell's image as a container — GPUs through ``device_requests``, ``--ipc=host``,
the model directory mounted read-only, the port published on 127.0.0.1 only. The container is removed on
every path; ``envbuilder gc`` removes any left behind (by label).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from envbuilder.monitor import Event, Exited, LogLine

LABEL = "envbuilder.cell"


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
              model_dir: str | None = None, gpus: bool = True) -> Iterator[ContainerHandle]:  # fmt: skip
        import docker
        from docker.types import DeviceRequest

        client = docker.from_env(timeout=120)
        port = urlparse(base_url).port
        container = None
        try:
            kwargs: dict[str, Any] = {
                "command": list(argv), "environment": dict(env), "detach": True, "labels": self.labels,
                "ipc_mode": "host", "ports": {f"{port}/tcp": ("127.0.0.1", port)},
                "name": name.lower().replace("_", "-")[:120] + f"-{int(time.time())}",
            }  # fmt: skip
            if gpus:
                kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
            if model_dir:
                kwargs["volumes"] = {model_dir: {"bind": "/model", "mode": "ro"}}
            container = client.containers.run(image, **kwargs)
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
