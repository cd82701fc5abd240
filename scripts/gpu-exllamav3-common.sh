# shellcheck shell=bash
# Sourced by scripts/gpu-exllamav3.sh and scripts/gpu-exllamav3-bench.sh (GPU machine), never
# run: what they share. It moves to the repository root and sets
#   OUT (required), PY (python with torch; $PYTHON or python3), TORCH_CUDA_ARCH_LIST (9.0),
#   MAX_JOBS (16), X3_BUILD_DIR (/tmp/tandem-exllamav3-ext), SUMMARY ($OUT/summary.txt, emptied),
# defines say (echo and append to SUMMARY), el (seconds since sourcing) and
#   x3_build_parts TIMEOUT PART...   builds the exllamav3 subset parts
#                                    (tools/exl3/exllamav3_ext_subset.py) from scratch, in
#                                    parallel, each time-boxed (timeout kills its whole
#                                    ninja/nvcc group); logs $OUT/ext_build_PART.log/.rc and
#                                    $OUT/ext_build.log, one summary line per part,
# and writes $OUT/env.log (versions) and two summary lines naming the caller ($1).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-16}
export X3_BUILD_DIR=${X3_BUILD_DIR:-/tmp/tandem-exllamav3-ext}
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
  "$PY" -c "import torch, numpy, safetensors; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'numpy', numpy.__version__, 'safetensors', safetensors.__version__)" 2>&1
  "$PY" -c "import ninja; print('ninja (python)', ninja.__version__)" 2>&1
  command -v ninja && ninja --version
  nproc
  cat .gpu-exllamav3/VERSION 2>&1
  git log -1 --oneline 2>&1
} > "$OUT/env.log" 2>&1
say "$1: $(head -1 .gpu-exllamav3/VERSION 2>/dev/null || echo 'no .gpu-exllamav3/VERSION (run scripts/exllamav3-fetch.sh here, carry .gpu-exllamav3)'), commit $(git log -1 --format=%h 2>/dev/null)"
say "torch: $("$PY" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())' 2>&1 | tail -1)"

x3_build_parts() {
  local timeout_s=$1 part rc
  shift
  rm -rf "$X3_BUILD_DIR"
  for part in "$@"; do
    (
      s=$(date +%s)
      timeout -k 10 "$timeout_s" "$PY" tools/exl3/exllamav3_ext_subset.py --part "$part" > "$OUT/ext_build_$part.log" 2>&1
      rc=$?
      echo "part $part: rc=$rc after $(( $(date +%s) - s )) s" >> "$OUT/ext_build_$part.log"
      echo "$rc" > "$OUT/ext_build_$part.rc"
    ) &
  done
  wait
  : > "$OUT/ext_build.log"
  for part in "$@"; do
    rc=$(cat "$OUT/ext_build_$part.rc" 2>/dev/null || echo "?")
    say "build $part: rc=$rc ($(tail -1 "$OUT/ext_build_$part.log" | sed 's/^part [a-z0-9]*: //'))$( [ "$rc" = 124 ] && echo ' TIMED OUT')"
    { echo "===== part $part ====="; cat "$OUT/ext_build_$part.log"; } >> "$OUT/ext_build.log"
  done
  say "build done at $(el)"
}
