#!/usr/bin/env bash
# The default model quantized to EXL3 on the GPU machine (`tandem quantize --device cuda`,
# the CUDA tile coder) at each K, then perplexity and mean KL against the source on
# backend.cuda (exact f32 linears for the source), and the K=4 model served through the
# normal pipeline (`tandem run --model DIR`). Needs the default model's pieces
# (.gpu-model*/, see gpu-env.sh). Writes $OUT/exl3_quality.md and logs.
#
#   OUT=$OUT KS="2 3 4 5 6 8" bash scripts/gpu-exl3-quality.sh
#   Q8_QUALITY=1 ...   also measures each K on the decode GEMV path (bench_exl3_quality
#                      --chunk 16: windows fed 16 tokens at a time; the sweep's whole
#                      windows take the prefill GEMM, where q8 plays no part), once with
#                      the EXL3 GEMV on fp16 activations and once with backend.cuda's
#                      int8-activation GEMV (--quantized-set q8_activations=true); the
#                      source stays exact. One more table in $OUT/exl3_quality_q8.md
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
[ -n "$MODEL" ] || { echo "the default model's pieces are not all here"; exit 1; }
step configure
gpu_configure
step build
gpu_build cli/tandem bench/exl3/bench_exl3_quality plugins/cuda/backend.cuda.so plugins/cpu/backend.cpu.so \
  plugins/gguf/weights.gguf.so plugins/exl3_gb10/weights.exl3.so plugins/fcfs/scheduler.fcfs.so plugins/local/transport.local.so
export TANDEM_PLUGIN_PATH=$PWD/$BUILD/plugins
WORK=${WORK:-/tmp/exl3-work}
mkdir -p "$WORK"
step "sweep K=${KS:-2 3 4 5 6 8}"
# shellcheck disable=SC2086
QUANT_ARGS="--device cuda" QUALITY_ARGS="--backend backend.cuda --set q8_activations=false" \
  timeout "${SWEEP_LIMIT_S:-420}" bash bench/exl3/sweep.sh "$BUILD" "$MODEL" "$WORK" ${KS:-2 3 4 5 6 8} \
  > "$OUT/exl3_quality.md" 2> "$OUT/exl3_quality.err"
echo "sweep rc=$?"
cp "$WORK"/quantize_k*.log "$OUT/" 2>/dev/null
if [ -n "${Q8_QUALITY:-}" ]; then
  step "decode GEMV path (--chunk 16): fp16 and int8 activations for the EXL3 model"
  echo "| K | EXL3 activations | PPL source | PPL EXL3 | mean KL (nats) | top-1 agree |" > "$OUT/exl3_quality_q8.md"
  echo "|---|---|---|---|---|---|" >> "$OUT/exl3_quality_q8.md"
  for k in ${KS:-2 3 4 5 6 8}; do
    [ -f "$WORK/k$k/config.json" ] || continue
    for q8 in false true; do
      j=$(timeout 240 "$BUILD/bench/exl3/bench_exl3_quality" --source "$MODEL" --quantized "$WORK/k$k" --json --chunk 16 \
            --backend backend.cuda --set q8_activations=false --quantized-set q8_activations=$q8 2>> "$OUT/exl3_quality.err")
      python3 - "$k" "$q8" "$j" >> "$OUT/exl3_quality_q8.md" <<'PY'
import json, sys
k, q8, j = sys.argv[1:]
q = json.loads(j)
act = "int8 (q8)" if q8 == "true" else "fp16"
print(f"| {k} | {act} | {q['ppl_source']:.2f} | {q['ppl_quantized']:.2f} | {q['mean_kl']:.5f} | "
      f"{100 * q['top1_agreement']:.1f}% |")
PY
    done
  done
  cat "$OUT/exl3_quality_q8.md"
fi
cat "$OUT/exl3_quality.md"; tail -5 "$OUT/exl3_quality.err"
for k in ${SERVE_K:-4}; do
  [ -f "$WORK/k$k/config.json" ] || continue
  step "serve K=$k through the pipeline (tandem run, backend.cuda)"
  timeout 120 "$BUILD/cli/tandem" run --pipeline pipelines/exl3-cuda.yaml --model "$WORK/k$k" --max-tokens 48 \
    --prompt "What is the capital of France?" > "$OUT/exl3_run_k$k.txt" 2>&1
  echo "run rc=$?"; tail -5 "$OUT/exl3_run_k$k.txt"
done
