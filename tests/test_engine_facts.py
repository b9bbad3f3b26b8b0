"""Engine knowledge read from SGLang's own wheels: flags, deprecated aliases, removals, log formats.

The fast tests read real excerpts of the released wheels (tests/fixtures/sglang-wheels/VERSION/..., written by
tools/sglang_excerpts.py; each file names its wheel, path and lines) packed into a wheel-shaped zip; the
``network`` test downloads one real release. The monitor tests replay real H200 start-ups (SGLang 0.5.17,
reports/h200-sglang-0.5.17/) as they are and rewritten into every other release's formats, the formats taken
from that release's wheel by the reader under test.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from envbuilder import monitor
from envbuilder.engines import SGLANG, milestone_name
from envbuilder.engines import facts as F

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXCERPTS = FIXTURES / "sglang-wheels"
RUNS = FIXTURES / "sglang-runs" / "0.5.17-h200"
VERSIONS = sorted((p.name for p in EXCERPTS.iterdir()), key=lambda v: tuple(int(x) for x in v.split(".")))
LAUNCH = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--mamba-scheduler-strategy",
          "extra_buffer", "--cuda-graph-max-bs", "8", "--tp-size", "2"]  # fmt: skip


def wheel_of(version: str, dest: Path) -> Path:
    """A wheel-shaped zip of the release's excerpts (what read_wheel reads from the real wheel)."""
    whl = dest / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for f in sorted((EXCERPTS / version).rglob("*.py.txt")):  # .txt: kept out of the linters' way
            zf.write(f, f.relative_to(EXCERPTS / version).as_posix().removesuffix(".txt"))
    return whl


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, F.EngineFacts]:
    d = tmp_path_factory.mktemp("wheels")
    return {v: F.read_wheel(wheel_of(v, d)) for v in VERSIONS}


def history(releases: dict[str, F.EngineFacts], version: str) -> list[F.EngineFacts]:
    return [f for v, f in releases.items() if VERSIONS.index(v) < VERSIONS.index(version)]


def test_the_flags_as_each_release_defines_them(releases: dict[str, F.EngineFacts]) -> None:
    # 0.5.11 defines both flags with add_argument; 0.5.14 keeps them as deprecated aliases (DeprecatedAliasStoreAction
    # with new_flag=) and derives the new names from annotated fields; 0.5.20 has only the new names
    old = releases["0.5.11"].flag("--cuda-graph-max-bs")
    assert old is not None and not old.deprecated
    alias = releases["0.5.14"].flag("--cuda-graph-max-bs")
    assert alias is not None and alias.deprecated and alias.replacement == "--cuda-graph-max-bs-decode"
    mamba = releases["0.5.14"].flag("--mamba-scheduler-strategy")
    assert mamba is not None and mamba.deprecated and mamba.replacement == "--mamba-radix-cache-strategy"
    new = releases["0.5.14"].flag("--mamba-radix-cache-strategy")  # choices named by a constant there
    assert new is not None and new.choices_expr == "MAMBA_RADIX_CACHE_STRATEGY_CHOICES"
    literal = releases["0.5.20"].flag("--mamba-radix-cache-strategy")
    assert literal is not None and literal.choices == ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
    assert "--cuda-graph-max-bs-decode" in releases["0.5.20"].options()
    assert "--cuda-graph-max-bs" not in releases["0.5.20"].options()
    assert "--mamba-scheduler-strategy" not in releases["0.5.20"].options()


@pytest.mark.parametrize("version", ["0.5.9", "0.5.11", "0.5.13"])
def test_the_production_launch_parses_up_to_0_5_13(releases: dict[str, F.EngineFacts], version: str) -> None:
    check = F.check_flags(releases[version], LAUNCH, history(releases, version))
    assert check.problems == ()


@pytest.mark.parametrize("version", ["0.5.14", "0.5.17", "0.5.19"])
def test_0_5_14_to_0_5_19_accept_the_old_flags_as_deprecated(releases: dict[str, F.EngineFacts], version: str) -> None:
    check = F.check_flags(releases[version], LAUNCH, history(releases, version))
    assert check.problems == ()
    assert {(n.flag, n.replacement) for n in check.notes if n.kind == "deprecated"} == {
        ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
        ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")}


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.23"])
def test_from_0_5_20_both_flags_are_gone_and_the_replacement_is_named(releases: dict[str, F.EngineFacts],
                                                                      version: str) -> None:  # fmt: skip
    check = F.check_flags(releases[version], LAUNCH, history(releases, version))
    by_flag = {p.flag: p for p in check.problems}
    graph = by_flag["--cuda-graph-max-bs"]
    assert graph.kind == "ambiguous"  # argparse: a prefix of --cuda-graph-max-bs-decode and -prefill
    assert graph.replacement == "--cuda-graph-max-bs-decode"
    assert "since 0.5.14" in graph.message and "last accepted in 0.5.19" in graph.message
    mamba = by_flag["--mamba-scheduler-strategy"]
    assert mamba.kind == "unknown" and mamba.replacement == "--mamba-radix-cache-strategy"
    assert set(by_flag) == {"--cuda-graph-max-bs", "--mamba-scheduler-strategy"}


def test_a_value_outside_the_choices_is_refused(releases: dict[str, F.EngineFacts]) -> None:
    check = F.check_flags(releases["0.5.20"], ["--mamba-radix-cache-strategy", "extra-buffer"])
    assert [p.kind for p in check.problems] == ["bad-choice"]


def test_flag_changes_between_two_releases(releases: dict[str, F.EngineFacts]) -> None:
    changes = F.flag_changes(releases["0.5.19"], releases["0.5.20"])
    assert "removed --cuda-graph-max-bs (use --cuda-graph-max-bs-decode)" in changes
    assert "deprecated --cuda-graph-max-bs (use --cuda-graph-max-bs-decode)" in F.flag_changes(
        releases["0.5.13"], releases["0.5.14"])


def test_the_log_formats_each_release_prints(releases: dict[str, F.EngineFacts]) -> None:
    kv = {v: " | ".join(lf.literal for lf in f.formats("kv_cache")) for v, f in releases.items()}
    assert "dtype" not in kv["0.5.11"] and "dtype: {}, #tokens" in kv["0.5.13"]  # the dtype field from 0.5.13
    assert "Post-capture KV sizing" in kv["0.5.19"]  # the KV pool is sized after graph capture from 0.5.18
    dist = {v: f.formats("torch_distributed")[0].literal for v, f in releases.items()}
    assert dist["0.5.20"] == "Init torch distributed begin." and dist["0.5.21"] == "Init parallel begin."
    capture = {v: {lf.literal.split(" begin")[0] for lf in f.formats("graph_capture_begin")} for v, f in releases.items()}
    assert "Capture {} CUDA graph" in capture["0.5.14"] and "Capture {} CUDA graph" not in capture["0.5.13"]
    assert not releases["0.5.14"].formats("piecewise_begin") and releases["0.5.13"].formats("piecewise_begin")
    assert [releases[v].server_args_repr for v in ("0.5.17", "0.5.19", "0.5.23")] == ["dataclass", "dict", "dict"]
    for f in releases.values():  # what stays: the ready line, Mamba's pool line, max_total_num_tokens=
        assert f.formats("ready") and f.formats("mamba_cache") and f.formats("max_tokens")


def test_facts_round_trip_through_json(releases: dict[str, F.EngineFacts]) -> None:
    f = releases["0.5.20"]
    assert F.EngineFacts.from_json(f.to_json()) == f


def test_graph_capture_lines_are_named_by_what_they_capture() -> None:
    assert milestone_name("graph_capture_end", "Capture target verify CUDA graph end. elapsed=2.92 s") == "graph_capture_end"
    assert milestone_name("graph_capture_end", "Capture draft decode CUDA graph end. elapsed=3.77 s") == "draft_graph_capture_end"
    assert milestone_name("graph_capture_begin", "Capture target prefill CUDA graph begin.") == "prefill_graph_capture_begin"
    assert milestone_name("graph_capture_begin", "Capture draft prefill CUDA graph begin.") == "draft_prefill_graph_capture_begin"
    assert milestone_name("graph_capture_end", "Capture piecewise CUDA graph end. Time elapsed: 8 s") == "piecewise_end"


def _watch(lines: list[str], spec: object) -> monitor.LaunchOutcome:
    return monitor.watch(monitor.replay_events(lines, None), spec, ready_check=lambda: None)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec_from", ["wheel", "fallback"])
def test_the_real_0_5_17_start_up_reads_every_phase(releases: dict[str, F.EngineFacts], spec_from: str) -> None:
    spec = F.engine_spec(SGLANG, releases["0.5.17"]) if spec_from == "wheel" else SGLANG
    out = _watch(monitor.read_log(RUNS / "spec_standalone.log"), spec)
    assert out.ready and out.kv_tokens == 796116
    # the values SGLang 0.5.17 printed on the H200: "Capture target verify CUDA graph end. elapsed=2.92 s", …
    assert out.phases["graph_capture"] == 2.92 and out.phases["prefill_graph_capture"] == 8.48
    assert out.phases["draft_graph_capture"] == 3.77 and out.phases["draft_prefill_graph_capture"] == 8.44
    assert out.phases["weights"] == 0.25 and out.phases["imports"] > 0
    plain = _watch(monitor.read_log(RUNS / "plain.log"), spec)
    assert plain.ready and plain.kv_tokens == 1604702 and plain.phases["graph_capture"] == 3.04


@pytest.mark.parametrize("version", VERSIONS)
def test_a_real_start_up_rewritten_into_each_release_s_formats_still_reads(releases: dict[str, F.EngineFacts],
                                                                            version: str) -> None:  # fmt: skip
    src = releases["0.5.17"]
    dst = releases[version]
    lines = [x for ln in monitor.read_log(RUNS / "spec_standalone.log") if (x := F.translate_line(ln, src, dst))]
    text = "\n".join(lines)
    if version in ("0.5.21", "0.5.23"):
        assert "Init parallel begin." in text and "Init torch distributed begin." not in text
    if version in ("0.5.19", "0.5.23"):
        assert "Post-capture KV sizing: KV cache allocated. dtype: " in text
    for spec in (F.engine_spec(SGLANG, dst), SGLANG):  # the release's own formats, and the hand-kept fallback
        out = _watch(lines, spec)
        assert out.ready, version
        assert out.kv_tokens == 796116, version
        assert out.phases["weights"] == 0.25, version
        assert out.phases["graph_capture"] == 2.92, version
        assert out.phases.get("prefill_graph_capture", out.phases.get("piecewise_compile")) == 8.48, version
        assert any(h.name == "torch_distributed" for h in out.milestones), version
        if version not in ("0.5.9", "0.5.11", "0.5.13"):  # the draft's graphs: named from 0.5.14 on
            assert out.phases["draft_graph_capture"] == 3.77, version


@pytest.mark.network
def test_a_real_release_is_read_from_its_wheel_and_cached(tmp_path: Path) -> None:
    from envbuilder.indexconfig import require_read_url

    f = F.facts_for("sglang", "0.5.20", tmp_path, require_read_url((), "test"))  # the user's configured index
    assert (tmp_path / "engine-facts" / "sglang-0.5.20.json").exists()
    assert not list((tmp_path / "engine-wheels").glob("*.whl"))  # the facts are kept, the wheel is not
    check = F.check_flags(f, ["--cuda-graph-max-bs", "8"])
    assert check.problems[0].kind == "ambiguous"
    assert F.facts_for("sglang", "0.5.20", tmp_path, "http://127.0.0.1:9/simple") == f  # from the cache, no index


def test_the_smoke_stage_reads_a_0_5_23_start_up_with_0_5_23_s_formats(releases: dict[str, F.EngineFacts],
                                                                        tmp_path: Path) -> None:  # fmt: skip
    """End to end: the real H200 0.5.11 plain start-up rewritten into 0.5.23's formats (from 0.5.23's wheel),
    replayed as a server process (tests/replay_sglang.py) for a 0.5.23 cell; the smoke stage picks 0.5.23's
    formats from the cache the import stage / watch fill."""
    from tests.test_smoke import H200, _replay_matrix, _smoke

    old = releases["0.5.11"]
    rec = tmp_path / "rec"
    rec.mkdir()
    lines = [x for ln in monitor.read_log(H200 / "plain.log") if (x := F.translate_line(ln, old, releases["0.5.23"]))]
    (rec / "plain.log").write_text("\n".join(lines) + "\n")
    (rec / "plain.json").write_text((H200 / "plain.json").read_text())
    facts_json = tmp_path / "wd" / "cache" / "engine-facts" / "sglang-0.5.23.json"
    facts_json.parent.mkdir(parents=True)
    facts_json.write_text(json.dumps(releases["0.5.23"].to_json()))
    r = _smoke(tmp_path, _replay_matrix(f'"--recordings", "{rec}"').replace('"0.5.11"', '"0.5.23"'),
               checks=("golden",))
    smoke = r.stage("smoke")
    assert smoke is not None and smoke.status.value == "pass", smoke
    launch = smoke.details["launch"]
    assert launch["kv_tokens"] == 1606158
    assert launch["phases"]["graph_capture"] == 42.59 and launch["phases"]["prefill_graph_capture"] == 15.44
    assert any("Capture target decode CUDA graph end." in x and "elapsed=42.59 s" in x for x in lines)


def test_the_launch_uses_the_release_s_own_spelling(releases: dict[str, F.EngineFacts]) -> None:
    spec = F.engine_spec(SGLANG, releases["0.5.20"])
    argv = spec.launch_argv("python3", "/m", "127.0.0.1", 30000, [], tp=2, context_length=8192)
    assert argv[argv.index("2") - 1] == "--tp-size" and "--tp" not in argv
    assert F.check_flags(releases["0.5.20"], argv[3:]).problems == ()  # every adapter flag exists in 0.5.20
    assert "--tp" in SGLANG.launch_argv("python3", "/m", "127.0.0.1", 30000, [], tp=2)  # wheel not read: the prefix


def test_a_flag_no_release_had_is_not_called_gone(releases: dict[str, F.EngineFacts]) -> None:
    (bogus,) = F.check_flags(releases["0.5.20"], ["--bogus"], history(releases, "0.5.20")).problems
    assert bogus.kind == "unknown" and bogus.message == "--bogus is not a flag of sglang 0.5.20"
    (typo,) = F.check_flags(releases["0.5.11"], ["--mem-fraction-statc", "0.8"], history(releases, "0.5.11")).problems
    assert typo.message == "--mem-fraction-statc is not a flag of sglang 0.5.11 (did you mean '--mem-fraction-static'?)"
