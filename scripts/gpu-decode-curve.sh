#!/usr/bin/env bash
# One command for the GPU machine (from the unpacked tree, as gpu-build-test.sh): builds
# only gpu_ops and the two CUDA benches, then runs, each under its own time limit so that
# what finishes comes back in $OUT even when a later step runs out of time:
#   1. gpu_ops' linear cases (GEMV at 1-32 rows, both stagings, grouped, fused, GEMM);
#   2. bench_cuda_model (decode curve 1-128, prefill 128-8k, per-op tables, the fused layer);
#   3. bench_cuda_kernels' linear curve (TANDEM_BENCH_LINEARS_ONLY=1);
#   4. the rest of gpu_ops.
# bench_cuda_model runs its decode curve under mma_max_rows = 0 / 32 / 64 too (the int8
# tensor-core linear's A/B; TANDEM_BENCH_SKIP_FUSED=1 leaves the fused layer out). The test
# results and the two curves' summary lines are printed last.
#
#   OUT=$OUT bash scripts/gpu-decode-curve.sh
#   ARCH90_ONLY=1 ...   # build sm_90a machine code only (halves the CUDA compile; not committed)
#   MODEL_AB="TANDEM_CUDA_DECODE_CHUNK=256 X=1" ...  # after step 2, bench_cuda_model's main
#                       # curve once more under each assignment (the A/B runs skipped)
#   KERNEL_BENCH_S=0 / REST_TEST_S=0 leave steps 3 / 4 out.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
step configure
gpu_configure
step build
gpu_build tests/gpu/test_gpu_ops bench/cuda/bench_cuda_kernels bench/cuda/bench_cuda_model
linear_cases='linear*,gemv_q8*,grouped*'
step "gpu_ops: $linear_cases"
timeout "${LINEAR_TEST_S:-90}" "$BUILD/tests/gpu/test_gpu_ops" --run_test="$linear_cases" --log_level=test_suite \
  > "$OUT/test_linear.txt" 2>&1
echo "rc $?" >> "$OUT/test_linear.txt"
step bench_cuda_model
timeout "${MODEL_BENCH_S:-150}" "$BUILD/bench/cuda/bench_cuda_model" > "$OUT/bench_model.txt" 2>&1
echo "rc $?" >> "$OUT/bench_model.txt"
for ab in ${MODEL_AB:-}; do
  step "bench_cuda_model with $ab"
  env "$ab" TANDEM_BENCH_SKIP_FUSED=1 TANDEM_BENCH_SKIP_MMA_AB=1 TANDEM_BENCH_SKIP_SWIGLU_AB=1 \
    timeout "${AB_BENCH_S:-60}" "$BUILD/bench/cuda/bench_cuda_model" > "$OUT/bench_model_${ab//[^A-Za-z0-9]/_}.txt" 2>&1
  grep -E "^decode batch" "$OUT/bench_model_${ab//[^A-Za-z0-9]/_}.txt" | sed -E "s/ +/ /g; s/^/$ab: /"
done
[ "${KERNEL_BENCH_S:-45}" = 0 ] || {
step "bench_cuda_kernels (linears)"
TANDEM_BENCH_LINEARS_ONLY=1 timeout "${KERNEL_BENCH_S:-45}" "$BUILD/bench/cuda/bench_cuda_kernels" \
  > "$OUT/bench_linears.txt" 2>&1
echo "rc $?" >> "$OUT/bench_linears.txt"
}
[ "${REST_TEST_S:-120}" = 0 ] || {
step "gpu_ops: the rest"
timeout "${REST_TEST_S:-120}" "$BUILD/tests/gpu/test_gpu_ops" --run_test="!$linear_cases" \
  > "$OUT/test_rest.txt" 2>&1
echo "rc $?" >> "$OUT/test_rest.txt"
}
grep -hE "rc [0-9]+|failure|error|No errors" "$OUT"/test_*.txt | head -40
[ -f "$OUT/bench_linears.txt" ] && grep -E "^device| (dispatch|mma[a-z-]*) " "$OUT/bench_linears.txt" | sed -E 's/ +/ /g' | cut -d' ' -f1-7 | head -80
grep -E "^weights|^decode batch|^mma_max|^prefill|^linear_by|^swiglu" "$OUT/bench_model.txt" | sed -E 's/ +/ /g'
