#!/usr/bin/env bash
# Speculative decoding on the GPU machine, in one command (issue 16): builds what it needs
# (scripts/gpu-env.sh: carried deps, meson with CUDA), runs the gpu suite's spec_gpu test
# (greedy output with drafter.ngram / drafter.suffix / drafter.dflash2 equals none on backend.cuda, up to
# near-ties) and bench_spec on backend.cuda at batch 1 and 8. Logs and the JSON go to $OUT,
# and every timed run's step trace (one JSON line per engine step: kind, rows, drafts, phase
# times, the cost model's estimates) in one file, $OUT/spec_trace.tar.gz. bench_spec.log has
# the CUDA graph counters of each runtime (captures, replays, drops by reason).
#
#   bench/spec/gpu.sh                       # ROUNDS=3 TOKENS=128 by default
#   ROUNDS=1 NO_TEST=1 bench/spec/gpu.sh    # the bench only, once
#   DRAFTERS="dflash2" BATCHES="1" ...      # those drafters (against none), those batch sizes
set -uo pipefail
source "$(dirname "$0")/../../scripts/gpu-env.sh"
[ -n "$MODEL" ] || { echo "no model file: carry .gpu-model*/model.part* or set TANDEM_GPU_MODEL"; exit 1; }

step configure
gpu_configure
step build
gpu_build plugins/cuda/backend.cuda.so plugins/cpu/backend.cpu.so plugins/gguf/weights.gguf.so \
  plugins/fcfs/scheduler.fcfs.so plugins/local/transport.local.so plugins/ngram/drafter.ngram.so \
  plugins/suffix/drafter.suffix.so plugins/dflash2/drafter.dflash2.so tests/spec/test_spec_gpu bench/spec/bench_spec
root=$PWD
b=$(cd "$BUILD" && pwd)
rc=0
if [ -z "${NO_TEST:-}" ]; then
  step "spec_gpu on $MODEL"
  LD_LIBRARY_PATH=$b/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} TANDEM_TEST_MODEL="$MODEL" \
    TANDEM_PLUGIN_PATH=$b/plugins TANDEM_SOURCE_ROOT=$root \
    "$b/tests/spec/test_spec_gpu" --log_level=message --report_level=short > "$OUT/spec_gpu.log" 2>&1
  rc=$?
  echo "spec_gpu exit $rc"
  grep -E "identical|diverged|accepted|error|passed|failed" "$OUT/spec_gpu.log" | head -40
fi
step "bench_spec on backend.cuda"
LD_LIBRARY_PATH=$b/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} TANDEM_PLUGIN_PATH=$b/plugins \
  "$b/bench/spec/bench_spec" --pipeline pipelines/default.yaml --backend cuda --set "model=$MODEL" \
  --tokens "${TOKENS:-128}" $(for n in ${BATCHES:-1 8}; do printf -- "--batch %s " $n; done)--rounds "${ROUNDS:-3}" --fixed ${DRAFTERS:+--drafters $DRAFTERS} \
  --warmup 1 --trace-dir "$OUT/trace" \
  > "$OUT/bench_spec.json" 2> "$OUT/bench_spec.log"
brc=$?
grep -E "^(count|json|code|prose) " "$OUT/bench_spec.log"
grep -E "closing|CUDA graphs:" "$OUT/bench_spec.log" | head -32
echo "bench_spec exit $brc"
# Few files come back from $OUT: the traces travel as one.
if [ -d "$OUT/trace" ]; then
  tar -czf "$OUT/spec_trace.tar.gz" -C "$OUT" trace && rm -rf "$OUT/trace"
  ls -l "$OUT/spec_trace.tar.gz"
fi
[ $rc -eq 0 ] && [ $brc -eq 0 ]
