#!/usr/bin/env bash
# The kernel check for the GPU machine (one call, no model needed): builds sm_90a code only
# for backend.cuda and the kernel tests, runs gpu_small_ops, gpu_mla, gpu_moe and gpu_ops,
# then bench_cuda_mla with the tensor-core kernel and the old one (TANDEM_CUDA_MLA_TC=0) and
# bench_cuda_moe (fused vs the per-expert loop, 1..4096 tokens).
#   bash scripts/gpu-kernel-check.sh            (carry .gpu-deps; TESTS= / TARGETS= narrow it)
# It edits kernels/*/meson.build in the copy on the GPU machine (sm_90a only): never commit that.
set -uo pipefail
ARCH90_ONLY=1 source scripts/gpu-env.sh
step configure; gpu_configure
step build
T=${TARGETS:-"plugins/cuda/backend.cuda.so plugins/cpu/backend.cpu.so tests/gpu/test_gpu_small_ops tests/gpu/test_gpu_mla bench/cuda/bench_cuda_mla tests/gpu/test_gpu_ops tests/gpu/test_gpu_moe bench/cuda/bench_cuda_moe"}
read -r -a targets <<< "$T"
( time gpu_build "${targets[@]}" ) > "$OUT/build.txt" 2>&1; echo "build rc $?"; tail -3 "$OUT/build.txt"
for t in ${TESTS:-gpu_small_ops gpu_mla gpu_moe gpu_ops}; do
  step "test $t"
  timeout ${TEST_S:-150} meson test -C "$BUILD" --no-rebuild --print-errorlogs $t > "$OUT/$t.txt" 2>&1; echo "$t rc $?"
  cp "$BUILD/meson-logs/testlog.txt" "$OUT/$t.log" 2>/dev/null
  grep -E "^ *[0-9]+/[0-9]+ |error:|max" "$OUT/$t.txt" | head -20
done
if [ -n "${MLA_BENCH:-1}" ] && [ -x "$BUILD/bench/cuda/bench_cuda_mla" ]; then
  step bench_cuda_mla new; (cd "$BUILD" && LD_LIBRARY_PATH=$PWD/core/src/base:${LD_LIBRARY_PATH:-} timeout 120 ./bench/cuda/bench_cuda_mla) > "$OUT/mla_new.txt" 2>&1; tail -15 "$OUT/mla_new.txt"
  step bench_cuda_mla old; (cd "$BUILD" && LD_LIBRARY_PATH=$PWD/core/src/base:${LD_LIBRARY_PATH:-} TANDEM_CUDA_MLA_TC=0 timeout 120 ./bench/cuda/bench_cuda_mla) > "$OUT/mla_old.txt" 2>&1; tail -15 "$OUT/mla_old.txt"
fi
if [ -n "${MOE_BENCH:-1}" ] && [ -x "$BUILD/bench/cuda/bench_cuda_moe" ]; then
  step bench_cuda_moe; (cd "$BUILD" && LD_LIBRARY_PATH=$PWD/core/src/base:${LD_LIBRARY_PATH:-} timeout ${MOE_BENCH_S:-120} ./bench/cuda/bench_cuda_moe ${MOE_TOKENS:+--tokens $MOE_TOKENS}) > "$OUT/moe.txt" 2>&1; tail -14 "$OUT/moe.txt"
fi
