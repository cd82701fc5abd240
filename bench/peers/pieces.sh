#!/usr/bin/env bash
# Here: the default model (98 MB) in three git-ignored pieces sized for the three back-to-back
# device calls of bench/peers (each call carries at most 64 MiB with the 8 MB checkout):
#   call 1 (builds)      .gpu-deps (23 MB) + .gpu-peers (8 MB) + .gpu-model1 (20 MB)
#   call 2 (gpu tests)   .gpu-model2 (56 MB)
#   call 3 (the peers)   .gpu-model3 (the rest, 22 MB)
# Those sizes fit an 8 MB checkout; with the DFlash2 weights (24 MB) tracked it is ~34 MB, so
# PIECES="8 32 32" makes four pieces for four calls (the model is complete at the fourth).
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
read -r -a sizes <<< "${PIECES:-20 56}"
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
