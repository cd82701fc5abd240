#!/usr/bin/env bash
# Trains the DFlash2 drafter on one H200 in one device call (issue 16), from the repo root:
#
#   OUT=$OUT bash tools/train_dflash2/h200.sh          # carry .whl (the gguf wheel; accelerate and psutil are there)
#
# Needs, on that machine: tandem built with CUDA in build-gpu/ and the default model at $MODEL
# (bench/peers/gpu.sh's build and run phases leave both; else the model store's copy under
# ~/.cache/tandem/models is used), python3 with torch (CUDA), transformers, safetensors, numpy,
# httpx, tokenizers, pyyaml, tqdm. Nothing is downloaded: the wheels transformers' GGUF
# loading needs come from .whl/ and are installed into /tmp/site.
#
# Stages, all bounded by DEADLINE_S (default 515 s) from the script's start:
#   1. tandem serve (backend.cuda, scheduler.max_batch=64) answers templated prompts greedily:
#      gen_data.py for GEN_MINUTES at CONCURRENCY streamed requests over GEN_PROCS client
#      processes (0: gen_data.py's default, one per 8 requests), then the four bench prompts (--bench)
#   2. the server stops; train.py --device cuda for min(TRAIN_MINUTES, what the deadline leaves
#      after EVAL_RESERVE_S), target load and taps included (--total-minutes)
#   3. eval_offline.py --device cuda --write: teacher-forced tau (held-out and bench) into
#      TRAINING.md
#   4. $OUT/drafter/: the drafter directory (2 bf16 shards, index, config, MANIFEST.sha256,
#      TRAINING.md, loss_curve.csv) and $OUT/h200.log (everything printed): 8 files, each
#      <= 16 MiB. A summary is printed last.
#
# H200_DRY=1: the same stages on this CPU machine (build /work/main/build, backend.cpu, device
# cpu, a few prompts, short budgets, under nice) to check the script; OUT defaults to a temp dir.
set -Eeuo pipefail
T0=$(date +%s)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DRY=${H200_DRY:-0}
if [ "$DRY" = 1 ]; then
  : "${OUT:=$(mktemp -d /tmp/dflash2-dry-out.XXXXXX)}" "${WORK:=$(mktemp -d /tmp/dflash2-dry-work.XXXXXX)}"
  : "${BUILD:=/work/main/build}" "${BACKEND:=backend.cpu}" "${DEVICE:=cpu}" "${PY:=/work/main/.venv/bin/python}"
  : "${WHL:=/work/main/.whl}" "${SITE:=$WORK/site}" "${NICE:=nice -n 10}"
  : "${GEN_MINUTES:=0.3}" "${MAX_PROMPTS:=40}" "${CONCURRENCY:=4}" "${MAX_BATCH:=4}" "${MAX_TOKENS:=64}"
  : "${TRAIN_MINUTES:=1.5}" "${SEQS:=4}" "${ANCHORS:=16}" "${CHUNK:=1024}" "${THREADS:=2}" "${LR:=6e-4}"
  : "${MAX_HELD:=4}" "${EVAL_CHUNK:=64}" "${DEADLINE_S:=900}" "${EVAL_RESERVE_S:=120}"
fi
: "${OUT:?set OUT (where the drafter and the log go)}" "${WORK:=/tmp/dflash2-h200}"
: "${BUILD:=build-gpu}" "${BACKEND:=backend.cuda}" "${DEVICE:=cuda}" "${PY:=python3}"
: "${WHL:=.whl}" "${SITE:=/tmp/site}" "${NICE:=}" "${PORT:=18477}"
: "${MODEL:=}"
[ -n "$MODEL" ] || MODEL=$HOME/.cache/tandem/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
: "${GEN_MINUTES:=1.5}" "${MAX_PROMPTS:=20000}" "${CONCURRENCY:=64}" "${MAX_BATCH:=64}" "${MAX_TOKENS:=256}" "${GEN_PROCS:=0}"
: "${TRAIN_MINUTES:=5.5}" "${SEQS:=48}" "${ANCHORS:=64}" "${CHUNK:=4096}" "${THREADS:=8}" "${LR:=6e-4}"
: "${MAX_HELD:=200}" "${EVAL_CHUNK:=256}" "${DEADLINE_S:=515}" "${EVAL_RESERVE_S:=75}" "${SEED:=0}"
mkdir -p "$OUT" "$WORK"
LOG=$OUT/h200.log
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1  # no progress bars in the log

SRV=
STAGE=setup
STAGE_LOG=
elapsed() { echo $(( $(date +%s) - T0 )); }
stop_server() {
  [ -n "$SRV" ] || return 0
  if kill -0 "$SRV" 2>/dev/null; then
    kill -TERM "$SRV" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$SRV" 2>/dev/null && { echo "server did not stop in 20 s: SIGKILL"; kill -KILL "$SRV" 2>/dev/null || true; }
  fi
  wait "$SRV" 2>/dev/null || true
  SRV=
}
on_err() {
  local rc=$?
  echo
  echo "FAILED: stage '$STAGE' (exit $rc) at $(elapsed) s"
  if [ -n "$STAGE_LOG" ] && [ -f "$STAGE_LOG" ]; then echo "--- tail of $STAGE_LOG"; tail -n 40 "$STAGE_LOG"; fi
  if [ -f "$WORK/server.log" ]; then echo "--- tail of the server log"; tail -n 25 "$WORK/server.log"; fi
  stop_server
  exit "$rc"
}
# Runs "$@" with its output in $WORK/$1.log and on stdout (so in h200.log too).
stage() {
  STAGE=$1; shift
  STAGE_LOG=$WORK/$STAGE.log
  echo
  echo "== $STAGE ($(elapsed) s): $*"
  "$@" 2>&1 | tee "$STAGE_LOG"
}

main() {
  trap on_err ERR
  trap stop_server EXIT
  echo "h200.sh: dry=$DRY build=$BUILD backend=$BACKEND device=$DEVICE model=$MODEL out=$OUT work=$WORK"
  echo "commit ${TANDEM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%FT%TZ), deadline ${DEADLINE_S} s"
  [ -f "$MODEL" ] || { echo "no model at $MODEL"; false; }
  [ -x "$BUILD/cli/tandem" ] || { echo "no $BUILD/cli/tandem: build tandem first (bench/peers/gpu.sh build)"; false; }
  [ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true

  STAGE=wheels
  if ls "$WHL"/*.whl >/dev/null 2>&1; then
    mkdir -p "$SITE"
    # pip when it is there; else the wheels are plain zips (pure Python, and psutil's abi3 build)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl \
      || { echo "pip failed: unzipping the wheels"; for w in "$WHL"/*.whl; do "$PY" -m zipfile -e "$w" "$SITE"; done; }
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "no wheels in $WHL: using what $PY has"
  fi
  stage imports $PY -c "
import sys, importlib.metadata as md, torch, transformers, gguf, accelerate, psutil, safetensors, httpx, numpy
print('python', sys.version.split()[0], *(f'{p} {md.version(p)}' for p in
      ('torch', 'transformers', 'gguf', 'accelerate', 'psutil', 'safetensors', 'numpy', 'httpx')))
print('gguf from', gguf.__file__)
if '$DEVICE'.startswith('cuda'):
    assert torch.cuda.is_available(), 'torch sees no CUDA device'
    print('cuda', torch.version.cuda, torch.cuda.get_device_name())
"

  STAGE=serve
  STAGE_LOG=$WORK/server.log
  local build
  build=$(cd "$BUILD" && pwd)
  export LD_LIBRARY_PATH=$build/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TANDEM_PLUGIN_PATH=$build/plugins
  echo
  echo "== serve ($(elapsed) s): $BUILD/cli/tandem serve, $BACKEND, max_batch $MAX_BATCH, port $PORT"
  $NICE "$BUILD/cli/tandem" serve --pipeline pipelines/default.yaml --set backend.plugin="$BACKEND" \
    --set model="$MODEL" --set scheduler.max_batch="$MAX_BATCH" --port "$PORT" > "$WORK/server.log" 2>&1 &
  SRV=$!
  local up=0
  for _ in $(seq 360); do
    kill -0 "$SRV" 2>/dev/null || { echo "the server exited"; false; }
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then up=1; break; fi
    sleep 0.5
  done
  [ $up = 1 ] || { echo "no /health in 180 s"; false; }
  echo "server up at $(elapsed) s"

  local gen_s
  gen_s=$(awk -v m="$GEN_MINUTES" 'BEGIN { printf "%d", m * 60 }')
  stage gen timeout $((gen_s + 240)) $NICE $PY tools/train_dflash2/gen_data.py --port "$PORT" --out "$WORK/train.jsonl" \
    --minutes "$GEN_MINUTES" --max-prompts "$MAX_PROMPTS" --concurrency "$CONCURRENCY" --procs "$GEN_PROCS" \
    --max-tokens "$MAX_TOKENS" --seed "$SEED" --gguf "$MODEL"
  stage bench timeout 240 $NICE $PY tools/train_dflash2/gen_data.py --port "$PORT" --out "$WORK/bench.jsonl" --bench \
    --max-tokens "$MAX_TOKENS" --concurrency 4 --gguf "$MODEL"
  STAGE=stop-server
  stop_server
  echo "server stopped at $(elapsed) s; $(grep -c . "$WORK/train.jsonl") training sequences"

  # What TRAINING.md says about the data.
  local gpu machine
  gpu=$( [ "$DEVICE" = cpu ] && echo "CPU ($(nproc) cores)" || nvidia-smi --query-gpu=name --format=csv,noheader | head -1 )
  machine="$gpu, $BACKEND"
  cat > "$WORK/notes.md" <<EOF
- Generation (\`tools/train_dflash2/h200.sh\`$([ "$DRY" = 1 ] && echo ", DRY RUN")): \`tandem serve --pipeline
  pipelines/default.yaml --set backend.plugin=$BACKEND --set scheduler.max_batch=$MAX_BATCH\` on $machine;
  \`gen_data.py --minutes $GEN_MINUTES --max-prompts $MAX_PROMPTS --concurrency $CONCURRENCY --procs $GEN_PROCS --max-tokens $MAX_TOKENS --seed $SEED\`
  (streamed, ids from the SSE chunks):
  $(grep '^wrote' "$WORK/gen.log" | tail -1); \`--bench\`: $(grep '^wrote' "$WORK/bench.log" | tail -1).
EOF

  local left train_s train_min
  left=$(( DEADLINE_S - $(elapsed) - EVAL_RESERVE_S ))
  train_s=$(awk -v m="$TRAIN_MINUTES" -v l="$left" 'BEGIN { t = m * 60; if (l < t) t = l; printf "%d", t }')
  [ "$train_s" -ge 60 ] || { echo "only ${train_s} s left for training (deadline ${DEADLINE_S} s)"; false; }
  train_min=$(awk -v s="$train_s" 'BEGIN { printf "%.2f", s / 60 }')
  stage train timeout $((train_s + 120)) $NICE $PY tools/train_dflash2/train.py --device "$DEVICE" \
    --data "$WORK/train.jsonl" --gguf "$MODEL" --out "$WORK/drafter" --minutes "$TRAIN_MINUTES" \
    --total-minutes "$train_min" --seqs "$SEQS" --anchors "$ANCHORS" --chunk "$CHUNK" --lr "$LR" \
    --threads "$THREADS" --seed "$SEED" --notes "$WORK/notes.md"
  copy_out  # the trained drafter is in $OUT even if the eval below fails
  local eval_rc=0
  stage eval timeout $(( DEADLINE_S - $(elapsed) + 30 )) $NICE $PY tools/train_dflash2/eval_offline.py \
    --drafter "$WORK/drafter" --data "$WORK/train.jsonl" --bench "$WORK/bench.jsonl" --device "$DEVICE" \
    --gguf "$MODEL" --max-held "$MAX_HELD" --chunk "$EVAL_CHUNK" --threads "$THREADS" --write || eval_rc=$?
  if [ $eval_rc != 0 ]; then
    echo "FAILED: stage 'eval' (exit $eval_rc): \$OUT/drafter has the trained weights without the tau table"
    tail -n 40 "$WORK/eval.log"
  else
    copy_out  # TRAINING.md (tau table) and MANIFEST.sha256 as eval_offline.py rewrote them
  fi
  echo
  echo "== summary ($(elapsed) s in all)"
  echo "data:  $(grep '^wrote' "$WORK/gen.log" | tail -1)"
  echo "bench: $(grep '^wrote' "$WORK/bench.log" | tail -1)"
  echo "train: $(grep '^done:' "$WORK/train.log" | tail -1)"
  echo "tau (teacher-forced; selector / argmax):"
  grep -E '^\| (held-out|bench) ' "$WORK/eval.log" | awk -F'|' '{ for (i = 2; i <= 7; i++) gsub(/ /, "", $i)
    printf "  %-8s %-7s seqs %4d anchors %6d  tau %s / %s\n", $2, $3, $4, $5, $6, $7 }' || echo "  (no eval rows)"
  echo "files: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')"
  trap - ERR
  return $eval_rc
}

copy_out() {
  STAGE=copy
  STAGE_LOG=
  rm -rf "$OUT/drafter"
  mkdir -p "$OUT/drafter"
  cp "$WORK"/drafter/* "$OUT/drafter/"
  local nfiles big
  nfiles=$(( $(find "$OUT/drafter" -type f | wc -l) + 1 ))
  big=$(find "$OUT" -type f -size +16M)
  [ "$nfiles" -le 8 ] || { echo "$nfiles files for \$OUT (at most 8)"; false; }
  [ -z "$big" ] || { echo "over 16 MiB: $big"; false; }
  (cd "$OUT/drafter" && sha256sum -c --quiet MANIFEST.sha256)
  echo "copied to $OUT/drafter at $(elapsed) s"
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
