"""doctor: the facts of a GPU runner (GPUs, driver kernel module and userspace, CUDA, glibc, OS, Docker).

In the spirit of SGLang's ``check_env`` and vLLM's ``collect_env``. Every probe degrades to
"unknown" with a reason (``facts["unknown"][field]``) — never a traceback. The JSON can be saved and
fed back with ``--host-facts FILE`` so any machine can decide with a runner's facts; a minimal
hand-written file is accepted too (missing fields are unknown).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder import validate
from envbuilder.errors import InputError, did_you_mean

SCHEMA = 1
_KERNEL_MODULE = re.compile(r"NVRM version: NVIDIA UNIX (Open )?(?:\S+ )?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")
_LIB = re.compile(r"^lib(cuda|nvidia-ml)\.so\.(\d{3}\.\d{1,3}(?:\.\d{1,3})?)$")
DEFAULT_LIB_DIRS = (
    "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
    "/lib/x86_64-linux-gnu", "/lib64", "/lib", "/usr/lib/wsl/lib",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ProbeEnv:
    """Where the probes look; tests point it at fixture trees."""

    root: Path = Path("/")
    lib_dirs: tuple[str, ...] = field(default_factory=lambda: _lib_dirs_from_env())
    use_nvml: bool = True
    use_docker: bool = True
    use_commands: bool = True


def _lib_dirs_from_env() -> tuple[str, ...]:
    extra = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return tuple(dict.fromkeys([*extra, *DEFAULT_LIB_DIRS]))


def parse_kernel_module(text: str) -> tuple[str | None, str | None]:
    """``(version, flavor)`` from ``/proc/driver/nvidia/version``; flavor is ``open`` or ``proprietary``."""
    m = _KERNEL_MODULE.search(text)
    if not m:
        return None, None
    return m.group(2), "open" if m.group(1) else "proprietary"


def userspace_libraries(root: Path, lib_dirs: tuple[str, ...]) -> list[dict[str, str]]:
    """Every ``libcuda.so.<ver>`` / ``libnvidia-ml.so.<ver>`` found on the library path."""
    found: list[dict[str, str]] = []
    for d in lib_dirs:
        path = root / d.lstrip("/")
        try:
            names = sorted(os.listdir(path))
        except OSError:
            continue
        for n in names:
            if m := _LIB.match(n):
                found.append({"library": f"lib{m.group(1)}.so", "version": m.group(2), "path": str(Path(d) / n)})
    return found


def collect(env: ProbeEnv | None = None) -> dict[str, Any]:
    """Probe this machine. Never raises for a missing GPU, driver or Docker."""
    env = env or ProbeEnv()
    unknown: dict[str, str] = {}
    facts: dict[str, Any] = {"schema": SCHEMA, "collected_at": datetime.datetime.now(datetime.UTC).isoformat(),
                             "hostname": socket.gethostname(), "machine": platform.machine()}  # fmt: skip

    # driver: kernel module
    driver: dict[str, Any] = {}
    proc = env.root / "proc/driver/nvidia/version"
    try:
        version, flavor = parse_kernel_module(proc.read_text())
        if version:
            driver["kernel_module"] = version
            driver["kernel_module_flavor"] = flavor
        else:
            unknown["driver.kernel_module"] = f"{proc}: no 'NVRM version' line"
    except OSError as e:
        unknown["driver.kernel_module"] = f"{proc}: {e.strerror or e} (no NVIDIA kernel module loaded)"

    # driver: userspace libraries
    libs = userspace_libraries(env.root, env.lib_dirs)
    if libs:
        versions = sorted({x["version"] for x in libs})
        cuda_libs = [x["version"] for x in libs if x["library"] == "libcuda.so"]
        driver["userspace"] = cuda_libs[0] if cuda_libs else versions[0]
        driver["userspace_versions"] = versions
        driver["userspace_libraries"] = libs
    else:
        unknown["driver.userspace"] = "no libcuda.so.<version> or libnvidia-ml.so.<version> on the library path"

    # GPUs through NVML
    gpus: list[dict[str, Any]] = []
    if env.use_nvml:
        gpus, cuda_driver, reason = _nvml()
        if reason:
            unknown["gpus"] = reason
        if cuda_driver:
            driver["cuda_supported"] = cuda_driver
    else:
        unknown["gpus"] = "NVML probing disabled"
    if "cuda_supported" not in driver:
        unknown.setdefault("driver.cuda_supported", "NVML did not report the CUDA version the driver supports")
    facts["gpus"] = gpus
    facts["driver"] = driver

    # glibc and OS
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
        facts["glibc"] = libc.split()[-1] if libc.startswith("glibc") else None
    except (ValueError, OSError):
        facts["glibc"] = None
    if not facts["glibc"]:
        unknown["glibc"] = "not a glibc system"
    facts["os"] = _os_release(env.root)
    if not facts["os"]:
        unknown["os"] = "no /etc/os-release"

    # Docker and the NVIDIA container runtime
    facts["docker"] = _docker(env, unknown)
    facts["nvidia_container_toolkit"] = bool(env.use_commands and (shutil.which("nvidia-container-runtime")
                                                                   or shutil.which("nvidia-ctk")))  # fmt: skip

    # topology
    topo = _run(["nvidia-smi", "topo", "-m"]) if env.use_commands else None
    if topo:
        facts["topology"] = topo
    else:
        unknown["topology"] = "nvidia-smi topo -m not available"
    facts["unknown"] = unknown
    return facts


def _nvml() -> tuple[list[dict[str, Any]], str | None, str | None]:
    try:
        import pynvml
    except ImportError as e:
        return [], None, f"nvidia-ml-py not importable: {e}"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # pynvml raises NVMLError subclasses, or OSError-ish when libnvidia-ml is absent
        return [], None, f"NVML unavailable: {e}"
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else str(name),
                         "memory_mib": int(mem.total) // (1024 * 1024),
                         "compute_capability": f"{major}.{minor}"})  # fmt: skip
        cuda = None
        try:
            v = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            cuda = None
        return gpus, cuda, None
    except Exception as e:
        return [], None, f"NVML query failed: {e}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _os_release(root: Path) -> dict[str, str]:
    for p in (root / "etc/os-release", root / "usr/lib/os-release"):
        try:
            text = p.read_text()
        except OSError:
            continue
        out = {}
        for line in text.splitlines():
            k, sep, v = line.partition("=")
            if sep and k in ("ID", "VERSION_ID", "PRETTY_NAME"):
                out[k.lower()] = v.strip().strip('"')
        return out
    return {}


def _docker(env: ProbeEnv, unknown: dict[str, str]) -> dict[str, Any]:
    if not env.use_docker:
        unknown["docker"] = "Docker probing disabled"
        return {"available": False}
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            info = client.info()
            return {"available": True, "version": client.version().get("Version"),
                    "runtimes": sorted(info.get("Runtimes", {})),
                    "nvidia_runtime": "nvidia" in info.get("Runtimes", {})}  # fmt: skip
        finally:
            client.close()
    except Exception as e:
        unknown["docker"] = f"no Docker engine: {str(e).splitlines()[0][:200]}"
        return {"available": False}


def _run(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


# --------------------------------------------------------------------------------------------
# Loading saved or hand-written facts
# --------------------------------------------------------------------------------------------

_STR_FIELDS = {"driver.kernel_module", "driver.userspace", "driver.cuda_supported", "glibc"}


def load_facts(path: Path) -> dict[str, Any]:
    """Read ``--host-facts``: full doctor output or a minimal hand-written subset."""
    where = str(path)
    data = validate.load_json(path)
    if not isinstance(data, dict):
        raise InputError(where, None, "must be a JSON object")
    known = {"schema", "collected_at", "hostname", "machine", "gpus", "driver", "glibc", "os", "docker",
             "nvidia_container_toolkit", "topology", "unknown"}  # fmt: skip
    for k in data:
        if k not in known:
            raise InputError(where, k, f"unknown field{did_you_mean(k, known)}")
    driver = data.get("driver", {})
    if not isinstance(driver, dict):
        raise InputError(where, "driver", "must be an object")
    for key, pattern, example in (("kernel_module", validate.DRIVER, "580.126.09"),
                                  ("userspace", validate.DRIVER, "580.126.09"),
                                  ("cuda_supported", validate.CUDA, "13.0")):  # fmt: skip
        if driver.get(key) is not None and not validate.full(pattern, driver[key]):
            raise InputError(where, f"driver.{key}", f"must be a version string such as \"{example}\"")
    versions = driver.get("userspace_versions", [])
    if not isinstance(versions, list) or not all(validate.full(validate.DRIVER, v) for v in versions):
        raise InputError(where, "driver.userspace_versions", "must be a list of versions such as \"580.126.09\"")
    if data.get("glibc") is not None and not validate.full(validate.GLIBC, data["glibc"]):
        raise InputError(where, "glibc", "must be a string such as \"2.35\"")
    gpus = data.get("gpus", [])
    if not isinstance(gpus, list):
        raise InputError(where, "gpus", "must be a list")
    for i, g in enumerate(gpus):
        if not isinstance(g, dict):
            raise InputError(where, f"gpus[{i}]", "must be an object")
        mem = g.get("memory_mib")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int | float) or not 0 <= mem < 2**40):
            raise InputError(where, f"gpus[{i}].memory_mib", "must be a number of MiB")
        cc = g.get("compute_capability")
        if cc is not None and not validate.full(validate.COMPUTE_CAPABILITY, cc):
            raise InputError(where, f"gpus[{i}].compute_capability", "must be a string such as \"8.6\"")
    data.setdefault("gpus", [])
    data.setdefault("driver", {})
    data.setdefault("unknown", {})
    return data
