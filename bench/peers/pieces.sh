#!/usr/bin/env bash
# Here: the default model (98 MB) in three git-ignored pieces sized for the three back-to-back
# device calls of bench/peers (each call carries at most 64 MiB with the 8 MB checkout):
#   call 1 (builds)      .gpu-deps (23 MB) + .gpu-peers (8 MB) + .gpu-model1 (20 MB)
#   call 2 (gpu tests)   .gpu-model2 (56 MB)
#   call 3 (the peers)   .gpu-model3 (the rest, 22 MB)
# scripts/gpu-env.sh joins .gpu-model*/model.part* there, in name order, and checks the sha256.
#
#   bash bench/peers/pieces.sh [MODEL.gguf]
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-${TANDEM_CACHE:-$HOME/.cache/tandem}/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$src" ] || { echo "no model at $src: run ./tandem pull first" >&2; exit 1; }
rm -rf .gpu-model1 .gpu-model2 .gpu-model3
mkdir -p .gpu-model1 .gpu-model2 .gpu-model3
# 1 MB blocks: 20 | 56 | the rest.
dd if="$src" of=.gpu-model1/model.part00 bs=1000000 count=20 status=none
dd if="$src" of=.gpu-model2/model.part01 bs=1000000 skip=20 count=56 status=none
dd if="$src" of=.gpu-model3/model.part02 bs=1000000 skip=76 status=none
cat .gpu-model1/model.part00 .gpu-model2/model.part01 .gpu-model3/model.part02 | cmp -s - "$src" \
  || { echo "pieces.sh: the pieces do not rebuild $src" >&2; exit 1; }
echo "pieces: $(du -sh .gpu-model1 .gpu-model2 .gpu-model3 | tr '\n' ' ')"
