#!/usr/bin/env bash
# The README's report screenshots, taken with Debian's headless chromium:
#   tools/report-screenshots.sh MATRIX_WORKDIR CELL_WORKDIR
# docs/report-matrix.png: the matrix view of MATRIX_WORKDIR's results (the README's: `envbuilder resolve` +
# `precheck --host-facts tests/fixtures/h200-doctor.json` of ./matrix.toml);
# docs/report-cell.png: the cell section of CELL_WORKDIR (the README's: reports/h200-sglang-0.5.11/random).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shot() {  # PAGE PNG HEIGHT
  chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$tmp/profile-$(basename "$2")" \
    --window-size=1280,"$3" --screenshot="$2" "file://$(realpath "$1")" 2>/dev/null
}
envbuilder --workdir "$1" --matrix /nonexistent.toml report --format html --output "$tmp/matrix.html" || true
sed -i 's|<h2>Cells</h2>.*||; s|<details|<details hidden|g' "$tmp/matrix.html"   # the matrix alone
shot "$tmp/matrix.html" docs/report-matrix.png "${MATRIX_HEIGHT:-520}"
envbuilder --workdir "$2" --matrix /nonexistent.toml report --format html --expand --output "$2/reports/expanded.html" || true
sed -i '/<h2>Matrix<\/h2>/,/<h2>Cells<\/h2>/{/<h2>Cells<\/h2>/!d}' "$2/reports/expanded.html"   # the cell alone
shot "$2/reports/expanded.html" docs/report-cell.png "${CELL_HEIGHT:-1500}"
rm -f "$2/reports/expanded.html"
