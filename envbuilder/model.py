"""What the served model needs: its config.json, parameter count, KV cache per token, linear-attention state.

Hybrid models (Qwen3.5/3.6 ``qwen3_5``, Qwen3-Next ``qwen3_next``: Gated DeltaNet layers with a
full-attention layer every ``full_attention_interval`` layers) keep a KV cache only in the
full-attention layers; the linear-attention layers hold a fixed-size state per sequence.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder import validate
from envbuilder.errors import InputError
from envbuilder.matrix import ModelConfig

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp16": 2, "bf16": 2, "float32": 4, "fp32": 4, "fp8": 1,
               "float8_e4m3fn": 1, "int8": 1, "int4": 0.5}  # fmt: skip
GIB = 1024**3


def find_config(model: ModelConfig, matrix_dir: Path, *, where: str | None = None) -> Path | None:
    """The model's config.json: ``[model] config``, a local model directory, or the Hugging Face cache.
    ``where``: the matrix file, for the message when ``[model] config`` names a file that is not there."""
    if model.config:
        p = (matrix_dir / model.config).expanduser()
        if not p.exists():
            raise InputError(where or str(matrix_dir), "[model].config", f"{p} does not exist")
        return p
    local = (matrix_dir / model.path).expanduser()
    if local.is_dir() and (local / "config.json").exists():
        return local / "config.json"
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub")
    repo = hub.expanduser() / ("models--" + model.path.replace("/", "--")) / "snapshots"
    if repo.is_dir():
        for snap in sorted(repo.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
            if (snap / "config.json").exists():
                return snap / "config.json"
    return None


def read_config(path: Path) -> dict[str, Any]:
    data = validate.model_config(path)
    text_config = data.get("text_config")
    if isinstance(text_config, dict):  # multimodal wrappers (qwen3_5 ships one): the LM is inside
        return {**data, **text_config}
    return data


@dataclass(frozen=True, kw_only=True)
class Footprint:
    parameters: int
    weight_bytes: float
    kv_bytes_per_token: int
    full_attention_layers: int
    linear_attention_layers: int
    state_bytes_per_sequence: int
    source: str


def full_attention_layers(cfg: dict[str, Any]) -> tuple[int, int]:
    """(full-attention layers, linear-attention layers)."""
    n = int(cfg.get("num_hidden_layers", 0))
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        full = sum(1 for t in types if "full" in str(t) or t == "attention")
        return full, len(types) - full
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        full = n // interval
        return full, n - full
    return n, 0


def estimate_parameters(cfg: dict[str, Any]) -> int:
    """Parameter count of a Llama-style decoder from its config (embeddings, attention, MLP, norms, head)."""
    h = int(cfg["hidden_size"])
    layers = int(cfg["num_hidden_layers"])
    vocab = int(cfg["vocab_size"])
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads", heads))
    hd = int(cfg.get("head_dim") or h // heads)
    inter = int(cfg.get("intermediate_size", 4 * h))
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    experts = int(cfg.get("num_experts", 0) or 0)
    mlp = 3 * h * (int(cfg.get("moe_intermediate_size", inter)) if experts else inter) * max(1, experts)
    per_layer = attn + mlp + 2 * h
    embed = vocab * h
    head = 0 if cfg.get("tie_word_embeddings", False) else vocab * h
    return embed + layers * per_layer + head + h


def footprint(model: ModelConfig, matrix_dir: Path) -> Footprint | None:
    """Weights and KV-cache sizes, or None when neither a config nor ``[model] parameters`` is known."""
    cfg_path = find_config(model, matrix_dir)
    cfg = read_config(cfg_path) if cfg_path else None
    dtype_bytes = DTYPE_BYTES.get(model.dtype, 2)
    source = []
    weight_bytes: float | None = None
    params: int | None = model.parameters
    if cfg_path is not None:
        index = cfg_path.parent / "model.safetensors.index.json"
        if index.exists():
            try:
                weight_bytes = float(json.loads(index.read_text())["metadata"]["total_size"])
                source.append(f"{index.name} total_size")
            except (OSError, ValueError, KeyError, TypeError):
                weight_bytes = None
    if params is not None:
        source.append("[model].parameters")
    elif cfg is not None and weight_bytes is None:
        try:
            params = estimate_parameters(cfg)
            source.append("estimated from config.json")
        except (KeyError, ValueError, TypeError):
            params = None
    if weight_bytes is None and params is not None:
        weight_bytes = params * dtype_bytes
    if weight_bytes is None:
        return None
    if params is None:
        params = int(weight_bytes / dtype_bytes)
    full, linear = (0, 0)
    kv_per_token = 0
    state = 0
    if cfg is not None:
        full, linear = full_attention_layers(cfg)
        heads = int(cfg.get("num_attention_heads", 1))
        kv_heads = int(cfg.get("num_key_value_heads", heads))
        head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size", 0)) // max(1, heads))
        kv_per_token = 2 * full * kv_heads * head_dim * 2  # K and V, bf16 cache
        if linear:
            vh = int(cfg.get("linear_num_value_heads", 0))
            kd = int(cfg.get("linear_key_head_dim", 0))
            vd = int(cfg.get("linear_value_head_dim", 0))
            kh = int(cfg.get("linear_num_key_heads", 0))
            conv = int(cfg.get("linear_conv_kernel_dim", 4))
            recurrent = vh * kd * vd * 4  # fp32 recurrent state
            conv_state = (2 * kh * kd + vh * vd) * conv * 2
            state = linear * (recurrent + conv_state)
        source.append(f"config.json ({cfg_path})")
    return Footprint(parameters=params, weight_bytes=weight_bytes, kv_bytes_per_token=kv_per_token,
                     full_attention_layers=full, linear_attention_layers=linear, state_bytes_per_sequence=state,
                     source=", ".join(source))  # fmt: skip
