#!/usr/bin/env python3
"""The side-by-side table of bench/peers/gpu.sh: tandem against llama.cpp, same GGUF, same GPU.

    python3 bench/peers/table.py OUT_DIR

Reads what gpu.sh wrote in OUT_DIR (llama-bench and llama-batched-bench JSON lines,
bench_engine's and bench_serving.py's JSON lines) and prints a Markdown table with the
ratio tandem / llama.cpp per figure, then the issue's goals that the figures decide.
"""
import json
import pathlib
import sys


def json_lines(path, key=None):
    out = []
    p = pathlib.Path(path)
    if not p.exists():
        return out
    for line in p.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if key is None or all(obj.get(k) == v for k, v in key.items()):
            out.append(obj)
    return out


def main(out):
    out = pathlib.Path(out)
    # llama.cpp
    pp = {}
    for r in json_lines(out / "llama_pp.jsonl"):
        if r.get("n_gen") == 0 and r.get("n_prompt"):
            pp[r["n_prompt"]] = max(pp.get(r["n_prompt"], 0), r["avg_ts"])
    tg1 = [r["avg_ts"] for r in json_lines(out / "llama_tg.jsonl") if r.get("n_prompt") == 0]
    batched = {}
    for name in ("llama_batched.jsonl", "llama_batched.log"):
        for r in json_lines(out / name):
            if "speed_tg" in r:
                batched[r["pl"]] = r["speed_tg"]
    # tandem
    eng = json_lines(out / "tandem_engine.txt", {"bench": "engine"})
    t_pp = {r["prompt"]: r["tps"] for r in eng if r.get("figure") == "prefill"}
    t_dec = {r["streams"]: r["tps"] for r in eng if r.get("figure") == "decode"}
    ceiling = next((r for r in eng if r.get("figure") == "ceiling"), None)
    http, sse, sse_dec = {}, {}, {}
    for who in ("tandem", "llama"):
        for r in json_lines(out / f"http_{who}.txt", {"bench": "serving"}):
            http[(who, r["concurrency"])] = r["output_throughput"]
        for r in json_lines(out / f"http_sse_{who}.txt", {"bench": "sse_load"}):
            sse[(who, r["concurrency"])] = r["output_tps"]
            if r.get("decode_tps"):
                sse_dec[(who, r["concurrency"])] = r["decode_tps"]

    rows = []

    def row(what, t, l, goal=""):
        ratio = f"{t / l:.2f}" if t and l else "-"
        fmt = lambda v: f"{v:,.0f}" if v else "-"
        rows.append(f"| {what} | {fmt(t)} | {fmt(l)} | {ratio} | {goal} |")

    print("| measure (tok/s) | tandem | llama.cpp | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    for b in sorted(set(t_dec) | set(batched)):
        goal = {1: ">= 3,000 and 1.5x", 8: ">= 8,000 and 1.5x", 64: ">= 45,000 and 1.5x"}.get(b, ">= 1.5x")
        row(f"decode, {b} stream{'s' if b > 1 else ''} (llama-batched-bench S_TG)", t_dec.get(b), batched.get(b), goal)
    if tg1:
        row("decode, 1 stream (llama-bench tg128)", t_dec.get(1), max(tg1))
    for p in sorted(set(t_pp) | set(pp)):
        row(f"prefill, {p}-token prompt (llama-bench pp, best ubatch)", t_pp.get(p), pp.get(p),
            ">= 500,000 and 1.5x" if p == 8192 else ">= 1.5x")
    for c in (1, 64):
        row(f"HTTP output tok/s, {c} concurrent (bench_serving.py)", http.get(("tandem", c)), http.get(("llama", c)))
        row(f"HTTP output tok/s, {c} concurrent (sse_load, C++ client)", sse.get(("tandem", c)), sse.get(("llama", c)))
    print("\n".join(rows))
    if ceiling:
        print(f"\nceiling: {ceiling['device']} {ceiling['bandwidth_gbs']:,.0f} GB/s measured; weights "
              f"{ceiling['weight_bytes'] / 1e6:.1f} MB per decode step -> 1-stream bound {ceiling['bound_tps_1']:,.0f} tok/s")
    for client, figs in (("bench_serving.py", http), ("sse_load", sse)):
        if figs.get(("tandem", 64)) and t_dec.get(64):
            print(f"HTTP output rate at 64 streams ({client}) / in-process engine decode at 64: "
                  f"{figs[('tandem', 64)] / t_dec[64]:.2f} (output counts the prefill and the ramp)")
    # The like-for-like figure: sse_load's decode rate is bench_engine's definition (tokens
    # after every stream has its first one, over the time from then to the last one).
    if sse_dec.get(("tandem", 64)) and t_dec.get(64):
        print(f"HTTP decode rate at 64 streams (sse_load) / in-process engine decode at 64: "
              f"{sse_dec[('tandem', 64)] / t_dec[64]:.2f} (the same definition; goal >= 0.90)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: table.py OUT_DIR")
    main(sys.argv[1])
