"""doctor: driver strings of both formats, library trees, degraded probes, the real H200's facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuilder import doctor
from envbuilder.errors import InputError
from tests.conftest import FIXTURES, envbuilder, write

TREES = FIXTURES / "drivers"


def _probe(tree: str) -> dict[str, object]:
    return doctor.collect(doctor.ProbeEnv(root=TREES / tree, lib_dirs=doctor.DEFAULT_LIB_DIRS, use_nvml=False,
                                          use_docker=False, use_commands=False))


@pytest.mark.parametrize(("text", "version", "flavor"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024", "550.90.07", "proprietary"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  ", "580.159.04", "open"),
    ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  535.161.08  Release Build", "535.161.08", "proprietary"),
    ("GCC version: gcc 12", None, None),
])
def test_parse_kernel_module(text: str, version: str | None, flavor: str | None) -> None:
    assert doctor.parse_kernel_module(text) == (version, flavor)


def test_proprietary_tree() -> None:
    f = _probe("proprietary-550")
    assert f["driver"] == {**f["driver"], "kernel_module": "550.90.07", "kernel_module_flavor": "proprietary",  # type: ignore[dict-item]
                           "userspace": "550.90.07"}


def test_open_tree_with_nvidia_lib64() -> None:
    f = _probe("open-580")
    drv = f["driver"]
    assert isinstance(drv, dict)
    assert drv["kernel_module"] == "580.159.04" and drv["kernel_module_flavor"] == "open"
    assert drv["userspace"] == "580.159.04"


def test_mismatched_module_and_userspace() -> None:
    drv = _probe("mismatch")["driver"]
    assert isinstance(drv, dict)
    assert (drv["kernel_module"], drv["userspace"]) == ("580.126.09", "590.48.01")


def test_no_driver_degrades_to_unknown_with_reasons() -> None:
    f = _probe("none")
    unknown = f["unknown"]
    assert isinstance(unknown, dict)
    assert "no NVIDIA kernel module" in unknown["driver.kernel_module"]
    assert "libcuda.so" in unknown["driver.userspace"]
    assert f["os"] == {"pretty_name": "Debian GNU/Linux 12 (bookworm)", "id": "debian", "version_id": "12"}


def test_doctor_cli_on_this_cpu_box(tmp_path: Path) -> None:
    r = envbuilder("--workdir", str(tmp_path), "doctor", "--json")
    assert r.code == 0, r.err
    facts = json.loads(r.out)
    assert facts["glibc"] and "gpus" in facts and isinstance(facts["unknown"], dict)
    assert json.loads((tmp_path / "doctor.json").read_text())["hostname"] == facts["hostname"]


def test_h200_fixture_is_read_correctly() -> None:
    """The real `envbuilder doctor --json` output of the lent H200 (recorded 2026-12-02)."""
    f = doctor.load_facts(FIXTURES / "h200-doctor.json")
    assert f["driver"]["kernel_module"] == "580.159.04" and f["driver"]["kernel_module_flavor"] == "open"
    assert f["driver"]["userspace"] == "580.159.04" and f["driver"]["cuda_supported"] == "13.0"
    (gpu,) = f["gpus"]
    assert gpu["name"] == "NVIDIA H200" and gpu["compute_capability"] == "9.0" and gpu["memory_mib"] == 143771
    assert f["glibc"] == "2.39" and f["os"]["version_id"] == "24.04"


def test_minimal_hand_written_facts(tmp_path: Path) -> None:
    p = write(tmp_path / "f.json", json.dumps({"driver": {"kernel_module": "580.126.09", "userspace": "590.48.01"},
                                               "gpus": [{"name": "NVIDIA RTX A6000", "memory_mib": 49140, "compute_capability": "8.6"}],
                                               "glibc": "2.35"}))
    f = doctor.load_facts(p)
    assert f["driver"]["userspace"] == "590.48.01" and f["unknown"] == {}


@pytest.mark.parametrize(("doc", "key"), [
    ({"driver": {"kernel_module": 580}}, "driver.kernel_module"),
    ({"gpus": [{"memory_mib": "lots"}]}, "gpus[0].memory_mib"),
    ({"gpus": [{"compute_capability": 8.6}]}, "gpus[0].compute_capability"),
    ({"drivers": {}}, "drivers: unknown field (did you mean 'driver'?)"),
])
def test_bad_facts_name_the_key(tmp_path: Path, doc: dict[str, object], key: str) -> None:
    p = write(tmp_path / "f.json", json.dumps(doc))
    with pytest.raises(InputError) as e:
        doctor.load_facts(p)
    assert key in str(e.value) and str(p) in str(e.value)
