"""The GPU container launch: exactly what is asked of Docker (on CPU), and what a real engine does with it."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import pytest
from docker.types import DeviceRequest

from envbuilder import dockerapi
from envbuilder.errors import StageFailure
from envbuilder.monitor import Exited, LogLine
from envbuilder.results import Reason, Status
from envbuilder.runners import free_port
from envbuilder.runners.docker import ContainerSpec, DockerRunner, container_spec

ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/model", "--tp-size", "2"]


def _spec(**kw: object) -> ContainerSpec:
    base: dict[str, object] = {"image": "envbuilder/cell:abc", "command": tuple(ARGV), "name": "cell-server-1",
                               "port": 30000, "labels": {"envbuilder.cell": "cell"}, "env": {"A": "1"}}  # fmt: skip
    return ContainerSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_host_driver_tp2_asks_for_two_gpus_ipc_shm_ulimits_and_a_read_only_model(tmp_path: Path) -> None:
    kw = _spec(gpus=2, driver="host", model_dir=str(tmp_path)).kwargs()
    assert kw["device_requests"] == [DeviceRequest(count=2, capabilities=[["gpu"]])]
    assert "devices" not in kw
    # SGLang's own Docker instructions: --ipc=host, --shm-size 32g, memlock/stack ulimits
    assert kw["ipc_mode"] == "host" and kw["shm_size"] == "32g"
    assert {(u["Name"], u["Soft"], u["Hard"]) for u in kw["ulimits"]} == {("memlock", -1, -1), ("stack", 67108864, 67108864)}
    assert kw["volumes"] == {str(tmp_path): {"bind": "/model", "mode": "ro"}}
    assert kw["ports"] == {"30000/tcp": ("127.0.0.1", 30000)}  # never on every interface
    assert kw["environment"] == {"A": "1", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    assert kw["command"] == ARGV and kw["labels"] == {"envbuilder.cell": "cell"}


def test_all_gpus_and_the_hugging_face_cache_for_a_hub_id() -> None:
    kw = _spec(gpus=-1, hf_cache="/root/.cache/huggingface").kwargs()
    assert kw["device_requests"] == [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    assert kw["volumes"] == {"/root/.cache/huggingface": {"bind": "/root/.cache/huggingface", "mode": "ro"}}
    assert kw["environment"]["HF_HUB_OFFLINE"] == "1"  # read-only cache: never try to download into it


def test_baked_userspace_gets_device_nodes_not_the_hosts_driver() -> None:
    nodes = ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm")
    kw = _spec(gpus=2, driver="590.48.01", device_nodes=nodes).kwargs()
    assert "device_requests" not in kw and "NVIDIA_DRIVER_CAPABILITIES" not in kw["environment"]
    assert kw["devices"] == [f"{d}:{d}:rwm" for d in nodes]


def test_cpu_container_asks_for_no_gpu(tmp_path: Path) -> None:
    spec = container_spec("img", ARGV, env={}, base_url="http://127.0.0.1:8123", name="Cell_X-server",
                          labels={"l": "v"}, model_dir=str(tmp_path), gpus=None, driver="host")  # fmt: skip
    kw = spec.kwargs()
    assert "device_requests" not in kw and "devices" not in kw
    assert spec.port == 8123 and spec.name.startswith("cell-x-server-") and spec.hf_cache is None


@pytest.mark.docker
def test_no_nvidia_runtime_is_error_with_the_fix_before_any_pull(base_image: str) -> None:
    import docker

    client = docker.from_env()
    assert "nvidia" not in (client.info().get("Runtimes") or {})  # this runner: runc only
    never = "envbuilder-test/never-pulled:1"
    runner = DockerRunner(labels={"envbuilder.cell": "gpu-test"})
    with pytest.raises(StageFailure) as e, runner.start(ARGV, env={}, base_url="http://127.0.0.1:30000", name="gpu-test",
                                                        image=never, gpus=2):  # fmt: skip
        pass
    assert (e.value.status, e.value.reason) == (Status.ERROR, Reason.DOCKER_UNAVAILABLE)
    assert "no NVIDIA runtime" in e.value.message and "nvidia-ctk runtime configure --runtime=docker" in e.value.message
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(never)  # nothing was pulled
    assert not client.containers.list(all=True, filters={"label": "envbuilder.cell=gpu-test"})
    client.close()


def _engine_allows_memlock(image: str) -> bool:
    import docker
    from docker.types import Ulimit

    client = docker.from_env()
    probe = client.containers.create(image, ["true"], ulimits=[Ulimit(name="memlock", soft=-1, hard=-1)])
    try:
        probe.start()
        return True
    except docker.errors.APIError as e:
        assert "error setting rlimit" in str(e)
        return False
    finally:
        probe.remove(force=True)
        client.close()


def test_a_cpu_container_asks_for_no_memlock_a_gpu_container_does() -> None:
    """memlock is NCCL's (GPU containers); a CPU cell's container must start on engines that refuse to raise it."""
    common: dict[str, Any] = {"env": {}, "base_url": "http://127.0.0.1:8000", "name": "c", "labels": {},
                              "model_dir": None, "driver": "host"}  # fmt: skip
    cpu = {u["Name"] for u in container_spec("img", ["x"], gpus=None, **common).kwargs()["ulimits"]}
    gpu = {u["Name"] for u in container_spec("img", ["x"], gpus=2, **common).kwargs()["ulimits"]}
    assert cpu == {"stack"} and gpu == {"memlock", "stack"}


@pytest.mark.docker
def test_the_spec_is_what_a_real_container_gets(base_image: str, tmp_path: Path) -> None:
    """On CPU, the same spec (no GPU): Docker applies the IPC mode, the stack ulimit and the read-only model mount,
    also on an engine that may not raise memlock (dockerd inside a container, like this CI's). Where an engine
    refuses memlock, what a GPU container would get is explained with the fix."""
    import docker
    from docker.types import Ulimit

    (tmp_path / "config.json").write_text("{}")
    port = free_port()
    script = ("import os, resource; print('stack', resource.getrlimit(resource.RLIMIT_STACK)[0]);"
              "print('model', os.listdir('/model')); open('/model/x', 'w')")  # fmt: skip
    runner = DockerRunner(labels={"envbuilder.cell": "spec-test"})
    start: dict[str, Any] = {"env": {}, "base_url": f"http://127.0.0.1:{port}", "name": "spec-test", "image": base_image,
             "model_dir": str(tmp_path), "gpus": None}  # fmt: skip
    client = docker.from_env()
    lines: list[str] = []
    code = None
    with runner.start(["python3", "-c", script], **start) as h:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and code is None:
            try:
                ev = h.events.get(timeout=1)
            except queue.Empty:
                continue
            if isinstance(ev, LogLine):
                lines.append(ev.text)
            elif isinstance(ev, Exited):
                code = ev.code
        h.container.reload()
        attrs = h.container.attrs["HostConfig"]
    assert code == 1 and "Read-only file system" in "\n".join(lines)  # the model mount is read-only
    assert "stack 67108864" in lines and "model ['config.json']" in lines
    assert attrs["IpcMode"] == "host" and attrs["Binds"] == [f"{tmp_path}:/model:ro"]
    assert attrs["PortBindings"] == {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    assert not client.containers.list(all=True, filters={"label": "envbuilder.cell=spec-test"})  # removed
    if not _engine_allows_memlock(base_image):  # what a GPU container asks for, refused: explained with the fix
        probe = client.containers.create(base_image, ["true"], ulimits=[Ulimit(name="memlock", soft=-1, hard=-1)])
        try:
            with pytest.raises(docker.errors.APIError) as e:
                probe.start()
        finally:
            probe.remove(force=True)
        reason, message = dockerapi.explain(e.value)
        assert reason is Reason.DOCKER_UNAVAILABLE and "LimitMEMLOCK=infinity" in message
    client.close()
