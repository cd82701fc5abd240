#!/usr/bin/env bash
# Fills .gpu-exllamav3/ (git-ignored) for scripts/gpu-exllamav3.sh, which runs on the GPU
# machine (no network) and checks tandem's EXL3 code against exllamav3 itself (issue 6).
# Run here, then carry .gpu-exllamav3 in the device call.
#
#   scripts/exllamav3-fetch.sh                 # exllamav3 1.6.5's CUDA extension sources
#   TANDEM_BIN=build/cli/tandem scripts/exllamav3-fetch.sh
#                                              # also tiny tandem-quantized models to cross-load
#
# What it writes (about 3.5 MB without models, each model about 1 MB):
#   .gpu-exllamav3/exllamav3_ext/   the wheel's exllamav3/exllamav3_ext/ less rocm/ (pure
#                                   sources: the PyPI wheel is py3-none-any and JIT-builds them)
#   .gpu-exllamav3/VERSION          version, wheel name and sha256
#   .gpu-exllamav3/models/NAME/     with TANDEM_BIN: `tandem quantize` of a 1-layer tiny llama
#                                   (tools/fixtures/make_tiny_llama.py) at the K and codebooks
#                                   of $MODELS (default "2:mcg 4:mul1 5:3inst")
set -euo pipefail
cd "$(dirname "$0")/.."
VER=1.6.5
DEST=.gpu-exllamav3
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$PY" -m pip download "exllamav3==$VER" --no-deps --only-binary=:all: -d "$tmp" -q
whl=$(ls "$tmp"/exllamav3-"$VER"-*.whl)
sha=$(sha256sum "$whl" | cut -d' ' -f1)
mkdir -p "$tmp/x"
unzip -q "$whl" 'exllamav3/exllamav3_ext/*' -d "$tmp/x"
rm -rf "$tmp/x/exllamav3/exllamav3_ext/rocm"
mkdir -p "$DEST"
rm -rf "$DEST/exllamav3_ext"
mv "$tmp/x/exllamav3/exllamav3_ext" "$DEST/exllamav3_ext"
printf 'exllamav3 %s\nwheel %s\nsha256 %s\n' "$VER" "$(basename "$whl")" "$sha" > "$DEST/VERSION"
echo "exllamav3-fetch: $(basename "$whl") (sha256 $sha) -> $DEST/exllamav3_ext ($(du -sh "$DEST/exllamav3_ext" | cut -f1))"

# Optional: tiny models written by tandem itself, for tools/exl3/exllamav3_crosscheck.py.
if [ -n "${TANDEM_BIN:-}" ]; then
  mkdir -p "$DEST/models"
  gguf="$tmp/tiny.gguf"
  "$PY" tools/fixtures/make_tiny_llama.py "$gguf" --layers 1 --ffn 256 --tied
  head -c 4000 README.md > "$tmp/calib.txt"
  for spec in ${MODELS:-2:mcg 4:mul1 5:3inst}; do
    K=${spec%%:*}; cb=${spec##*:}
    out="$DEST/models/tiny-k$K-$cb"
    rm -rf "$out"
    "$TANDEM_BIN" quantize --to exl3 --bits "$K" --codebook "$cb" --head-bits "$K" \
      --calibration "$tmp/calib.txt" --rows 4 --cols 128 --no-progress --out "$out" "$gguf" > "$tmp/q.log" 2>&1 \
      || { cat "$tmp/q.log"; echo "exllamav3-fetch: tandem quantize failed for $spec" >&2; exit 1; }
    echo "exllamav3-fetch: $out ($(du -sh "$out" | cut -f1))"
  done
fi
echo "exllamav3-fetch: $(du -sh "$DEST" | cut -f1) in $DEST/; carry it: run(carry=[\".gpu-exllamav3\"], ...)"
