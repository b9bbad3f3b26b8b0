"""launchargs: speculation read from the final argv the way each SGLang release's argparse reads it."""

from __future__ import annotations

import pytest

from envbuilder import launchargs

O11 = launchargs.options_for("0.5.11")
BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "30000"]


@pytest.mark.parametrize("algo", ["NEXTN", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH"])
@pytest.mark.parametrize("form", ["full", "equals", "abbrev"])
def test_every_algorithm_in_every_form(algo: str, form: str) -> None:
    flag = {"full": ["--speculative-algorithm", algo], "equals": [f"--speculative-algorithm={algo}"],
            "abbrev": ["--speculative-algo", algo.lower()]}[form]
    argv = [*BASE, *flag, "--speculative-num-steps", "3", "--disable-radix-cache"]
    assert algo in O11.speculative_algorithms
    assert launchargs.speculative_algorithm(argv, O11) == algo
    assert launchargs.without_speculation(argv, O11) == [*BASE, "--disable-radix-cache"]


def test_release_differences() -> None:
    assert "DFLASH" not in launchargs.options_for("0.5.9").speculative_algorithms
    assert launchargs.options_for("0.5.12").version == "0.5.11"  # newest known release not newer than it
    # 0.5.9 has --speculative-ngram-branch-length, gone in 0.5.11: the prefix is unique in one, not the other
    assert launchargs.options_for("0.5.9").canonical("--speculative-ngram-b") == "--speculative-ngram-branch-length"
    assert launchargs.options_for("0.5.11").canonical("--speculative-ngram-b") is None


def test_ambiguous_prefix_and_switches() -> None:
    # argparse refuses an ambiguous prefix: speculation is not on (the launch fails as bad-flag)
    assert launchargs.speculative_algorithm([*BASE, "--specul", "NEXTN"], O11) is None
    argv = [*BASE, "--speculative-adaptive", "--enable-multi-layer-eagle", "--speculative-algorithm", "EAGLE",
            "--trust-remote-code"]
    assert launchargs.without_speculation(argv, O11) == [*BASE, "--trust-remote-code"]
    assert launchargs.parse(["--mem-fraction-static", "0.3", "--mem-fraction-static=0.4"], O11).get(
        "--mem-fraction-static") == "0.4"


def test_no_speculation() -> None:
    assert launchargs.speculative_algorithm([*BASE, "--tp", "2"], O11) is None
    assert launchargs.without_speculation([*BASE, "--tp", "2"], O11) == [*BASE, "--tp", "2"]
