#!/usr/bin/env bash
# On the lent H200: a newer SGLang release (its release-day lock as an overlay, tools/h200/ov-cut.txt says what
# the H200's own packages supply instead) serving SmolLM2 plain and with STANDALONE speculation; envbuilder's
# smoke stage reads the start-up with that release's own log formats (engine facts read from its wheel, cached in
# FACTS). Usage: tools/h200/run-release.sh FACTS_DIR NAME...   (NAME: tools/h200/NAME.toml). Output under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
facts=$1; shift
if [ ! -d /models/smollm2 ]; then
  start=$(date +%s)
  bash tools/h200/run.sh setup || exit $?
  echo "setup: $(( $(date +%s) - start )) s"
fi
mkdir -p /tmp/reports
for name in "$@"; do
  wd=/tmp/reports/$name
  mkdir -p "$wd/cache/engine-facts"
  cp "$facts"/*.json "$wd/cache/engine-facts/"
  cp tools/h200/$name.toml "$wd/matrix.toml"
  start=$(date +%s)
  python3 -m envbuilder --matrix "$wd/matrix.toml" --workdir "$wd" smoke --json > "$wd/smoke.json" 2> "$wd/smoke.err"
  echo "$name: exit $? in $(( $(date +%s) - start )) s"
  python3 -m envbuilder --matrix "$wd/matrix.toml" --workdir "$wd" report --all > "$wd/table.txt" 2>&1
  tail -3 "$wd/smoke.err"
  python3 -c "import json; [print(s['name'], s['status'], s['reason'], s['message'][:300]) for r in json.load(open('$wd/smoke.json')) for s in r['stages']]"
  python3 -c "import json; [print('phases', s['details'].get('launch', {}).get('phases'), 'kv_tokens', s['details'].get('launch', {}).get('kv_tokens')) for r in json.load(open('$wd/smoke.json')) for s in r['stages'] if s['name'] == 'smoke']"
  rm -rf "$wd/cache" "$wd/run"
  tar -C /tmp/reports -czf "$OUT/reports-$name.tgz" "$name"
done
