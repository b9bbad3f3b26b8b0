"""The Docker engine through the Docker SDK: one way to connect, and every Docker error as a sentence a user
can act on (what happened, then what to do), never the SDK's exception text alone."""

from __future__ import annotations

import os
import re
from typing import Any

from envbuilder.errors import StageFailure
from envbuilder.results import Reason, Status

NVIDIA_TOOLKIT_FIX = ("install the NVIDIA Container Toolkit and register its runtime: "
                      "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker` "
                      "(or run this cell with `--runner venv`)")  # fmt: skip


def engine_address() -> str:
    """Where the SDK looks for the engine (``DOCKER_HOST`` or the default socket)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def explain(e: BaseException) -> tuple[Reason, str]:
    """(reason slug, one actionable sentence) for an exception the Docker SDK raised."""
    text = f"{type(e).__name__}: {e}"
    where = engine_address()
    rules: tuple[tuple[str, Reason, str], ...] = (
        (r"Permission denied|PermissionError", Reason.DOCKER_UNAVAILABLE,
         f"permission denied on the Docker socket ({where}): add your user to the `docker` group "
         "(`sudo usermod -aG docker $USER`, then log in again) or run as root"),
        (r"FileNotFoundError|No such file or directory|Connection refused|ConnectionRefused|"
         r"Name or service not known|Cannot connect to the Docker daemon", Reason.DOCKER_UNAVAILABLE,
         f"no Docker engine answers at {where}: install Docker and start it (`sudo systemctl start docker`), "
         "or build venvs instead with `--runner venv --python PATH`"),
        (r"could not select device driver .*capabilities: \[\[gpu\]\]|unknown or invalid runtime name: nvidia",
         Reason.DOCKER_UNAVAILABLE, f"Docker cannot give this container GPUs: {NVIDIA_TOOLKIT_FIX}"),
        (r"error setting rlimit", Reason.DOCKER_UNAVAILABLE,
         "this Docker engine may not raise the container's locked-memory/stack limits that SGLang's Docker "
         "instructions set (`--ulimit memlock=-1`): dockerd itself runs with lower limits or without "
         "CAP_SYS_RESOURCE (inside another container?); run dockerd on the host, or raise its limits "
         "(`LimitMEMLOCK=infinity` in docker.service) and restart it"),
        (r"no space left on device", Reason.BUILD_FAILED,
         "Docker's disk is full: free space with `docker image prune` (or remove old envbuilder images: "
         "`docker images 'envbuilder/*'`), then run again"),
        (r"pull access denied|manifest unknown|not found: manifest|repository does not exist",
         Reason.NETWORK, "the base image could not be pulled: check its name, `docker login` to its registry, "
         "or build it locally and set [build] base_image"),
        (r"Read timed out|ReadTimeout|timed out", Reason.DOCKER_UNAVAILABLE,
         f"the Docker engine at {where} did not answer in time: check `docker info` and that the engine is not "
         "overloaded, then run again"),
        (r"dial tcp|TLS handshake|Could not resolve|Temporary failure resolving|i/o timeout|failed to fetch",
         Reason.NETWORK, "Docker could not reach a registry or index: check the network (and a proxy's "
         "HTTP_PROXY/HTTPS_PROXY for dockerd), then run again"),
    )  # fmt: skip
    for pattern, reason, sentence in rules:
        if re.search(pattern, text, re.I):
            return reason, f"{sentence} (Docker said: {first_line(text)})"
    return Reason.DOCKER_UNAVAILABLE, f"the Docker engine refused the request: {first_line(text)}"


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:240]


def failure(e: BaseException, status: Status = Status.ERROR) -> StageFailure:
    """A Docker error as a stage outcome (``error``: the tool could not decide)."""
    reason, sentence = explain(e)
    return StageFailure(status, reason, sentence)


def connect(timeout_s: int = 600) -> Any:
    """A connected Docker client, or StageFailure error/docker-unavailable with what to do."""
    try:
        import docker

        client = docker.from_env(timeout=timeout_s)
        client.ping()
        return client
    except Exception as e:
        raise failure(e) from None


def available() -> bool:
    """Whether a Docker engine answers here (quickly; never raises)."""
    try:
        connect(timeout_s=5).close()
        return True
    except StageFailure:
        return False


def nvidia_runtime(client: Any) -> bool:
    """Whether the engine can hand GPUs to containers (the NVIDIA runtime registered: ``docker info``)."""
    runtimes = client.info().get("Runtimes", {}) or {}
    return "nvidia" in runtimes


def sdk_errors() -> tuple[type[BaseException], ...]:
    """What the Docker SDK raises when the engine refuses or does not answer (for ``except``)."""
    import docker
    import requests

    return (docker.errors.DockerException, requests.exceptions.RequestException)
