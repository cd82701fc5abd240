#!/usr/bin/env bash
# On the GPU machine (no model needed): the int8 tensor-core linear (gemv_q8_mma) checked and
# timed in one call. Builds backend.cuda, gpu_ops, gpu_batch_invariant and the two CUDA
# benches; runs the linear curve (bench_cuda_kernels, linears only), the random-weight
# model's decode curve under four dispatches (bench_cuda_model), then gpu_ops' linear cases
# (MMA_ALL=1: the whole of gpu_ops and gpu_batch_invariant too). Logs in $OUT.
#   bash scripts/gpu-mma.sh      # carry .gpu-deps on a fresh machine (ARCH90_ONLY=1: sm_90a only)
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
if [ -n "${ARCH90_ONLY:-}" ]; then  # sm_90a machine code only: halves the CUDA compile (this copy only)
  sed -i '/compute_121a/d' kernels/exl3/cuda/meson.build
  sed -i "/compute_121a/d; s/code=sm_90a',\$/code=sm_90a']/" kernels/cuda/meson.build
fi
step "configure and build"
gpu_configure
gpu_build plugins/cuda/backend.cuda.so tests/gpu/test_gpu_ops tests/gpu/test_gpu_batch_invariant \
  bench/cuda/bench_cuda_kernels bench/cuda/bench_cuda_model || true
step "linear curve (bench_cuda_kernels)"
TANDEM_BENCH_LINEARS_ONLY=1 timeout 90 "$BUILD/bench/cuda/bench_cuda_kernels" > "$OUT/linears.txt" 2>&1
grep -E "^device| (dispatch|mma) " "$OUT/linears.txt" | grep -v '^{' | sed -E 's/ +/ /g' | cut -d' ' -f1-7 | head -90
step "decode curve (bench_cuda_model)"
TANDEM_BENCH_SKIP_FUSED=1 timeout 120 "$BUILD/bench/cuda/bench_cuda_model" > "$OUT/model.txt" 2>&1
grep -E "^weights|^decode batch|^mma_max|^prefill" "$OUT/model.txt" | sed -E 's/ +/ /g'
step "gpu_ops: the linear cases (MMA_CASES), then the rest when MMA_ALL=1"
export LD_LIBRARY_PATH=$PWD/$BUILD/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cases=${MMA_CASES:-gemv_q8_mma_matches_q8_mirror_and_is_row_invariant,grouped_linear_is_segment_major,linear_fused_matches_separate_ops_and_reference,linear_q8_activations_match_cpu_q8}
timeout 150 "$BUILD/tests/gpu/test_gpu_ops" --run_test="$cases" --report_level=short > "$OUT/tests.log" 2>&1
echo "gpu_ops ($cases): exit $?"
grep -E "error|failed|passed" "$OUT/tests.log" | head -20
[ "${MMA_ALL:-0}" = 1 ] && meson test -C "$BUILD" --no-rebuild --print-errorlogs gpu_ops gpu_batch_invariant > "$OUT/tests_all.log" 2>&1
tail -5 "$OUT/tests_all.log" 2>/dev/null
