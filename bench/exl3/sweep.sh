#!/usr/bin/env bash
# Quantizes SOURCE.gguf at each K with `tandem quantize --to exl3` and measures each result
# with bench_exl3_quality (perplexity and mean KL against the source, through tandem).
#
#   bench/exl3/sweep.sh BUILD_DIR SOURCE.gguf WORK_DIR [K ...]      (default K: 2 3 4 5 6 8)
#
# Environment: CALIB (calibration text, default /usr/share/common-licenses/Apache-2.0),
# TEXT (held-out text, default /usr/share/common-licenses/GPL-3), HEAD_BITS (default 16),
# QUALITY_ARGS (extra bench_exl3_quality arguments, e.g. "--backend backend.cuda"), QUANT_ARGS
# (extra `tandem quantize` arguments, e.g. "--device cuda").
# Prints one markdown table row per K; quantized directories stay in WORK_DIR/k<K>.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE.gguf WORK_DIR [K ...]" >&2
  exit 2
fi
build=$1 src=$2 work=$3
shift 3
ks=("$@")
[[ ${#ks[@]} -gt 0 ]] || ks=(2 3 4 5 6 8)
calib=${CALIB:-/usr/share/common-licenses/Apache-2.0}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
for f in "$build/cli/tandem" "$build/bench/exl3/bench_exl3_quality"; do
  [[ -x $f ]] || { echo "$0: $f not built" >&2; exit 1; }
done
for f in "$src" "$calib" "$text"; do
  [[ -f $f ]] || { echo "$0: $f not found" >&2; exit 1; }
done
export TANDEM_PLUGIN_PATH=${TANDEM_PLUGIN_PATH:-$build/plugins}
mkdir -p "$work"
echo "| K | bpw (layers) | quantize s | PPL source | PPL EXL3 | mean KL (nats) | top-1 agree |"
echo "|---|---|---|---|---|---|---|"
for k in "${ks[@]}"; do
  out=$work/k$k
  t0=$(date +%s.%N)
  if [[ ! -f $out/config.json ]]; then
    # shellcheck disable=SC2086
    "$build/cli/tandem" quantize --to exl3 --bits "$k" --head-bits "${HEAD_BITS:-16}" --calibration "$calib" \
      --no-progress ${QUANT_ARGS:-} --out "$out" "$src" > "$work/quantize_k$k.log"
  fi
  t1=$(date +%s.%N)
  bpw=$(grep -o 'bits per weight[^:]*: [0-9.]*' "$work/quantize_k$k.log" | grep -o '[0-9.]*$' || echo "?")
  # shellcheck disable=SC2086
  j=$("$build/bench/exl3/bench_exl3_quality" --source "$src" --quantized "$out" --text "$text" --json ${QUALITY_ARGS:-})
  python3 - "$k" "$bpw" "$t0" "$t1" "$j" <<'PY'
import json, sys
k, bpw, t0, t1, j = sys.argv[1:]
q = json.loads(j)
print(f"| {k} | {bpw} | {float(t1) - float(t0):.0f} | {q['ppl_source']:.2f} | {q['ppl_quantized']:.2f} | "
      f"{q['mean_kl']:.5f} | {100 * q['top1_agreement']:.1f}% |", flush=True)
PY
done
