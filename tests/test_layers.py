"""Layer split on the real release-day locks of SGLang 0.5.11 and 0.5.12 (Python 3.11, glibc 2.36)."""

from __future__ import annotations

from pathlib import Path

from envbuilder import layers, lock
from tests.conftest import FIXTURES, write

LOCKS = FIXTURES / "locks"


def _split(version: str) -> tuple[layers.Layer, layers.Layer, layers.Layer, lock.Lock]:
    lk = lock.read(LOCKS / f"sglang-{version}-py3.11-manylinux_2_36.pylock.toml")
    parts = layers.split(lk)
    return parts.stack, parts.heavy, parts.kernels, lk


def test_torch_stack_is_shared_by_0_5_11_and_0_5_12() -> None:
    s11, h11, k11, lk11 = _split("0.5.11")
    s12, h12, k12, _ = _split("0.5.12")
    # pyarrow, scipy: the same in both (each its own layer, shared); 0.5.12 adds tilelang, tokenspeed-triton, z3
    assert [p.name for p in h11.packages] == ["pyarrow", "scipy"] and h12.packages[:2] == h11.packages
    names = {p.name for p in s11.packages}
    assert {"torch", "triton", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"} <= names
    assert not any(n.startswith("nvidia-cutlass") for n in names)  # follows the kernels, not torch
    # same pins and hashes: one key, one shared image; most of the wheel bytes live there
    assert s11.key == s12.key and s11.requirements == s12.requirements
    total = sum(layers.wheel_bytes(p) for p in lk11.packages.values())
    assert s11.wheel_bytes > 0.6 * total
    # the kernels differ between the releases: their own layer, after the heavy wheels that do not (pyarrow, scipy)
    kernels11 = {p.name: p.version for p in k11.packages}
    assert kernels11["sglang-kernel"] == "0.4.2" and "flashinfer-cubin" in kernels11 and "flash-attn-4" in kernels11
    assert {p.name: p.version for p in k12.packages}["sglang-kernel"] == "0.4.2.post2"
    assert k11.key != k12.key
    assert {"pyarrow", "scipy"} <= {p.name for p in h11.packages}
    assert not {p.name for p in h11.packages} & set(kernels11)
    # every requirement line is pinned and hash-checked
    for line in (s11.requirements + h11.requirements + k11.requirements).splitlines():
        assert "==" in line and "--hash=sha256:" in line


def test_size_threshold_and_no_torch(tmp_path: Path) -> None:
    def pkg(name: str, size: int) -> str:
        return (f'[[packages]]\nname = "{name}"\nversion = "1.0"\nwheels = [{{ url = "https://x.example/{name}-1.0-py3-none-any.whl", '
                f'size = {size}, hashes = {{ sha256 = "{"a" * 64}" }} }}]\n')  # fmt: skip

    text = 'lock-version = "1.0"\ncreated-by = "test"\n' + pkg("big", 30_000_000) + pkg("small", 1000) + pkg("nvidia-nccl-cu12", 200_000_000)
    lk = lock.read(write(tmp_path / "pylock.toml", text))
    parts = layers.split(lk)
    assert parts.stack.packages == () and parts.kernels.packages == ()  # no torch: no stack to share
    assert [p.name for p in parts.heavy.packages] == ["big", "nvidia-nccl-cu12"]
    assert [p.name for p in layers.split(lk, heavy_bytes=50_000_000).heavy.packages] == ["nvidia-nccl-cu12"]
