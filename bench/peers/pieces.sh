#!/usr/bin/env bash
# Here: the default model (98 MB) in git-ignored pieces sized for back-to-back device calls
# (each call carries at most 64 MiB with the checkout, ~34 MB since the DFlash2 weights are
# tracked). The lease of session 14 took five calls with PIECES="20 25 25":
#   call 1 (builds)      .gpu-deps (24 MB)
#   call 2 (gpu tests)   .gpu-peers (8 MB) + .gpu-model1 (20 MB)
#   calls 3, 4           .gpu-model2, .gpu-model3 (25 MB each)
#   call 5 (model tests) .gpu-model4 (the rest, 28 MB); the bench calls after it carry nothing
# scripts/gpu-env.sh joins .gpu-model*/model.part* there, in name order, and checks the sha256.
#
#   bash bench/peers/pieces.sh [MODEL.gguf]
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-${TANDEM_CACHE:-$HOME/.cache/tandem}/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$src" ] || { echo "no model at $src: run ./tandem pull first" >&2; exit 1; }
rm -rf .gpu-model[0-9]*
# PIECES: the first pieces' sizes in MB (the last piece is the rest). The checkout itself
# counts towards each call's 64 MiB: with a larger checkout, smaller pieces (and more calls).
read -r -a sizes <<< "${PIECES:-20 25 25}"
skip=0 i=0
for mb in "${sizes[@]}" rest; do
  i=$((i + 1))
  mkdir -p .gpu-model$i
  part=$(printf 'model.part%02d' $((i - 1)))
  if [ "$mb" = rest ]; then
    dd if="$src" of=.gpu-model$i/$part bs=1000000 skip=$skip status=none
  else
    dd if="$src" of=.gpu-model$i/$part bs=1000000 skip=$skip count="$mb" status=none
    skip=$((skip + mb))
  fi
done
cat .gpu-model*/model.part* | cmp -s - "$src" || { echo "pieces.sh: the pieces do not rebuild $src" >&2; exit 1; }
echo "pieces: $(du -sh .gpu-model[0-9]* | tr '\n' ' ')"
