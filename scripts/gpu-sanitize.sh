#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu-build-test.sh built the tests: one test of the gpu
# suite under compute-sanitizer's memcheck, through meson (so the test gets its usual
# environment and arguments); any memcheck error fails the test (exit code 86). Writes
# $OUT/sanitize_TEST.log (with memcheck's report) and prints its summary and first errors.
#
#   OUT=$OUT bash scripts/gpu-sanitize.sh gpu_ops --run_test=linear_fused_matches_separate_ops_and_reference
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
name=$1
shift
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$cs" ] || { echo "compute-sanitizer not found"; exit 1; }
log="$OUT/sanitize_$name.log"
meson test -C "$BUILD" --no-rebuild --print-errorlogs -t 4 --wrapper "$cs --tool memcheck --error-exitcode 86 --print-limit 10" \
  "$name" ${1:+--test-args="$*"} > "$log" 2>&1
rc=$?
# meson keeps the test's own output (memcheck's report) in its wrapper-named log.
cat "$BUILD"/meson-logs/testlog-*.txt >> "$log" 2>/dev/null
echo "sanitize $name rc=$rc (non-zero: the test failed or memcheck found errors)"
grep -E "ERROR SUMMARY|Invalid|error" "$log" | head -40
exit $rc
