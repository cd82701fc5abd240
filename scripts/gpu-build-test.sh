#!/usr/bin/env bash
# One command for the GPU machine: configure with the project's meson, build only what the
# GPU suite and the CUDA benches need, run the `gpu` suite and the benches, and write logs
# and a short table to $OUT (default: ./gpu-out).
#
#   scripts/gpu-build-test.sh                 # model test skips unless the model is found
#   TANDEM_GPU_MODEL=/tmp/model.gguf scripts/gpu-build-test.sh
#   GPU_TESTS=gpu_model NO_BENCH=1 scripts/gpu-build-test.sh   # one test, no benches
#
# That machine has Boost's headers but no compiled Boost libraries and no PCRE2 headers:
# Debian 12's packages of what the project's configure step needs are carried in
# .gpu-deps/ (*.deb, git-ignored; scripts/gpu-deps.sh fills it) and unpacked into a private
# prefix, never into /.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
PREFIX=/tmp/tandem-gpu-deps
export PATH=/usr/local/cuda/bin:$PATH

if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
  if [ ! -d "$PREFIX/usr" ]; then
    for f in .gpu-deps/*.deb; do dpkg -x "$f" "$PREFIX"; done
    # The .pc files name /usr; point them at the prefix.
    sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|" "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  fi
  export PKG_CONFIG_PATH=$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export BOOST_ROOT=$PREFIX/usr BOOST_INCLUDEDIR=$PREFIX/usr/include
  export BOOST_LIBRARYDIR=$PREFIX/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  command -v pkg-config >/dev/null || { export PATH=$PATH:$PREFIX/usr/bin; ln -sf pkgconf "$PREFIX/usr/bin/pkg-config"; }
fi

# The default model (98 MB) travels in pieces over back-to-back calls (64 MiB each):
# .gpu-model*/model.partNN are collected in /tmp and joined once all are there.
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ls .gpu-model*/model.part* >/dev/null 2>&1; then
  cp .gpu-model*/model.part* /tmp/
  if [ -f /tmp/model.part00 ] && [ -f /tmp/model.part01 ] && [ -f /tmp/model.part02 ]; then
    cat /tmp/model.part0{0,1,2} > /tmp/tandem-model.gguf
    if echo "$MODEL_SHA  /tmp/tandem-model.gguf" | sha256sum -c --quiet; then
      TANDEM_GPU_MODEL=/tmp/tandem-model.gguf
    else
      echo "model pieces do not match sha256 $MODEL_SHA"
    fi
  fi
fi
MODEL=${TANDEM_GPU_MODEL:-}
model_opt=()
[ -n "$MODEL" ] && model_opt=(-Dtest_model="$MODEL")
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1; } \
  > "$OUT/machine.txt" 2>&1

step() { echo "== $*"; }
step configure
if [ ! -f "$BUILD/build.ninja" ]; then
  # g++ 13 there includes less transitively than g++ 12 here (<cstdint>).
  CXXFLAGS="${CXXFLAGS:-} -include cstdint" meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release "${model_opt[@]}" > "$OUT/configure.log" 2>&1 \
    || { tail -40 "$OUT/configure.log"; exit 1; }
fi
step build
targets=(plugins/cuda/backend.cuda.so plugins/cpu/backend.cpu.so plugins/gguf/weights.gguf.so
         tests/gpu/test_gpu_ops tests/gpu/test_gpu_attention_tc tests/gpu/test_gpu_model bench/cuda/bench_cuda_kernels
         bench/cuda/bench_cuda_model)
have=()
for t in "${targets[@]}"; do ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1 && have+=("$t"); done
ninja -C "$BUILD" -j"$(nproc)" "${have[@]}" > "$OUT/build.log" 2>&1 \
  || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
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
  cat "$OUT/bench_kernels.txt" "$OUT/bench_model.txt" "$OUT/clocks_summary.txt" 2>/dev/null
} | tee "$OUT/summary.txt"
exit $test_rc
