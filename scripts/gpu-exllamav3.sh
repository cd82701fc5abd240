#!/usr/bin/env bash
# The one command for the GPU machine (issue 6, "check against exllamav3 itself"):
#
#   OUT=$OUT bash scripts/gpu-exllamav3.sh          # carry: .gpu-exllamav3 (scripts/exllamav3-fetch.sh)
#
# 1. builds the exllamav3 1.6.5 extension subset (tools/exl3/exllamav3_ext_subset.py), its three
#    parts (core, quant, gemm) in parallel, each time-boxed (BUILD_TIMEOUT, default 270 s), into
#    /tmp; logs $OUT/ext_build.log (and ext_build_PART.log);
# 2. makes the fixtures with exllamav3's kernels into $OUT/fixtures (copy them to
#    tests/fixtures/exl3/exllamav3/ and commit: tests/exl3 test exl3_exllamav3_fixtures reads them);
#    log $OUT/fixtures.log;
# 3. cross-loads tandem-quantized models with exllamav3's reconstruct and GEMM
#    (tools/exl3/exllamav3_crosscheck.py): the directories in $TANDEM_EXL3_DIR (space separated),
#    default every .gpu-exllamav3/models/*; logs $OUT/crosscheck.log and crosscheck.json;
# 4. writes $OUT/summary.txt.
# Each step runs even when an earlier one failed (whatever parts built are used). Needs python3
# with torch (CUDA), numpy, safetensors, ninja and nvcc; no network. Expected about 3-4 minutes; at most 270 + 100 + 60 s plus start-up (time boxes).
set -u
source "$(dirname "$0")/gpu-exllamav3-common.sh" gpu-exllamav3
BUILD_TIMEOUT=${BUILD_TIMEOUT:-270}

# 1. build (three parts in parallel, each time-boxed; timeout kills the whole ninja/nvcc group)
x3_build_parts "$BUILD_TIMEOUT" core quant gemm

# 2. fixtures
timeout -k 10 100 "$PY" tools/exl3/make_exllamav3_fixtures.py --no-build --out "$OUT/fixtures" > "$OUT/fixtures.log" 2>&1
rc=$?
say "fixtures: rc=$rc, $(tail -1 "$OUT/fixtures.log")"
grep -E '^K[0-9]\.' "$OUT/fixtures.log" | sed 's/^/  /' | tee -a "$SUMMARY" > /dev/null
say "fixtures done at $(el)"

# 3. cross-load tandem-quantized models
dirs=${TANDEM_EXL3_DIR:-$(ls -d .gpu-exllamav3/models/*/ 2>/dev/null | tr '\n' ' ')}
if [ -n "${dirs// /}" ]; then
  # shellcheck disable=SC2086
  timeout -k 10 60 "$PY" tools/exl3/exllamav3_crosscheck.py --no-build --json "$OUT/crosscheck.json" $dirs \
    > "$OUT/crosscheck.log" 2>&1
  rc=$?
  say "crosscheck: rc=$rc, $(tail -1 "$OUT/crosscheck.log")"
  grep -E 'FAIL|^\S.*quantized linears' "$OUT/crosscheck.log" | head -40 | sed 's/^/  /' | tee -a "$SUMMARY" > /dev/null
else
  say "crosscheck: skipped (no TANDEM_EXL3_DIR and no .gpu-exllamav3/models/)"
fi
say "total $(el)"
exit 0
