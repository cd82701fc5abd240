#!/usr/bin/env bash
# On the GPU machine (no model needed): the int8 tensor-core linear (gemv_q8_mma) checked and
# timed in one call. Builds backend.cuda, gpu_ops, gpu_batch_invariant and the two CUDA
# benches; runs the two tests, the linear curve (bench_cuda_kernels, linears only) and the
# random-weight model's decode curve under three dispatches (bench_cuda_model). Logs in $OUT.
#   bash scripts/gpu-mma.sh      # carry .gpu-deps on a fresh machine
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
step "configure and build"
gpu_configure
gpu_build plugins/cuda/backend.cuda.so tests/gpu/test_gpu_ops tests/gpu/test_gpu_batch_invariant \
  bench/cuda/bench_cuda_kernels bench/cuda/bench_cuda_model || true
step "gpu_ops, gpu_batch_invariant"
meson test -C "$BUILD" --no-rebuild --print-errorlogs ${MMA_TESTS:-gpu_ops gpu_batch_invariant} > "$OUT/tests.log" 2>&1
grep -E "error:|FAIL|fail|mma|Ok:|Fail:" "$OUT/tests.log" | grep -v "^\[" | head -30
step "linear curve (bench_cuda_kernels)"
TANDEM_BENCH_LINEARS_ONLY=1 timeout 150 "$BUILD/bench/cuda/bench_cuda_kernels" > "$OUT/linears.txt" 2>&1
grep -E "^device|dispatch|mma" "$OUT/linears.txt" | grep -v '^{' | awk '{print}' | head -70
step "decode curve (bench_cuda_model)"
TANDEM_BENCH_SKIP_FUSED=1 timeout 200 "$BUILD/bench/cuda/bench_cuda_model" > "$OUT/model.txt" 2>&1
grep -E "^weights|^case|^decode batch|^mma_max|^prefill" "$OUT/model.txt"
