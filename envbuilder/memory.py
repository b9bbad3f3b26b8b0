"""How many KV-cache tokens SGLang will have, computed the way that SGLang release computes it.

Per release, the numbers live in ``envbuilder/rules/sglang_memory.toml`` with the function of the release's
code each comes from. :func:`predict` reads the final launch flags (``launchargs``), the model's
``config.json`` and the GPU's memory and returns a :class:`MemoryPlan`: ``mem_fraction_static`` (given, or the
default rule from GPU memory, tp, chunked prefill, CUDA graphs, speculation), the hybrid (Mamba/Gated
DeltaNet) state pool and its speculative intermediate states, and ``kv_tokens`` = the ``max_total_num_tokens``
SGLang will log per rank.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from envbuilder import launchargs
from envbuilder.artifacts import HostFacts
from envbuilder.errors import EnvbuilderError
from envbuilder.matrix import Cell, Matrix

GIB = 1 << 30
MIB = 1 << 20
COMBINED_FRACTION_CAP = 0.88  # a raised fraction envbuilder proposes at most (SGLang's own fallback default)
KV_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp4_e2m1": 0.5}


@cache
def rules() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(
        resources.files("envbuilder").joinpath("rules/sglang_memory.toml").read_text())
    return data


def rules_for(version: str | None) -> tuple[str, dict[str, Any]]:
    """(release whose row applies, the row): the newest row not newer than ``version`` (newest if unknown)."""
    rows: dict[str, Any] = rules()["engine"]
    pick = launchargs.pick_release(rows, version)
    return pick, rows[pick]


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """What SGLang's pools need from config.json, per rank."""

    full_layers: int
    linear_layers: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    linear_value_heads: int
    linear_key_heads: int
    linear_key_dim: int
    linear_value_dim: int
    conv_kernel: int
    ssm_dtype_bytes: int
    context_length: int  # the model's own (max_position_embeddings)
    vision: tuple[int, int] | None  # (ViT layers, ViT hidden size) for multimodal checkpoints

    @property
    def hybrid(self) -> bool:
        return self.linear_layers > 0

    def cell_bytes(self, tp: int, kv_bytes: float) -> float:
        """KV bytes per token per rank (DefaultPoolConfigurator._compute_cell_size / get_cell_size_per_token)."""
        heads = max(1, self.kv_heads // tp)
        return heads * (self.head_dim + self.v_head_dim) * self.full_layers * kv_bytes

    def state_bytes(self, tp: int) -> int:
        """Mamba state per request per rank (BaseLinearStateParams.mamba_cache_per_req): conv (bf16) + SSM."""
        if not self.hybrid:
            return 0
        conv_dim = self.linear_value_dim * self.linear_value_heads + 2 * self.linear_key_heads * self.linear_key_dim
        conv = (conv_dim // tp) * (self.conv_kernel - 1) * 2
        ssm = (self.linear_value_heads // tp) * self.linear_value_dim * self.linear_key_dim * self.ssm_dtype_bytes
        return (conv + ssm) * self.linear_layers


def shape(cfg: dict[str, Any]) -> ModelShape:
    """The pool-relevant numbers of a config.json (``text_config`` of multimodal wrappers already merged)."""
    from envbuilder import model

    full, linear = model.full_attention_layers(cfg)
    heads = int(cfg.get("num_attention_heads", 1))
    head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size", 0)) // max(1, heads))
    vision = cfg.get("vision_config")
    vit = None
    if isinstance(vision, dict):
        vit = (int(vision.get("depth") or vision.get("num_hidden_layers") or 24), int(vision.get("hidden_size") or 1024))
    ssm_dtype = str(cfg.get("mamba_ssm_dtype") or "float32")
    return ModelShape(full_layers=full, linear_layers=linear, kv_heads=int(cfg.get("num_key_value_heads", heads)),
                      head_dim=head_dim, v_head_dim=int(cfg.get("v_head_dim") or head_dim),
                      linear_value_heads=int(cfg.get("linear_num_value_heads", 0)),
                      linear_key_heads=int(cfg.get("linear_num_key_heads", 0)),
                      linear_key_dim=int(cfg.get("linear_key_head_dim", 0)),
                      linear_value_dim=int(cfg.get("linear_value_head_dim", 0)),
                      conv_kernel=int(cfg.get("linear_conv_kernel_dim", 4)),
                      ssm_dtype_bytes=4 if ssm_dtype == "float32" else 2,
                      context_length=int(cfg.get("max_position_embeddings", 0) or 0), vision=vit)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """SGLang's memory split on one rank, as predicted (all sizes in bytes)."""

    engine_rules: str  # the release whose rules were used
    gpu_mib: float
    tp: int
    mem_fraction_static: float
    mem_fraction_given: bool
    reserved_mib: float | None  # the default rule's reserve (None when the fraction was given)
    free_before_weights: float
    weights: float
    rest: float  # for the pools: free_before x fraction - weights
    state_per_request: int
    spec_requests: int  # sequences whose speculative intermediate states are reserved
    draft_tokens: int
    spec_intermediate: float
    mamba_cache_size: int | None
    state_pool: float
    cell: float
    kv_tokens: int
    max_running_requests: int
    context_length: int
    speculative_algorithm: str | None
    sources: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = asdict(self)
        out["sources"] = list(self.sources)
        return out

    def summary(self) -> str:
        g = GIB
        state = (f" - hybrid state {self.state_pool / g:.2f} GiB ({self.mamba_cache_size} slots)"
                 + (f" - speculative intermediate states {self.spec_intermediate / g:.2f} GiB"
                    if self.spec_intermediate else "")) if self.state_per_request else ""  # fmt: skip
        frac = (f"mem_fraction_static {self.mem_fraction_static:.3f}"
                + ("" if self.mem_fraction_given else f" (SGLang {self.engine_rules} default: reserve "
                                                      f"{self.reserved_mib:.0f} MiB of {self.gpu_mib:.0f})"))  # fmt: skip
        return (f"{frac}: {self.free_before_weights / g:.2f} GiB free x {self.mem_fraction_static:.3f} - weights "
                f"{self.weights / g:.2f} GiB{state} = KV {max(0.0, self.kv_tokens * self.cell) / g:.2f} GiB = "
                f"{self.kv_tokens} tokens per rank (tp={self.tp}); max_running_requests {self.max_running_requests}")


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v not in (None, "") else None
    except ValueError:
        return None


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


class BadLaunchFlag(EnvbuilderError):
    """A memory flag of the launch has a value SGLang would refuse (or one that makes no launch)."""

    def __init__(self, flag: str, value: str, accepts: str) -> None:
        self.flag, self.value, self.accepts = flag, value, accepts
        shown = repr(value) if value else "no value"
        super().__init__(f"{flag} {shown}: SGLang takes {accepts}")


def _human_readable_int(v: str) -> int | None:
    """SGLang's ``human_readable_int`` (the ``--context-length`` type): ``32768``, ``32k`` (x1000), ``32K`` (x1024)."""
    hit = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmgKMG])", v.strip(), re.ASCII)
    if hit is None:
        try:
            return int(v)
        except ValueError:
            return None
    number, suffix = hit.groups()
    if suffix.islower():
        return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9}[suffix])
    return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30}[suffix] if number.isdigit() else None


def check_flags(p: launchargs.Parsed) -> None:
    """Raise :class:`BadLaunchFlag` when a flag the memory split reads has a value SGLang refuses or that
    makes no launch (types from sglang 0.5.11 ``ServerArgs.add_cli_args``: ``--mem-fraction-static``
    ``type=float``, ``--max-running-requests`` ``type=int``, ``--context-length`` ``type=human_readable_int``)."""
    if p.has("--mem-fraction-static"):
        raw = p.get("--mem-fraction-static") or ""
        f = _float(raw)
        if f is None or not 0 < f < 1:
            raise BadLaunchFlag("--mem-fraction-static", raw, "a float in (0, 1), the share of GPU memory for "
                                                             "weights and KV cache")
    if p.has("--max-running-requests"):
        raw = p.get("--max-running-requests") or ""
        n = _int(raw)
        if n is None or n <= 0:
            raise BadLaunchFlag("--max-running-requests", raw, "a positive int")
    if p.has("--context-length"):
        raw = p.get("--context-length") or ""
        n = _human_readable_int(raw) if raw else None
        if n is None or n <= 0:
            raise BadLaunchFlag("--context-length", raw, "a positive int (32768, or 32k = 32000, 32K = 32768)")


def predict(*, cfg: dict[str, Any], weight_bytes: float, gpu_mib: float, argv: Sequence[str],
            version: str | None, tp: int = 1, context_length: int | None = None) -> MemoryPlan:  # fmt: skip
    """SGLang's ``max_total_num_tokens`` per rank (and what leads to it) for this launch on this GPU.

    Raises :class:`BadLaunchFlag` when a memory flag's value is one SGLang refuses (see :func:`check_flags`)."""
    pick, row = rules_for(version)
    opts = launchargs.options_for(version)
    p = launchargs.parse(argv, opts)
    check_flags(p)
    ms = shape(cfg)
    tp = _int(p.get("--tp-size") or p.get("--tensor-parallel-size") or p.get("--tp")) or tp
    given_ctx = p.get("--context-length")
    ctx = (_human_readable_int(given_ctx) if given_ctx else None) or context_length or ms.context_length or 4096
    algo = (p.get("--speculative-algorithm") or "").upper() or None
    draft_tokens = _int(p.get("--speculative-num-draft-tokens"))
    if algo and draft_tokens is None:  # SGLang derives it from steps/topk; with topk 1 it is steps + 1
        draft_tokens = (_int(p.get("--speculative-num-steps")) or 3) + 1
    sources = [row["pool_source"], row["state_source"]]

    # mem_fraction_static: given, or the default rule (ServerArgs._handle_gpu_memory_settings)
    fraction = _float(p.get("--mem-fraction-static"))
    reserved: float | None = None
    if fraction is None:
        tier = next(t for t in rules()["tier"] if gpu_mib < float(t["below_mib"]))
        chunked = _int(p.get("--chunked-prefill-size")) or int(tier["chunked_prefill"])
        graph_bs = _int(p.get("--cuda-graph-max-bs")) or int(tier["graph_bs"] if tp < 4 else tier["graph_bs_tp4"])
        reserved = row["reserved_base_mib"] + max(chunked, row["activation_min_tokens"]) * row["activation_mib_per_token"]
        reserved += graph_bs * row["graph_mib_per_bs"] + tp / 8 * row["tp_mib"]
        piecewise_off = p.has("--disable-piecewise-cuda-graph") or ms.vision is not None or ms.hybrid
        if not piecewise_off:
            reserved += len(_piecewise_sizes(chunked)) * row["piecewise_mib_per_size"]
        if gpu_mib > row["floor_above_mib"]:
            reserved = max(reserved, float(row["floor_mib"]))
        if algo == "STANDALONE":
            reserved += row["spec_standalone_mib"]
        elif algo and algo != "NGRAM":
            reserved += row["spec_draft_mib"]
        fraction = round((gpu_mib - reserved) / gpu_mib, 3)
        if ms.vision is not None and row.get("vlm_factor") and not p.has("--language-only"):
            fraction *= _vlm_factor(*ms.vision)
        sources.insert(0, row["reserved_source"])

    max_reqs = _int(p.get("--max-running-requests"))
    if algo and max_reqs is None:
        max_reqs = int(row["spec_max_running_requests"])
        sources.append(row["spec_source"])

    free_before = gpu_mib * MIB - float(rules()["context"]["gib"]) * GIB
    weights = weight_bytes / tp
    rest = free_before * fraction - weights
    per_req = ms.state_bytes(tp)
    spec_inter = 0.0
    mamba_size: int | None = None
    state_pool = 0.0
    no_radix = p.has("--disable-radix-cache")
    if ms.hybrid:
        if algo and draft_tokens:
            spec_inter = float(per_req * (max_reqs or 0) * draft_tokens)
            rest -= spec_inter
        given = _int(p.get("--max-mamba-cache-size"))
        if given is not None:
            mamba_size = given
        elif no_radix and max_reqs is not None:
            mamba_size = max_reqs
        else:
            ratio = _float(p.get("--mamba-full-memory-ratio")) or float(row["mamba_full_memory_ratio"])
            mamba_size = int(max(0.0, rest * ratio / (1 + ratio)) // per_req)
        state_pool = float(mamba_size * per_req)
        rest -= state_pool
    kv_bytes = float(KV_DTYPE_BYTES.get(p.get("--kv-cache-dtype") or "auto", 2))
    cell = ms.cell_bytes(tp, kv_bytes)
    tokens = int(rest // cell) if cell else 0
    page = _int(p.get("--page-size")) or 1
    tokens = tokens // page * page
    cap = _int(p.get("--max-total-tokens"))
    if cap is not None:
        tokens = min(tokens, cap)

    # max_running_requests (model_runner._resolve_max_num_reqs / init_memory_pool)
    estimated = max(min(int(tokens / ctx * 512), 4096), 2048)
    if max_reqs is not None:
        running = min(max_reqs, estimated) if row["max_reqs_halves_tokens"] else max_reqs
    else:
        running = min(estimated, tokens // 2) if row["max_reqs_halves_tokens"] else estimated
    if ms.hybrid and mamba_size is not None:
        running = min(running, mamba_size // (1 if no_radix else int(row["mamba_ratio"])))
    return MemoryPlan(engine_rules=pick, gpu_mib=gpu_mib, tp=tp, mem_fraction_static=fraction,
                      mem_fraction_given=reserved is None, reserved_mib=reserved, free_before_weights=free_before,
                      weights=weights, rest=free_before * fraction - weights, state_per_request=per_req,
                      spec_requests=(max_reqs or 0) if algo else 0, draft_tokens=draft_tokens or 0,
                      spec_intermediate=spec_inter, mamba_cache_size=mamba_size, state_pool=state_pool, cell=cell,
                      kv_tokens=tokens, max_running_requests=max(0, running), context_length=ctx,
                      speculative_algorithm=algo, sources=tuple(sources))  # fmt: skip


def _piecewise_sizes(max_tokens: int) -> list[int]:
    """ServerArgs._generate_piecewise_cuda_graph_tokens (0.5.11): the capture sizes up to ``max_tokens``."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))  # fmt: skip
    return [s for s in sizes if s <= max_tokens]


def _vlm_factor(vit_layers: int, vit_hidden: int) -> float:
    """ServerArgs.adjust_mem_fraction_for_vlm: 0.95 x (1 - 0.1 x (ViT size / ViT-L/14 - 1)), clamped."""
    ratio = vit_layers * vit_hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


@dataclass(frozen=True, kw_only=True)
class Fix:
    flag: str
    value: str
    why: str

    def __str__(self) -> str:
        return f"{self.flag} {self.value} ({self.why})"


def fixes(plan: MemoryPlan, need_tokens: int) -> list[Fix]:
    """Flags (with the values they need) that give a pool of at least ``need_tokens`` tokens per rank."""
    out: list[Fix] = []
    free, cell = plan.free_before_weights, plan.cell
    fixed_pool = plan.mamba_cache_size is not None and plan.mamba_cache_size == plan.spec_requests
    split = plan.state_per_request > 0 and not fixed_pool  # the state pool grows with the fraction (ratio split)
    kv_need = need_tokens * cell * (1.9 if split else 1.0)
    fraction = (plan.weights + plan.spec_intermediate + (0.0 if split else plan.state_pool) + kv_need) / free
    if fraction < 0.98:
        out.append(Fix(flag="--mem-fraction-static", value=f"{fraction + 0.005:.3f}",
                       why=f"{need_tokens} KV tokens per rank need {fraction:.3f}"))  # fmt: skip
    if plan.state_per_request and plan.spec_requests:
        per_seq = plan.state_per_request * (plan.draft_tokens + (1 if fixed_pool else 0))
        budget = free * plan.mem_fraction_static - plan.weights - kv_need
        n = int(budget // per_seq) if per_seq else 0
        if 1 <= n < plan.spec_requests:
            out.append(Fix(flag="--max-running-requests", value=str(n),
                           why=f"{n} sequences' hybrid and speculative states leave {need_tokens} KV tokens"))  # fmt: skip
    if not out and plan.state_per_request and plan.spec_requests:  # neither alone: fewer sequences and a larger fraction
        for n in range(plan.spec_requests - 1, 0, -1):
            states = plan.state_per_request * n * (plan.draft_tokens + (1 if fixed_pool else 0))
            f = (plan.weights + states + kv_need) / free
            if f <= COMBINED_FRACTION_CAP:
                out.append(Fix(flag="--max-running-requests", value=f"{n} --mem-fraction-static {f + 0.005:.3f}",
                               why=f"{n} sequences' states and {need_tokens} KV tokens per rank fit in {f:.3f}"))  # fmt: skip
                break
    if 0 < plan.kv_tokens < need_tokens:
        out.append(Fix(flag="--context-length", value=str(plan.kv_tokens),
                       why=f"the pool holds {plan.kv_tokens} tokens"))  # fmt: skip
    return out


@dataclass(frozen=True, kw_only=True)
class KvComparison:
    """Predicted vs logged ``max_total_num_tokens`` per rank for one launch (stored in the smoke details as
    ``kv_tokens``; ``off`` = predicted / logged - 1; more than ``TOLERANCE`` off is a note in the report)."""

    predicted: int
    logged: int | None
    off: float | None
    within: bool | None
    max_running_requests: int
    mem_fraction_static: float
    plan: MemoryPlan

    TOLERANCE: ClassVar[float] = 0.15

    @classmethod
    def of(cls, plan: MemoryPlan, logged: int | None) -> KvComparison:
        off = (plan.kv_tokens / logged - 1) if logged else None
        return cls(predicted=plan.kv_tokens, logged=logged, off=off,
                   within=None if off is None else abs(off) <= cls.TOLERANCE,
                   max_running_requests=plan.max_running_requests, mem_fraction_static=plan.mem_fraction_static,
                   plan=plan)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"predicted": self.predicted, "logged": self.logged,
                "off": None if self.off is None else round(self.off, 4), "within_tolerance": self.within,
                "tolerance": self.TOLERANCE, "max_running_requests": self.max_running_requests,
                "mem_fraction_static": self.mem_fraction_static, "plan": self.plan.to_json()}  # fmt: skip


def weights_on_disk(model_dir: Path) -> float | None:
    """Bytes of the checkpoint's safetensors (index ``total_size``, else the files' sizes)."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            return float(json.loads(index.read_text())["metadata"]["total_size"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    files = list(model_dir.glob("*.safetensors"))
    return float(sum(f.stat().st_size for f in files)) if files else None


def predict_for_cell(m: Matrix, cell: Cell, facts: HostFacts, argv: Sequence[str], *,
                     model_path: str | None = None) -> MemoryPlan | str:  # fmt: skip
    """The plan for a cell's launch on the runner ``facts`` describe, or why there is none."""
    from envbuilder import model

    gpus = facts.gpus
    if not gpus or not all(g.memory_mib for g in gpus):
        return "GPU memory unknown"
    cfg_path = model.find_config(m.model, m.path.parent, where=str(m.path))
    if cfg_path is None and model_path and (Path(model_path) / "config.json").exists():
        cfg_path = Path(model_path) / "config.json"
    if cfg_path is None:
        return "no config.json for the model: give [model] config"
    cfg = model.read_config(cfg_path)
    weights = weights_on_disk(Path(model_path)) if model_path and Path(model_path).is_dir() else None
    if weights is None:
        fp = model.footprint(m.model, m.path.parent)
        if fp is None:
            return "model size unknown: give [model] parameters"
        weights = fp.weight_bytes
    tp = m.model.tp
    smallest = min(float(g.memory_mib or 0) for g in gpus[: max(1, tp)])
    version = cell.requirements().get("sglang")
    return predict(cfg=cfg, weight_bytes=weights, gpu_mib=smallest, argv=argv, version=version, tp=tp)


@dataclass(frozen=True, kw_only=True)
class RecordedStart:
    """What an SGLang server log says about its memory: the launch argv (``CMD`` line), the weights SGLang
    measured (``Load weight end ... mem usage``), the pools it logged (None where the start ended before)."""

    argv: tuple[str, ...]
    free_before_weights_gib: float | None  # "Load weight begin. avail mem=": what the GPU had free at that point
    weights_gib: float | None
    max_total_num_tokens: int | None
    max_mamba_cache_size: int | None
    max_running_requests: int | None


def read_log(text: str) -> RecordedStart:
    """Parse one server log as envbuilder writes it (first line ``CMD <argv>``)."""
    import re
    import shlex

    first = text.splitlines()[0] if text else ""
    argv = tuple(shlex.split(first[4:])) if first.startswith("CMD ") else ()

    def num(pattern: str) -> str | None:
        hit = re.search(pattern, text)
        return hit.group(1) if hit else None

    w = num(r"Load weight end\..*?mem usage=([\d.]+) GB")
    free = num(r"Load weight begin\. avail mem=([\d.]+) GB")
    tokens = num(r"max_total_num_tokens=(\d+)") or num(r"KV Cache is allocated\. #tokens: (\d+)")
    mamba = num(r"max_mamba_cache_size: (\d+)")
    running = num(r"max_total_num_tokens=\d+.*?max_running_requests=(\d+)")
    return RecordedStart(argv=argv, free_before_weights_gib=float(free) if free else None, weights_gib=float(w) if w else None, max_total_num_tokens=int(tokens) if tokens else None,
                         max_mamba_cache_size=int(mamba) if mamba else None,
                         max_running_requests=int(running) if running else None)  # fmt: skip
