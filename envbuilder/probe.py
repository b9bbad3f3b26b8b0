"""What the probes envbuilder runs inside an environment (import smoke, launch-check, bisect trials) share:
the marked JSON line they print among the engine's own logging, and the messages that mean "no GPU driver here"."""

from __future__ import annotations

import json
import re
from typing import Any

MARK = "ENVBUILDER-JSON "
NEEDS_GPU = re.compile(r"libcuda\.so|no NVIDIA driver|Found no NVIDIA driver|CUDA driver|libnvidia-ml|"
                       r"NVIDIA driver on your system|cudaGetDeviceCount|nvmlInit|No accelerator \(CUDA", re.I)  # fmt: skip


def read_marked(output: str, mark: str = MARK) -> dict[str, Any] | None:
    """The JSON a probe printed after ``mark`` (the rest of its output is the engine's own logging)."""
    line = next((ln for ln in output.splitlines() if ln.startswith(mark)), None)
    return None if line is None else dict(json.loads(line[len(mark) :]))
