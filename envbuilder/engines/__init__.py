"""Engine adapters: how to launch a cell's server and how to read its start-up, one class per engine.

An adapter (:class:`EngineSpec`) owns its launch command (:meth:`EngineSpec.launch_argv`), its flags (the
speculative-decoding ones, whether SGLang's own argument checks apply), its log patterns (ready line,
milestones) and its failure patterns. ``sglang`` is the production engine; ``llama-cpp`` runs on a CPU and is
what the CPU test suite serves SmolLM2 with. :data:`ENGINES` is the registry: no code outside it branches on an
engine's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Milestone:
    """A log line that marks a point of the start-up; ``elapsed`` captures a duration the engine printed."""

    name: str
    pattern: re.Pattern[str]
    slow: bool = False  # the phase it begins may legitimately print nothing for long (graph capture)
    needles: tuple[str, ...] = ()  # literal parts a matching line contains: checked first (cheap, no backtracking)

    def search(self, line: str) -> re.Match[str] | None:
        if not all(n in line for n in self.needles):
            return None
        return self.pattern.search(line)


@dataclass(frozen=True, kw_only=True)
class FailurePattern:
    reason: str  # a Reason slug
    pattern: re.Pattern[str]
    fatal: bool = False  # decide at once (the engine will not exit by itself soon)


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """One engine: its package and module, log and failure patterns, flags, and how it is launched."""

    name: str
    package: str  # the distribution whose version decides flag differences
    module: str  # python -m <module>
    ready: tuple[re.Pattern[str], ...]
    milestones: tuple[Milestone, ...]
    failures: tuple[FailurePattern, ...]
    spec_flags: tuple[str, ...] = ()  # flags that turn speculative decoding on (the reference launch drops them)
    launch_check: bool = False  # its own argument checks can run without a GPU (envbuilder.launchcheck)
    needs_gpu: bool = False  # its server needs a GPU unless the cell is a CPU cell
    thinking_switch: bool = False  # chat_template_kwargs.enable_thinking turns reasoning on and off
    per_request_accept_length: bool = False  # /generate's meta_info reports the speculative acceptance length
    wheel_facts: bool = False  # its flags and log formats can be read from its release's wheel (engines.facts)
    options: frozenset[str] = frozenset()  # the release's launch options, when read from its wheel (else unknown)
    sglang_rules: bool = False  # envbuilder's per-release SGLang data applies (launchargs, memory, ports)

    def launch_argv(self, python: str, model: str, host: str, port: int, user_args: Sequence[str], *, tp: int = 1,
                    context_length: int | None = None) -> list[str]:  # fmt: skip
        """The launch command for one cell; the user's ``[server] args`` pass through untouched, appended last."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class SGLangEngine(EngineSpec):
    def launch_argv(self, python: str, model: str, host: str, port: int, user_args: Sequence[str], *, tp: int = 1,
                    context_length: int | None = None) -> list[str]:  # fmt: skip
        argv = [python, "-m", self.module, "--model-path", model, "--host", host, "--port", str(port)]
        if tp > 1:  # the release's own spelling when its wheel was read ("--tp" is only a prefix of it)
            argv += ["--tp-size" if "--tp-size" in self.options else "--tp", str(tp)]
        if context_length:
            argv += ["--context-length", str(context_length)]
        metrics = ["--enable-metrics"] if not self.options or "--enable-metrics" in self.options else []
        return [*argv, *metrics, *user_args]


@dataclass(frozen=True, kw_only=True)
class LlamaCppEngine(EngineSpec):
    def launch_argv(self, python: str, model: str, host: str, port: int, user_args: Sequence[str], *, tp: int = 1,
                    context_length: int | None = None) -> list[str]:  # fmt: skip
        argv = [python, "-m", self.module, "--model", model, "--host", host, "--port", str(port)]
        if context_length:
            argv += ["--n_ctx", str(context_length)]
        return [*argv, *user_args]


def milestone_name(name: str, line: str) -> str:
    """A graph-capture milestone named by what the line captures: ``draft_graph_capture_end`` for a draft
    model's graphs (``Capture draft cuda graph end``, ``Capture draft decode CUDA graph end``),
    ``prefill_graph_capture_begin`` for the target's prefill graph (0.5.14+), ``piecewise_*`` for ≤ 0.5.13's,
    else ``graph_capture_*``."""
    if not name.startswith("graph_capture_"):
        return name
    head = line[: line.find("graph")] if "graph" in line else line
    if re.search(r"\bpiecewise\b", head):  # ≤ 0.5.13's prefill graphs, when one template prints both
        return name.replace("graph_capture_", "piecewise_")
    if re.search(r"\bdraft\b", head):
        return ("draft_prefill_" if re.search(r"\bprefill\b", head) else "draft_") + name
    if re.search(r"\bprefill\b", head):
        return "prefill_" + name
    return name


def drop_flags(args: Sequence[str], unwanted: Callable[[str], bool]) -> list[str]:
    """``args`` without the flags ``unwanted`` names, each with the value that follows it (``--f v`` or ``--f=v``)."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if unwanted(a.split("=", 1)[0]):
            skip = "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(a)
    return out


def _re(p: str) -> re.Pattern[str]:
    return re.compile(p)


SGLANG = SGLangEngine(
    name="sglang",
    spec_flags=("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-draft-model-revision"),
    launch_check=True,
    needs_gpu=True,
    thinking_switch=True,
    per_request_accept_length=True,
    sglang_rules=True,
    wheel_facts=True,
    package="sglang",
    module="sglang.launch_server",
    ready=(_re(r"The server is fired up and ready to roll!"),),
    milestones=(
        # Hand-kept fallbacks covering 0.5.9-0.5.23, used when the release's own formats (engines/facts.py, read
        # from its wheel) are not at hand; a graph-capture line is named by what it captures (milestone_name).
        Milestone(name="torch_distributed", pattern=_re(r"Init (?:torch distributed|parallel) begin")),
        Milestone(name="load_weight_begin", pattern=_re(r"Load weight begin"), slow=True),
        Milestone(name="load_weight_end", pattern=_re(r"Load weight end\. elapsed=(?P<elapsed>[\d.]+) s")),
        Milestone(name="kv_cache",
                  pattern=_re(r"(?:KV Cache is allocated|KV sizing: KV cache allocated)\. (?:dtype: \S+, )?"
                              r"#tokens: (?P<tokens>\d+)")),
        Milestone(name="mamba_cache", pattern=_re(r"Mamba Cache is allocated")),
        Milestone(name="graph_capture_begin", pattern=_re(r"Capture (?!piecewise)(?:[\w ]+ )?(?:cuda|CUDA) graph begin"),
                  slow=True),
        Milestone(name="graph_capture_end",
                  pattern=_re(r"Capture (?!piecewise)(?:[\w ]+ )?(?:cuda|CUDA) graph end\. "
                              r"(?:Time elapsed: |.*?elapsed=)(?P<elapsed>[\d.]+) s")),
        Milestone(name="piecewise_begin", pattern=_re(r"Capture piecewise CUDA graph begin"), slow=True),
        Milestone(name="piecewise_end",
                  pattern=_re(r"Capture piecewise CUDA graph end\. Time elapsed: (?P<elapsed>[\d.]+) s")),
        Milestone(name="max_tokens", pattern=_re(r"max_total_num_tokens=(?P<tokens>\d+).*context_len=(?P<ctx>\d+)")),
        Milestone(name="http_up", pattern=_re(r"Uvicorn running on"), slow=True),
    ),
    failures=(
        FailurePattern(reason="oom", pattern=_re(r"Not enough memory|CUDA out of memory|OutOfMemoryError")),
        FailurePattern(reason="graph-capture-failed", pattern=_re(r"Capture (?:cuda|CUDA) graph failed")),
        FailurePattern(
            reason="crash",
            pattern=_re(r"Received sigquit from a child process|scheduler died during initialization|"
                        r"Rank \d+ scheduler is dead"),
            fatal=True,
        ),
        FailurePattern(reason="crash", pattern=_re(r"Scheduler hit an exception")),
    ),
)

LLAMA_CPP = LlamaCppEngine(
    name="llama-cpp",
    spec_flags=("--draft_model", "--draft_model_num_pred_tokens"),
    package="llama-cpp-python",
    module="llama_cpp.server",
    ready=(_re(r"Uvicorn running on"),),
    milestones=(
        Milestone(name="load_weight_begin", pattern=_re(r"llama_model_loader: loaded meta data"), slow=True),
        Milestone(name="load_weight_end", pattern=_re(r"load_tensors:.*buffer size|llm_load_tensors:")),
        Milestone(name="kv_cache", pattern=_re(r"llama_kv_cache|llama_context: KV self size|KV buffer size")),
        Milestone(name="http_up", pattern=_re(r"Uvicorn running on")),
    ),
    failures=(
        FailurePattern(reason="oom", pattern=_re(r"failed to allocate|out of memory")),
    ),
)

ENGINES = {e.name: e for e in (SGLANG, LLAMA_CPP)}


def engine(name: str) -> EngineSpec:
    return ENGINES[name]


def launch_argv(spec: EngineSpec, python: str, model: str, host: str, port: int, user_args: Sequence[str],
                *, tp: int = 1, context_length: int | None = None) -> list[str]:
    """The launch command of ``spec``'s engine for one cell (see :meth:`EngineSpec.launch_argv`)."""
    return spec.launch_argv(python, model, host, port, user_args, tp=tp, context_length=context_length)
