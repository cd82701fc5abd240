#!/usr/bin/env bash
# Where the batch-1 decode step goes, kernel by kernel: Nsight Compute (ncu) over
# bench_cuda_model's batch-1 loop (TANDEM_BENCH_B1_ONLY=1), one metric (kernel duration),
# clocks left alone. Kernels inside the recorded CUDA graph are profiled one node at a time,
# so each figure is that kernel alone (no PDL overlap with its neighbour). Writes
# $OUT/ncu_b1.csv and a per-kernel table $OUT/ncu_b1_table.txt.
#
#   OUT=$OUT bash scripts/gpu-profile.sh    # after scripts/gpu-build-test.sh built the bench
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
gpu_build bench/cuda/bench_cuda_model
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
# Skip the prefill and warm-up kernels; profile ~3 decode steps' worth of kernels.
TANDEM_BENCH_B1_ONLY=1 timeout 400 "$NCU" --clock-control none --metrics gpu__time_duration.sum \
  --graph-profiling node --launch-skip "${NCU_SKIP:-3000}" --launch-count "${NCU_COUNT:-600}" --csv \
  "$BUILD/bench/cuda/bench_cuda_model" > "$OUT/ncu_b1.csv" 2> "$OUT/ncu_b1.err"
echo "ncu rc=$?"
python3 - "$OUT/ncu_b1.csv" > "$OUT/ncu_b1_table.txt" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    v = v / 1000.0 if r[ui] in ("nsecond", "ns") else v * (1000.0 if r[ui] in ("msecond", "ms") else 1.0)
    name = r[ki].replace("(anonymous namespace)::", "").replace("tandem::", "")
    name = name[:100] + " grid " + r[hdr.index("Grid Size")]
    tot[name] += v; cnt[name] += 1
n = sum(cnt.values()); t = sum(tot.values())
print(f"{n} kernels profiled, {t:.1f} us total, {t / max(n, 1):.2f} us mean")
for k in sorted(tot, key=lambda k: -tot[k]):
    print(f"{cnt[k]:6d} {tot[k]:10.1f} us {tot[k] / cnt[k]:8.2f} us/each  {k}")
PY
cat "$OUT/ncu_b1_table.txt" | head -30
