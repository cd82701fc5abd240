#!/usr/bin/env bash
# Splits the cached default model (tandem pull) into three git-ignored pieces of 33 MB for
# the GPU machine: .gpu-model1/model.part00 (carried with .gpu-deps and .gpu-src in the
# first call), .gpu-model2/model.part01 and .gpu-model3/model.part02 (one per following
# call, back to back while the machine is warm: a call carries at most 64 MiB with the
# checkout); gpu-env.sh joins them there and checks the sha256.
#
#   bash scripts/gpu-model-pieces.sh [MODEL.gguf]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-$HOME/.cache/tandem/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$src" ] || { echo "no model at $src: run ./tandem pull first" >&2; exit 1; }
rm -rf .gpu-model1 .gpu-model2 .gpu-model3 /tmp/tandem-pieces
mkdir -p /tmp/tandem-pieces
split -b 33000000 -d -a 2 "$src" /tmp/tandem-pieces/model.part
for i in 0 1 2; do mkdir -p ".gpu-model$((i + 1))" && mv "/tmp/tandem-pieces/model.part0$i" ".gpu-model$((i + 1))/"; done
cat .gpu-model1/model.part00 .gpu-model2/model.part01 .gpu-model3/model.part02 | cmp -s - "$src" \
  && echo "pieces: $(du -sh .gpu-model1 .gpu-model2 .gpu-model3 | tr '\n' ' ')"
