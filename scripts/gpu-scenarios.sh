#!/usr/bin/env bash
# The serving scenarios of issue 5 on the GPU machine: build only what bench_scenarios needs
# with CUDA, run the four scenarios at h200 scale on backend.cuda (each under both schedulers;
# the agents under both retention policies too), and write $OUT/scenarios.txt (the table),
# $OUT/scenarios.json (one JSON line per scenario) and a log per scenario.
#
#   scripts/gpu-scenarios.sh                       # model from .gpu-model*/ pieces (see gpu-env.sh)
#   SCENARIOS="1 2" scripts/gpu-scenarios.sh       # some of them
#   TANDEM_GPU_MODEL=/tmp/model.gguf SCALE=full scripts/gpu-scenarios.sh
#
# Each scenario runs in its own process under a time limit (SCENARIO_LIMIT_S, default 240 s),
# and all of them within DEADLINE_S of the script's start (default 540 s, under the device
# tool's 10 minutes a command), so one that runs long still leaves the others' rows.
set -uo pipefail
T0=$(date +%s)
source "$(dirname "$0")/gpu-env.sh"
SCALE=${SCALE:-h200}
SCENARIOS=${SCENARIOS:-1 2 3 4}
LIMIT=${SCENARIO_LIMIT_S:-240}
DEADLINE=${DEADLINE_S:-540}

# A model assembled by an earlier call on this machine (gpu-build-test.sh or this script).
if [ -z "$MODEL" ] && [ -f /tmp/tandem-model.gguf ] \
   && echo "$MODEL_SHA  /tmp/tandem-model.gguf" | sha256sum -c --quiet 2>/dev/null; then
  MODEL=/tmp/tandem-model.gguf
fi
[ -n "$MODEL" ] || { echo "no model: carry .gpu-model*/model.part0{0,1,2} or set TANDEM_GPU_MODEL"; exit 1; }

step configure
gpu_configure
step build
gpu_build plugins/cuda/backend.cuda.so plugins/gguf/weights.gguf.so plugins/fcfs/scheduler.fcfs.so \
  plugins/warm_bypass/scheduler.warm_bypass.so plugins/local/transport.local.so bench/scenarios/bench_scenarios

nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
  > "$OUT/scenario_clocks.csv" 2>&1 &
smi=$!
: > "$OUT/scenarios.json"
rc=0
for n in $SCENARIOS; do
  start=$(date +%s)
  left=$(( DEADLINE - (start - T0) ))
  [ $left -lt $LIMIT ] && limit=$left || limit=$LIMIT
  step "scenario $n ($SCALE, at most $limit s)"
  [ $limit -le 0 ] && { echo "scenario $n: no time left"; rc=124; continue; }
  TANDEM_SOURCE_ROOT=$PWD timeout "$limit" "$BUILD/bench/scenarios/bench_scenarios" --scale "$SCALE" --scenario "$n" \
    --backend cuda --model "$MODEL" > "$OUT/scenario$n.log" 2>&1
  r=$?
  echo "scenario $n: exit $r, $(( $(date +%s) - start )) s"
  [ $r -ne 0 ] && { rc=$r; tail -5 "$OUT/scenario$n.log"; }
  grep '^{"bench":"scenarios"' "$OUT/scenario$n.log" >> "$OUT/scenarios.json"
done
kill $smi 2>/dev/null

{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ), scale $SCALE, backend.cuda"
  cat "$OUT/machine.txt"
  first=1
  for n in $SCENARIOS; do
    # The table rows (the header once), without log lines and the JSON line.
    grep -vE '^\[|^\{' "$OUT/scenario$n.log" 2>/dev/null | { if [ $first = 1 ]; then cat; else tail -n +2; fi; }
    first=0
  done
  sed -n 's/.*"wall_s":{\(.*\)}}$/wall seconds per scenario: \1/p' "$OUT/scenarios.json"
  awk -F', ' '{split($2, a, " "); n++; s += a[1]; if (a[1] + 0 >= 1900) hi++} END {
    if (n) printf "SM clock during the scenarios: %d samples, mean %.0f MHz, %d at >= 1900 MHz\n", n, s / n, hi}' \
    "$OUT/scenario_clocks.csv"
} | tee "$OUT/scenarios.txt"
exit $rc
