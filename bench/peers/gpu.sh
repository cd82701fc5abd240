#!/usr/bin/env bash
# On the GPU machine, from the checkout's root: tandem against llama.cpp on the same GGUF,
# the same H200, in one lease. Three calls back to back (the machine stays warm ~30 s and
# keeps build-gpu/ and /tmp between calls; bench/peers/pieces.sh says what each carries):
#
#   bash bench/peers/gpu.sh build   # carry .gpu-deps (.gpu-peers too where it fits): starts llama.cpp's
#                                   #   CUDA build and tandem's whole build in the background
#                                   #   (both outlive the call) and waits up to BUILD_WAIT_S
#   bash bench/peers/gpu.sh tests   # carry .gpu-peers .gpu-model1: starts llama.cpp's build if the
#                                   #   first call did not, waits for tandem's build, runs the gpu
#                                   #   suite (scripts/gpu-build-test.sh, NO_BENCH)
#   bash bench/peers/gpu.sh run     # carry .gpu-model3: the gpu tests that need the model
#                                   #   (MODEL_TESTS), then waits for llama.cpp, runs both, prints
#                                   #   bench/peers/table.py's ratio table
#   `run` is `model` (the model tests; TRAIN=1 also trains the DFlash2 drafter beside them)
#   then `bench` (everything else): two calls where one would pass the 10-minute limit.
#   bash bench/peers/gpu.sh glm     # issue 15's GLM-5-family figures (no model needed): MLA
#                                   #   decode against copy, glm_moe_dsa at 8k..1M context
#   bash bench/peers/gpu.sh spec    # issue 16's peer, once the model is there (after `run`, or
#                                   #   `model`): bench_spec at batch 1 and llama.cpp's n-gram
#                                   #   drafters (llama-server --spec-type) on the same requests,
#                                   #   then bench/peers/spec_table.py's table (~3 minutes)
#   SPEC_CPU=1 BUILD=build TANDEM_GPU_MODEL=M.gguf LLAMA_SERVER=.../llama-server gpu.sh spec:
#   the same on the CPU (no build, no GPU: a smoke test of the scripts; SPEC_TOKENS=32
#   SPEC_ROUNDS=2 SPEC_PEER_THREADS=1 took 3 minutes on cpu-2). That llama-server: the same
#   source, cmake -DGGML_CUDA=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON ... --target llama-server
#   (with GGML_NATIVE=ON its AMX kernels stop on an illegal instruction on cpu-2).
#
# PEERS=0 leaves llama.cpp out (no build, no runs, no ratio table): tandem's own figures,
# its server against its engine, and the speculative-decoding bench, in less device time.
#
# The figures: prefill tok/s at 128..32k-token prompts (llama-bench -p, best of ubatch 512
# and 2048; tandem bench_engine --prompt), decode tok/s at 1..128 streams of 128+128 tokens
# (llama-batched-bench S_TG; tandem bench_engine --streams), and both servers over HTTP
# under bench/serving/bench_serving.py and bench/serving/sse_load at 1 and 64 concurrent streams. Logs and JSON in $OUT.
set -uo pipefail
phase=${1:?usage: gpu.sh build|tests|model|bench|run|glm|spec}
source "$(dirname "$0")/../../scripts/gpu-env.sh"
# At most 8 files come back from $OUT: everything goes back as one archive (logs.tgz).
pack_out() {
  local rc=$?
  # keep/ (files of at most 16 MiB each, e.g. trained weights) comes back as it is.
  (cd "$OUT" && tar czf /tmp/gpu-logs.tgz --exclude=./logs.tgz --exclude=./keep . &&
     find . -mindepth 1 -maxdepth 1 ! -name keep -exec rm -rf {} + && mv /tmp/gpu-logs.tgz logs.tgz)
  exit $rc
}
trap pack_out EXIT
LLAMA=/tmp/llama.cpp-src/llama.cpp
STREAMS=${PEER_STREAMS:-1,2,4,8,16,32,64,128}
PROMPTS=${PEER_PROMPTS:-128,512,2048,8192,32768}
tandem_targets=(cli/tandem plugins/cuda/backend.cuda.so plugins/gguf/weights.gguf.so plugins/fcfs/scheduler.fcfs.so
                plugins/local/transport.local.so plugins/ngram/drafter.ngram.so plugins/suffix/drafter.suffix.so
                plugins/dflash2/drafter.dflash2.so bench/engine/bench_engine bench/spec/bench_spec
                bench/serving/sse_load bench/kv/bench_kv_quality tests/spec/test_spec_gpu)

start_llama_build() {
  # Started once a lease (built, or building in its own session since an earlier call).
  [ -d "$LLAMA" ] && return
  [ -f .gpu-peers/llama.cpp.tar.xz ] || { echo "no .gpu-peers/llama.cpp.tar.xz: run bench/peers/fetch.sh"; return 1; }
  rm -rf /tmp/llama.cpp-src && mkdir -p /tmp/llama.cpp-src
  tar xJf .gpu-peers/llama.cpp.tar.xz -C /tmp/llama.cpp-src || return 1
  cp .gpu-peers/SOURCE /tmp/llama.cpp-src/
  # Its own session: the build outlives this call (the next calls wait for it).
  setsid nohup bash -c "cd $LLAMA && cmake -B b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF && \
      cmake --build b -j 12 --target llama-bench llama-batched-bench llama-server; echo \$? > /tmp/llama.cpp-build.rc" \
    > /tmp/llama.cpp-build.log 2>&1 < /dev/null &
}

# Waits up to $2 seconds for file $1 (a background job's exit status).
wait_file() {
  local waited=0
  while [ ! -f "$1" ] && [ $waited -lt "$2" ]; do sleep 5; waited=$((waited + 5)); done
  [ -f "$1" ]
}

wait_llama_build() {
  wait_file /tmp/llama.cpp-build.rc "$1" && [ "$(cat /tmp/llama.cpp-build.rc)" = 0 ] && return 0
  echo "llama.cpp build: not done or failed"; tail -20 /tmp/llama.cpp-build.log; return 1
}

case $phase in
build)
  if [ "${PEERS:-1}" = 1 ]; then
    step "llama.cpp (background) from $(cat .gpu-peers/SOURCE 2>/dev/null)"
    start_llama_build
  fi
  step "tandem configure, then the whole build in the background"
  gpu_configure
  rm -f /tmp/tandem-build.rc
  # Everything (the gpu suite's tests, benches, CLI, plugins): the next calls wait for it.
  # BUILD_TARGETS="a b ...": only those (and what they need), for a shorter build.
  setsid nohup bash -c "ninja -C $BUILD -j 14 -k 0 ${BUILD_TARGETS:-} > /tmp/tandem-build.log 2>&1; echo \$? > /tmp/tandem-build.rc" \
    > /dev/null 2>&1 < /dev/null &
  wait_file /tmp/tandem-build.rc "${BUILD_WAIT_S:-480}" && echo "tandem build: exit $(cat /tmp/tandem-build.rc)"
  grep -E "error|FAILED" /tmp/tandem-build.log | head -30
  [ "${PEERS:-1}" = 1 ] && echo "llama.cpp build: $(tail -1 /tmp/llama.cpp-build.log)"
  ;;
tests)
  # .gpu-peers may come with this call instead of the first (the first carries .gpu-deps).
  [ "${PEERS:-1}" = 1 ] && [ -f .gpu-peers/llama.cpp.tar.xz ] && start_llama_build
  wait_file /tmp/tandem-build.rc 420 || { echo "tandem build not done"; tail -3 /tmp/tandem-build.log; exit 1; }
  # -k 0: a target that failed is shown here; the tests whose programs exist still run.
  [ "$(cat /tmp/tandem-build.rc)" = 0 ] || grep -E "error|FAILED" /tmp/tandem-build.log | head -30
  OUT=$OUT NO_BENCH=1 BUILD=$BUILD bash scripts/gpu-build-test.sh
  ;;
model|bench|run)
  [ -n "$MODEL" ] || { echo "no model yet (carry the .gpu-model* pieces in order)"; exit 1; }
  # Where the tests and the default pipeline look for it (the store verifies its sha256).
  mkdir -p ~/.cache/tandem/models/smollm2-135m-instruct
  cp -n "$MODEL" ~/.cache/tandem/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
  ;;&
model|run)
  gpu_build "${tandem_targets[@]}"
  if [ -n "${TRAIN:-}" ]; then
    # TRAIN=1: the DFlash2 drafter's H200 training (tools/train_dflash2/h200.sh) in its own
    # session beside the model tests (their timings do not matter); this call waits for it
    # and `bench` brings its weights back under keep/.
    step "DFlash2 training in the background (tools/train_dflash2/h200.sh)"
    rm -rf /tmp/train-out /tmp/train.rc && mkdir -p /tmp/train-out
    setsid nohup bash -c "OUT=/tmp/train-out MODEL=$MODEL bash tools/train_dflash2/h200.sh > /tmp/train-outer.log 2>&1; echo \$? > /tmp/train.rc" \
      > /dev/null 2>&1 < /dev/null &
  fi
  step "the gpu suite's tests that need the model: ${MODEL_TESTS:=gpu_model nccl_one_rank_e2e spec_gpu}"
  meson test -C "$BUILD" --no-rebuild --print-errorlogs $MODEL_TESTS > "$OUT/model_tests.log" 2>&1
  grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Skipped:" "$OUT/model_tests.log"
  cp "$BUILD/meson-logs/testlog.txt" "$OUT/model_testlog.txt" 2>/dev/null
  if [ -n "${TRAIN:-}" ]; then
    wait_file /tmp/train.rc "${TRAIN_WAIT_S:-480}" && echo "training: exit $(cat /tmp/train.rc)" || echo "training: still running"
    tail -25 /tmp/train-outer.log
  fi
  ;;&
bench|run)
  if [ -d /tmp/train-out ]; then  # the weights of a TRAIN=1 model call (7 files) and its log
    mkdir -p "$OUT/keep" && cp /tmp/train-out/drafter/* "$OUT/keep/" 2>/dev/null
    cp /tmp/train-out/*.log "$OUT/" 2>/dev/null
  fi
  [ "${PEERS:-1}" = 1 ] && { wait_llama_build 420 || exit 1; }
  export LD_LIBRARY_PATH=$PWD/$BUILD/core/src/base:$LLAMA/b/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TANDEM_PLUGIN_PATH=$PWD/$BUILD/plugins
  cuda_sets=(--set model="$MODEL" --set backend.plugin=backend.cuda --set engine.max_model_len=33024)
  if [ "${PEERS:-1}" = 1 ]; then
  step "llama.cpp: llama-bench prefill and batch-1 decode"
  timeout 240 "$LLAMA/b/bin/llama-bench" -m "$MODEL" -ngl 99 -fa 1 -p "$PROMPTS" -n 0 -b 2048 -ub 512,2048 -r 3 -o jsonl \
    > "$OUT/llama_pp.jsonl" 2> "$OUT/llama_pp.log"
  timeout 120 "$LLAMA/b/bin/llama-bench" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n 128 -r 5 -o jsonl \
    > "$OUT/llama_tg.jsonl" 2> "$OUT/llama_tg.log"
  step "llama.cpp: llama-batched-bench decode at $STREAMS streams"
  timeout 300 "$LLAMA/b/bin/llama-batched-bench" -m "$MODEL" -ngl 99 -fa on -c 33792 -b 2048 -ub 512 \
    -npp 128 -ntg 128 -npl "$STREAMS" --output-format jsonl > "$OUT/llama_batched.jsonl" 2> "$OUT/llama_batched.log"
  fi
  step "tandem: bench_engine"
  timeout "${ENGINE_BENCH_S:-300}" "$BUILD/bench/engine/bench_engine" --pipeline pipelines/default.yaml "${cuda_sets[@]}" --set scheduler.max_batch=128 \
    --streams "$STREAMS" --prompt "$PROMPTS" --gen 128 --decode-prompt 128 --repeats 3 \
    > "$OUT/tandem_engine.txt" 2> "$OUT/tandem_engine.log"
  # HTTP=0 leaves the servers out (a call that must end sooner).
  if [ "${HTTP:-1}" = 1 ]; then
  step "HTTP: both servers under bench_serving.py"
  servers=(tandem:8092)
  lsrv=
  if [ "${PEERS:-1}" = 1 ]; then
    "$LLAMA/b/bin/llama-server" -m "$MODEL" -ngl 99 -fa on -np 64 -c $((64 * 512)) --port 8091 \
      > "$OUT/llama_server.log" 2>&1 &
    lsrv=$!
    servers=(llama:8091 tandem:8092)
  fi
  "$BUILD/cli/tandem" serve --pipeline pipelines/default.yaml "${cuda_sets[@]}" --set scheduler.max_batch=64 --port 8092 \
    > "$OUT/tandem_server.log" 2>&1 &
  tsrv=$!
  for pair in "${servers[@]}"; do
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:${pair#*:}/health" >/dev/null && break; sleep 0.5; done
  done
  for pair in "${servers[@]}"; do
    timeout 150 python3 bench/serving/bench_serving.py --base-url "http://127.0.0.1:${pair#*:}" --concurrency 1 64 \
      --num-prompts 128 --input-len 128 --output-len 128 > "$OUT/http_${pair%%:*}.txt" 2>&1
    # The C++ client too: one Python thread (~100 us per SSE event) caps bench_serving.py
    # near 15k tok/s, so its 64-stream figure may measure the client (bench/RESULTS.md).
    timeout 120 "$BUILD/bench/serving/sse_load" --port "${pair#*:}" --concurrency 1,64 --prompt-tokens 128 \
      --output-len 128 > "$OUT/http_sse_${pair%%:*}.txt" 2>&1
  done
  kill $lsrv $tsrv 2>/dev/null; wait 2>/dev/null
  fi
  step "table"
  { echo "commit ${TANDEM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} $(date -u +%FT%TZ), $(cat /tmp/llama.cpp-src/SOURCE 2>/dev/null || echo "no llama.cpp (PEERS=0)")"
    cat "$OUT/machine.txt"
    python3 bench/peers/table.py "$OUT"; } | tee "$OUT/peers.md"
  # KV_QUALITY=0 / SPEC=0 leave out the two parts below (a call that must end in 10 minutes).
  if [ "${KV_QUALITY:-1}" = 1 ]; then
  step "KV element types on the default model: bf16 and fp8 e4m3 against f32 (bench_kv_quality)"
  timeout 120 "$BUILD/bench/kv/bench_kv_quality" --model "$MODEL" > "$OUT/bench_kv_quality.txt" 2>&1
  [ "${KV_DECODE:-1}" = 1 ] && timeout 120 "$BUILD/bench/kv/bench_kv_quality" --model "$MODEL" --chunk 1 --max-tokens 2048 \
    >> "$OUT/bench_kv_quality.txt" 2>&1
  grep -vE '^\[' "$OUT/bench_kv_quality.txt" | tail -12
  fi
  [ "${SPEC:-1}" = 1 ] || exit 0
  step "speculative decoding on backend.cuda (bench_spec, batch 1 and 8, against no drafter)"
  timeout "${SPEC_BENCH_S:-150}" "$BUILD/bench/spec/bench_spec" --pipeline pipelines/default.yaml --backend cuda \
    --set model="$MODEL" --batch 1 --batch 8 --rounds 1 --drafters ngram suffix dflash2 > "$OUT/bench_spec.txt" 2>&1
  grep -vE '^\[|^\{' "$OUT/bench_spec.txt" | tail -30
  step "the same with backend.batch_invariant (exact verification: every row on the GEMV and prefill attention)"
  timeout "${SPEC_BENCH_S:-150}" "$BUILD/bench/spec/bench_spec" --pipeline pipelines/default.yaml --backend cuda \
    --set model="$MODEL" --set backend.batch_invariant=true --batch 1 --batch 8 --rounds 1 --drafters ngram suffix dflash2 \
    > "$OUT/bench_spec_invariant.txt" 2>&1
  grep -vE '^\[|^\{' "$OUT/bench_spec_invariant.txt" | tail -30
  ;;
glm)
  # Issue 15's GPU figures, no model needed: MLA decode over the latent cache (N sequences x
  # C context, dense and top-2048, against the copy figure), and the 2-layer random
  # glm_moe_dsa's prefill and decode at 8k..1M tokens of context, DSA and dense MLA.
  gpu_build bench/cuda/bench_cuda_mla bench/glm/bench_glm_long_context plugins/cuda/backend.cuda.so
  export TANDEM_PLUGIN_PATH=$PWD/$BUILD/plugins
  step "MLA decode on the latent cache (bench_cuda_mla)"
  timeout 120 "$BUILD/bench/cuda/bench_cuda_mla" ${MLA_ARGS:-} > "$OUT/bench_cuda_mla.txt" 2>&1
  cat "$OUT/bench_cuda_mla.txt"
  step "glm_moe_dsa at 8k..1M tokens of context (bench_glm_long_context)"
  timeout "${GLM_BENCH_S:-300}" "$BUILD/bench/glm/bench_glm_long_context" --backend backend.cuda ${GLM_ARGS:-} \
    > "$OUT/bench_glm_long_context.txt" 2>&1
  grep -vE '^\[' "$OUT/bench_glm_long_context.txt" | tail -16
  ;;
spec)
  # Issue 16's peer: tandem's drafters against llama.cpp's n-gram speculative decoding, batch 1,
  # greedy, on the same GGUF and machine in one call. bench_spec runs none / ngram / suffix /
  # dflash2 (SPEC_DRAFTERS) for SPEC_ROUNDS rounds of SPEC_TOKENS tokens a request, then dumps
  # its requests (the chat-templated prompts as token ids) for bench/peers/spec_peer.py,
  # which serves them to llama-server without a drafter and with each n-gram drafter
  # (SPEC_PEER_CONFIGS, comma-separated, default all in spec_peer.py), fresh servers every
  # round. Requests stop at the end of turn, as bench_spec's do; SPEC_IGNORE_EOS=1 generates
  # SPEC_TOKENS every time on both. PEERS=0 leaves llama.cpp out.
  [ -n "$MODEL" ] || { echo "no model yet (carry the .gpu-model* pieces in order, or set TANDEM_GPU_MODEL)"; exit 1; }
  spec_args=(--tokens "${SPEC_TOKENS:-128}" --batch 1)
  [ "${SPEC_IGNORE_EOS:-0}" = 1 ] && spec_args+=(--ignore-eos)
  if [ "${SPEC_CPU:-0}" = 1 ]; then
    # A smoke test on a machine without a GPU: binaries already built in $BUILD, llama-server
    # built without CUDA at $LLAMA_SERVER.
    server=${LLAMA_SERVER:-$LLAMA/b/bin/llama-server}
    spec_sets=(--pipeline pipelines/cpu.yaml --backend cpu --set model="$MODEL")
    ngl=0
  else
    [ "${PEERS:-1}" = 1 ] && [ -f .gpu-peers/llama.cpp.tar.xz ] && start_llama_build
    # The `build` call's background build of everything, if it is still going.
    [ -f /tmp/tandem-build.log ] && ! [ -f /tmp/tandem-build.rc ] && wait_file /tmp/tandem-build.rc 420
    gpu_configure
    gpu_build bench/spec/bench_spec plugins/cuda/backend.cuda.so plugins/gguf/weights.gguf.so plugins/fcfs/scheduler.fcfs.so \
      plugins/local/transport.local.so plugins/ngram/drafter.ngram.so plugins/suffix/drafter.suffix.so \
      plugins/dflash2/drafter.dflash2.so || exit 1
    server=$LLAMA/b/bin/llama-server
    spec_sets=(--pipeline pipelines/default.yaml --backend cuda --set model="$MODEL")
    ngl=99
  fi
  export LD_LIBRARY_PATH=$PWD/$BUILD/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TANDEM_PLUGIN_PATH=$PWD/$BUILD/plugins
  step "tandem: bench_spec at batch 1 (${SPEC_DRAFTERS:=ngram suffix dflash2}; ${SPEC_ROUNDS:=3} rounds)"
  # shellcheck disable=SC2086
  timeout "${SPEC_BENCH_S:-300}" "$BUILD/bench/spec/bench_spec" "${spec_sets[@]}" "${spec_args[@]}" \
    --rounds "$SPEC_ROUNDS" --drafters $SPEC_DRAFTERS > "$OUT/spec_tandem.jsonl" 2> "$OUT/spec_tandem.log"
  echo "bench_spec exit $?"
  grep -E "^(count|json|code|prose) .*tok/s" "$OUT/spec_tandem.log"
  if [ "${PEERS:-1}" = 1 ]; then
    [ "${SPEC_CPU:-0}" = 1 ] || wait_llama_build 420 || exit 1
    "$BUILD/bench/spec/bench_spec" "${spec_sets[@]}" "${spec_args[@]}" --dump-prompts "$OUT/spec_prompts" \
      2>> "$OUT/spec_tandem.log" || { tail -5 "$OUT/spec_tandem.log"; exit 1; }
    step "llama.cpp: llama-server with and without its n-gram drafters on bench_spec's requests"
    timeout "${SPEC_PEER_S:-300}" python3 bench/peers/spec_peer.py --server "$server" --model "$MODEL" \
      --prompts "$OUT/spec_prompts" --out "$OUT" --rounds "$SPEC_ROUNDS" --ngl $ngl \
      ${SPEC_PEER_CONFIGS:+--configs "$SPEC_PEER_CONFIGS"} ${SPEC_PEER_THREADS:+--threads $SPEC_PEER_THREADS} \
      > "$OUT/spec_peer.md" 2> "$OUT/spec_peer.log"
    echo "spec_peer exit $?"
    grep -E "^round [0-9]+:|Error|error" "$OUT/spec_peer.log" | tail -12
  fi
  step "table"
  { echo "commit ${TANDEM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} $(date -u +%FT%TZ), $(cat /tmp/llama.cpp-src/SOURCE 2>/dev/null || echo "llama.cpp: $server")"
    cat "$OUT/machine.txt"
    python3 bench/peers/spec_table.py "$OUT"; } | tee "$OUT/spec_peers.md"
  ;;
build|tests|model|bench|run|glm|spec) ;;
*) echo "usage: gpu.sh build|tests|model|bench|run|glm|spec"; exit 2 ;;
esac
