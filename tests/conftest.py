from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass
class Ran:
    code: int
    out: str
    err: str


def envbuilder(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> Ran:
    """Run the real CLI in a subprocess (so tracebacks and exit codes are what a user sees)."""
    e = {**os.environ, "NO_COLOR": "1", **(env or {})}
    p = subprocess.run([sys.executable, "-m", "envbuilder", *args], cwd=cwd or ROOT, capture_output=True,
                       text=True, env=e, timeout=timeout, check=False)
    return Ran(p.returncode, p.stdout, p.stderr)


@pytest.fixture
def cli() -> type[Ran]:
    return Ran


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


BASE_AXES = """
[matrix]
sglang = ["0.5.11"]
cuda = ["13.0"]
os = ["ubuntu24.04"]
python = ["3.12"]
"""


def run_main(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> Ran:
    from envbuilder.cli import main

    code = main(list(argv))
    cap = capsys.readouterr()
    return Ran(code, cap.out, cap.err)
