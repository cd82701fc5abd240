#!/usr/bin/env bash
# One command for the GPU machine: configure with the project's meson, build only what the
# GPU suite and the CUDA benches need, run the `gpu` suite and the benches, and write logs
# and a short table to $OUT (default: ./gpu-out).
#
#   scripts/gpu-build-test.sh                 # model test skips unless the model is found
#   TANDEM_GPU_MODEL=/tmp/model.gguf scripts/gpu-build-test.sh
#   GPU_TESTS=gpu_model NO_BENCH=1 scripts/gpu-build-test.sh   # one test, no benches
#   GPU_TARGETS="tests/gpu/test_gpu_ops bench/cuda/bench_cuda_model" GPU_TESTS=gpu_ops ...  # build only those
#
# The shared set-up (deps prefix, model pieces, configure, build) is scripts/gpu-env.sh.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"

step configure
gpu_configure
step build
targets=(plugins/cuda/backend.cuda.so plugins/cpu/backend.cpu.so plugins/gguf/weights.gguf.so
         plugins/safetensors/weights.safetensors.so tests/models/test_glm_reference bench/glm/bench_glm_long_context
         tests/gpu/test_gpu_ops tests/gpu/test_gpu_attention_tc tests/gpu/test_gpu_exl3 tests/gpu/test_gpu_exl3_moe tests/gpu/test_gpu_viterbi tests/gpu/test_gpu_moe tests/gpu/test_gpu_mla tests/gpu/test_gpu_small_ops tests/gpu/test_gpu_model tests/gpu/test_gpu_batch_invariant
         bench/cuda/bench_cuda_kernels bench/cuda/bench_cuda_model bench/cuda/bench_cuda_exl3
         bench/cuda/bench_cuda_exl3_moe bench/cuda/bench_cuda_moe bench/kv/bench_kv_quality
         cli/tandem plugins/fcfs/scheduler.fcfs.so plugins/local/transport.local.so
         plugins/gloo/transport.gloo.so plugins/nccl/transport.nccl.so tests/ranks/test_nccl_transport)
# GPU_TARGETS="t1 t2 ..." builds only those (a call that runs a few tests and benches).
[ -n "${GPU_TARGETS:-}" ] && read -r -a targets <<< "$GPU_TARGETS"
gpu_build "${targets[@]}"
step test
meson test -C "$BUILD" --no-rebuild --suite gpu --print-errorlogs ${GPU_TESTS:-} > "$OUT/test.log" 2>&1
test_rc=$?
cp "$BUILD/meson-logs/testlog.txt" "$OUT/testlog.txt" 2>/dev/null
if [ -n "$MODEL" ] && grep -q "gpu_model *SKIP" "$OUT/test.log"; then
  # Configured before the model arrived: run the model test on it directly.
  step "gpu_model on $MODEL"
  (cd "$BUILD" && LD_LIBRARY_PATH=$PWD/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} TANDEM_TEST_MODEL="$MODEL" \
     TANDEM_PLUGIN_PATH=$PWD/plugins TANDEM_FIXTURES=$PWD/../tests/fixtures \
     ./tests/gpu/test_gpu_model --log_level=message --report_level=short) > "$OUT/model_test.log" 2>&1
  test_rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/model_test.log" >> "$OUT/testlog.txt"
fi
if [ -z "${NO_BENCH:-}" ]; then
  step bench
  # SM clock every 200 ms while the benches run (the GPU idles at 345 MHz).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu --format=csv,noheader -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
  smi=$!
  "$BUILD/bench/cuda/bench_cuda_kernels" > "$OUT/bench_kernels.txt" 2>&1
  "$BUILD/bench/cuda/bench_cuda_model" > "$OUT/bench_model.txt" 2>&1
  # The KV element types' quality on the default model (prefill path, then the decode kernel).
  if [ -n "$MODEL" ] && [ -x "$BUILD/bench/kv/bench_kv_quality" ]; then
    "$BUILD/bench/kv/bench_kv_quality" --model "$MODEL" > "$OUT/bench_kv_quality.txt" 2>&1
    "$BUILD/bench/kv/bench_kv_quality" --model "$MODEL" --chunk 1 --max-tokens 2048 >> "$OUT/bench_kv_quality.txt" 2>&1
  fi
  # SKIP_EXL3_BENCH=1 leaves out the EXL3 GEMV bench; MOE_BENCH_LIMIT_S caps the MoE bench.
  [ -z "${SKIP_EXL3_BENCH:-}" ] && [ -x "$BUILD/bench/cuda/bench_cuda_exl3" ] && "$BUILD/bench/cuda/bench_cuda_exl3" > "$OUT/bench_exl3.txt" 2>&1
  [ -x "$BUILD/bench/cuda/bench_cuda_exl3_moe" ] && timeout "${MOE_BENCH_LIMIT_S:-240}" "$BUILD/bench/cuda/bench_cuda_exl3_moe" > "$OUT/bench_exl3_moe.txt" 2>&1
  [ -x "$BUILD/bench/cuda/bench_cuda_moe" ] && timeout "${MOE_BENCH_LIMIT_S:-240}" "$BUILD/bench/cuda/bench_cuda_moe" > "$OUT/bench_moe.txt" 2>&1
  kill $smi 2>/dev/null
  awk -F', ' '{split($2, a, " "); n++; s += a[1]; if (a[1] + 0 >= 1900) hi++} END {
    if (n) printf "SM clock over the benches: %d samples, mean %.0f MHz, %d at >= 1900 MHz\n", n, s / n, hi}' \
    "$OUT/clocks.csv" > "$OUT/clocks_summary.txt"
fi

{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ)"
  cat "$OUT/machine.txt"
  grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Skipped:" "$OUT/test.log"
  grep -hE "max \\|diff|identical|near-tie|error" "$OUT/testlog.txt" 2>/dev/null | head -40
  cat "$OUT/bench_kernels.txt" "$OUT/bench_model.txt" "$OUT/bench_kv_quality.txt" "$OUT/bench_exl3.txt" "$OUT/bench_exl3_moe.txt" "$OUT/bench_moe.txt" \
    "$OUT/clocks_summary.txt" 2>/dev/null
} | tee "$OUT/summary.txt"
exit $test_rc
