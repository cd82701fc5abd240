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
source "$(dirname "$0")/gpu-exllamav3-common.sh" gpu-exllamav3-bench
BUILD_TIMEOUT=${BUILD_TIMEOUT:-200}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-330}
BENCH_LIMIT=${BENCH_LIMIT:-300}
PARTS=${PARTS:-core gemm gemm34 gemv moe}

# 1. build (parts in parallel, each time-boxed; timeout kills the whole ninja/nvcc group)
# shellcheck disable=SC2086
x3_build_parts "$BUILD_TIMEOUT" $PARTS

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
