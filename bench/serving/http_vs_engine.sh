#!/usr/bin/env bash
# HTTP against in-process decode on one model: bench_engine's decode figure (the ceiling)
# and `tandem serve` under sse_load (same prompts of P token ids, G tokens each, C streams),
# each level repeated R times, medians printed as a table with the ratio. Also the server's
# CPU time per streamed token (from /proc, so it holds up on a loaded machine) and the
# client's CPU share.
#
#   ninja -C build cli/tandem bench/engine/bench_engine bench/serving/sse_load plugins/...
#   bash bench/serving/http_vs_engine.sh MODEL [R=5] [STREAMS=1,8,64]
#   SETS="--set backend.plugin=backend.cpu" PROMPT=128 GEN=128 BUILD=build PORT=18123 ...
#
# A tiny random model (tools/fixtures/make_tiny_llama.py OUT --tied) makes thousands of
# tok/s on the CPU, so the server path shows. Prompt ids are 100..100+SPAN-1 (as bench_engine's:
# SPAN = min(20000, vocab - 100); 162 for that model's byte vocabulary).
set -uo pipefail
model=${1:?usage: http_vs_engine.sh MODEL [repeats] [streams]}
reps=${2:-5}
streams=${3:-1,8,64}
BUILD=${BUILD:-build} PORT=${PORT:-18123} PROMPT=${PROMPT:-128} GEN=${GEN:-128} SPAN=${SPAN:-20000}
SETS=${SETS:---set backend.plugin=backend.cpu}
TANDEM=${TANDEM:-$BUILD/cli/tandem}  # the server binary (another build's, to compare)
max_batch=$(tr , '\n' <<< "$streams" | sort -n | tail -1)
export LD_LIBRARY_PATH=$PWD/$BUILD/core/src/base${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TANDEM_PLUGIN_PATH=${TANDEM_PLUGIN_PATH:-$PWD/$BUILD/plugins}
out=$(mktemp -d)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# The server first, then R rounds of (bench_engine once, sse_load once): interleaved, so a
# change in the machine's load hits both sides of a round alike.
# shellcheck disable=SC2086
"$TANDEM" serve --pipeline pipelines/default.yaml --set model="$model" $SETS \
  --set scheduler.max_batch="$max_batch" --port "$PORT" > "$out/serve.log" 2>&1 &
srv=$!
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.5; done
load() {
  "$BUILD/bench/serving/sse_load" --port "$PORT" --concurrency "$streams" --span "$SPAN" \
    --prompt-tokens "$PROMPT" --output-len "$GEN" "$@"
}
load --salt 99999 > /dev/null  # warm-up: every batch shape once
here=$(dirname "$0")
python3 "$here/thread_snapshot.py" "$srv" > "$out/threads0.json"  # the server idles during bench_engine
for r in $(seq "$reps"); do
  # shellcheck disable=SC2086
  "$BUILD/bench/engine/bench_engine" --pipeline pipelines/default.yaml --set model="$model" $SETS \
    --set scheduler.max_batch="$max_batch" --streams "$streams" --prompt "$PROMPT" --gen "$GEN" \
    --decode-prompt "$PROMPT" --repeats 1 2> "$out/engine.log" | grep '"decode"' | sed "s/^{/{\"round\":$r,/" >> "$out/engine.jsonl"
  load --salt "$r" | grep '^{' | sed "s/^{/{\"round\":$r,/" >> "$out/http.jsonl"
done
python3 "$here/thread_snapshot.py" "$srv" > "$out/threads1.json"
kill "$srv"; wait "$srv" 2> /dev/null
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" << 'EOF'
import json, statistics, sys, pathlib
out = pathlib.Path(sys.argv[1])
eng = [json.loads(l) for l in (out / "engine.jsonl").read_text().splitlines()]
http = [json.loads(l) for l in (out / "http.jsonl").read_text().splitlines()]
tokens = sum(r["tokens"] for r in http)
print("| streams | engine decode tok/s | HTTP decode tok/s | HTTP/engine | HTTP output tok/s | client CPU |")
print("| --- | --- | --- | --- | --- | --- |")
for c in sorted({e["streams"] for e in eng}):
    e = {x["round"]: x["tps"] for x in eng if x["streams"] == c}
    h = {x["round"]: x for x in http if x["concurrency"] == c}
    ratio = statistics.median(h[r]["decode_tps"] / e[r] for r in e if r in h)  # per round, then the median
    cpu = sum(x["client_cpu_s"] for x in h.values()) / sum(x["wall_s"] for x in h.values())
    print(f"| {c} | {statistics.median(e.values()):,.0f} | {statistics.median(x['decode_tps'] for x in h.values()):,.0f} "
          f"| {ratio:.2f} | {statistics.median(x['output_tps'] for x in h.values()):,.0f} | {100 * cpu:.0f}% |")
print(f"medians of {len(eng) // max(1, len({e['streams'] for e in eng}))} rounds; HTTP/engine is the median of each round's ratio")
print(f"\nserver threads over the sse_load runs, per streamed token ({tokens} tokens):")
EOF
python3 "$here/thread_snapshot.py" --diff "$out/threads0.json" "$out/threads1.json" \
  "$(python3 -c 'import json,sys; print(sum(json.loads(l)["tokens"] for l in open(sys.argv[1])))' "$out/http.jsonl")"
if [ -n "${KEEP:-}" ]; then echo "logs in $out"; else rm -rf "$out"; fi
