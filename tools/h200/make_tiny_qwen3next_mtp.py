"""On the H200: the tiny random-weight Qwen3-Next of ../shared/sglang-runs/0.5.11-h200-qwen3next/make_tiny_model.py,
plus an untrained MTP head (``mtp.*``: SGLang's Qwen3NextForCausalLMMTP loads these for NEXTN), so speculation
runs on defined weights and its acceptance is ~1. Tokenizer: SmolLM2's, from the directory given.

    python3 make_tiny_qwen3next_mtp.py TOKENIZER_DIR OUT_DIR
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, Qwen3NextConfig, Qwen3NextForCausalLM

tok_dir, out = sys.argv[1], sys.argv[2]
cfg = Qwen3NextConfig(vocab_size=49152, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_value_heads=4,
                      linear_num_key_heads=2, linear_key_head_dim=64, linear_value_head_dim=64,
                      linear_conv_kernel_dim=4, full_attention_interval=4, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=128, shared_expert_intermediate_size=256, decoder_sparse_step=1,
                      max_position_embeddings=131072, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
m = Qwen3NextForCausalLM(cfg).to(torch.bfloat16)
m.save_pretrained(out)
AutoTokenizer.from_pretrained(tok_dir).save_pretrained(out)
cfg_file = Path(out) / "config.json"
c = json.loads(cfg_file.read_text())
c["full_attention_interval"] = 4
c["num_nextn_predict_layers"] = 1
cfg_file.write_text(json.dumps(c, indent=1))
w = load_file(f"{out}/model.safetensors")
mtp = {k.replace("model.layers.3.", "mtp.layers.0."): v.clone() for k, v in w.items() if k.startswith("model.layers.3.")}
mtp["mtp.fc.weight"] = (torch.randn(256, 512) * 0.02).to(torch.bfloat16)
for n in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"):
    mtp[n] = w["model.norm.weight"].clone()
save_file({**w, **mtp}, f"{out}/model.safetensors", metadata={"format": "pt"})
print("tiny qwen3-next + MTP:", len(w), "+", len(mtp), "tensors")
