#!/usr/bin/env bash
# The one command for the GPU machine that times exllamav3 1.6.5's own EXL3 kernels (issue 6: "at
# least 2x exllamav3 measured side by side on the same GPU", and its MoE path at GLM-5-like shapes):
#
#   OUT=$OUT bash scripts/gpu-exllamav3-bench.sh        # carry: .gpu-exllamav3 (scripts/exllamav3-fetch.sh)
#
# 1. builds the parts of the exllamav3 extension subset the bench needs (tools/exl3/exllamav3_ext_subset.py:
#    core, gemm, gemm34, gemv, moe; sm_90 only, only the instances measured) in parallel, each
#    time-boxed (BUILD_TIMEOUT, default 200 s), into /tmp; logs $OUT/ext_build.log (and ext_build_PART.log);
# 2. runs tools/exl3/exllamav3_bench.py --no-build (time-boxed: BENCH_TIMEOUT, default 330 s; the bench
#    itself stops starting sections after BENCH_LIMIT, default 300 s): dense GEMV/GEMM at 1, 8, 16 rows on
#    8192^2 and 16384^2, K = 2, 3, 4, 6, 8, and the MoE at 1, 8, 64, 4096 tokens, every output checked
#    against a torch reference; writes $OUT/exllamav3_bench.json and .md, log $OUT/bench.log;
#    SM clocks sampled every 200 ms into $OUT/clocks.csv; BENCH_ARGS adds arguments (e.g. "--quick",
#    "--sections moe"), PARTS limits the parts built (default "core gemm gemm34 gemv moe");
# 3. optional, for the same run: with TANDEM_BENCH_DIR set to a tandem build's bench/cuda directory
#    (bench_cuda_exl3, bench_cuda_exl3_moe), runs tandem's benches too (TANDEM_BENCH_TIMEOUT, 240 s each)
#    into $OUT/tandem_bench_cuda_exl3.txt and tandem_bench_cuda_exl3_moe.txt;
# 4. writes $OUT/summary.txt: versions, build results, the tables.
# Each step runs even when an earlier one failed (whatever parts built are used). Needs python3 with torch
# (CUDA), numpy, ninja and nvcc; no network. Expected about 4-5 minutes (build ~1.5 min, bench ~2-3 min);
# at most BUILD_TIMEOUT + BENCH_TIMEOUT (530 s) plus start-up, without the optional tandem step.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-16}
export X3_BUILD_DIR=${X3_BUILD_DIR:-/tmp/tandem-exllamav3-ext}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-200}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-330}
BENCH_LIMIT=${BENCH_LIMIT:-300}
PARTS=${PARTS:-core gemm gemm34 gemv moe}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 )) s"; }

{
  date -u
  uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'numpy', numpy.__version__)" 2>&1
  "$PY" -c "import ninja; print('ninja (python)', ninja.__version__)" 2>&1
  command -v ninja && ninja --version
  nproc
  cat .gpu-exllamav3/VERSION 2>&1
  git log -1 --oneline 2>&1
} > "$OUT/env.log" 2>&1
say "gpu-exllamav3-bench: $(head -1 .gpu-exllamav3/VERSION 2>/dev/null || echo 'no .gpu-exllamav3/VERSION (run scripts/exllamav3-fetch.sh here, carry .gpu-exllamav3)'), commit $(git log -1 --format=%h 2>/dev/null)"
say "torch: $("$PY" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())' 2>&1 | tail -1)"

# 1. build (parts in parallel, each time-boxed; timeout kills the whole ninja/nvcc group)
rm -rf "$X3_BUILD_DIR"
for part in $PARTS; do
  (
    s=$(date +%s)
    timeout -k 10 "$BUILD_TIMEOUT" "$PY" tools/exl3/exllamav3_ext_subset.py --part "$part" > "$OUT/ext_build_$part.log" 2>&1
    rc=$?
    echo "part $part: rc=$rc after $(( $(date +%s) - s )) s" >> "$OUT/ext_build_$part.log"
    echo "$rc" > "$OUT/ext_build_$part.rc"
  ) &
done
wait
: > "$OUT/ext_build.log"
for part in $PARTS; do
  rc=$(cat "$OUT/ext_build_$part.rc" 2>/dev/null || echo "?")
  say "build $part: rc=$rc ($(tail -1 "$OUT/ext_build_$part.log" | sed 's/^part [a-z0-9]*: //'))$( [ "$rc" = 124 ] && echo ' TIMED OUT')"
  { echo "===== part $part ====="; cat "$OUT/ext_build_$part.log"; } >> "$OUT/ext_build.log"
done
say "build done at $(el)"

# 2. the bench (clocks sampled alongside: the GPU idles at a low SM clock)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,temperature.gpu,power.draw \
  --format=csv,noheader -lms 200 > "$OUT/clocks.csv" 2>&1 &
smi=$!
# shellcheck disable=SC2086
timeout -k 10 "$BENCH_TIMEOUT" "$PY" tools/exl3/exllamav3_bench.py --no-build --out "$OUT" --time-limit "$BENCH_LIMIT" \
  ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
rc=$?
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
say "bench: rc=$rc$( [ "$rc" = 124 ] && echo ' TIMED OUT') at $(el) (rc 1: some check failed or a section errored; see bench.log)"
grep -E "^== section|ERROR|FAIL|capture failed|not available" "$OUT/bench.log" | head -40 | sed 's/^/  /' | tee -a "$SUMMARY" > /dev/null
awk -F', ' '{split($2, a, " "); n++; s += a[1]; if (a[1] + 0 >= 1900) hi++} END {
  if (n) printf "SM clock during the bench: %d samples, mean %.0f MHz, %d at >= 1900 MHz\n", n, s / n, hi}' \
  "$OUT/clocks.csv" 2>/dev/null | tee -a "$SUMMARY"
if [ -s "$OUT/exllamav3_bench.md" ]; then
  { echo; cat "$OUT/exllamav3_bench.md"; } >> "$SUMMARY"
else
  say "no tables (exllamav3_bench.md missing); last lines of bench.log:"
  tail -30 "$OUT/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY" > /dev/null
fi

# 3. optional: tandem's own benches in the same run
if [ -n "${TANDEM_BENCH_DIR:-}" ]; then
  for b in bench_cuda_exl3 bench_cuda_exl3_moe; do
    if [ -x "$TANDEM_BENCH_DIR/$b" ]; then
      timeout -k 10 "${TANDEM_BENCH_TIMEOUT:-240}" "$TANDEM_BENCH_DIR/$b" > "$OUT/tandem_$b.txt" 2>&1
      say "tandem $b: rc=$? at $(el)"
      { echo; echo "### tandem $b (same run)"; echo; grep -v '^{' "$OUT/tandem_$b.txt"; } >> "$SUMMARY"
    else
      say "tandem $b: not found in $TANDEM_BENCH_DIR"
    fi
  done
fi
say "total $(el)"
exit 0
