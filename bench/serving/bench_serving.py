#!/usr/bin/env python3
"""Serving benchmark for an OpenAI-compatible server (tandem serve, vLLM, llama-server).

Metrics follow `vllm bench serve` (docs/benchmarking/cli.md):
  TTFT  request sent -> first streamed content chunk
  ITL   every gap between consecutive content chunks, pooled over requests
  TPOT  per request (E2EL - TTFT) / (output tokens - 1)
  E2EL  request sent -> last chunk
  request throughput = completed / duration; output token throughput = output tokens / duration
Output tokens are the server's usage.completion_tokens (stream_options.include_usage).

  .venv/bin/python bench/serving/bench_serving.py --base-url http://127.0.0.1:8080 \
      --concurrency 1 4 16 --num-prompts 32 --input-len 64 --output-len 64

Prints one table per concurrency level and one JSON line per level (packages:
tools/requirements-e2e.txt), with the client's own CPU share: this client is one Python
thread, so at tens of thousands of events a second it, not the server, sets the figure
(bench/serving/sse_load.cpp is the C++ client for that regime).
"""
import argparse
import asyncio
import json
import random
import statistics
import time

import httpx

WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program").split()


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def make_prompt(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


async def one_request(client, args, prompt):
    body = {"model": args.model, "prompt": prompt, "max_tokens": args.output_len, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": args.ignore_eos, "temperature": 0}
    t0 = time.perf_counter()
    stamps, usage = [], None
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return {"ok": False, "error": f"{r.status_code} {r.text[:200]}"}
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage") and not ev.get("choices"):
                usage = ev["usage"]
            elif ev.get("choices") and ev["choices"][0].get("text"):
                stamps.append(time.perf_counter())
    if not stamps:
        return {"ok": False, "error": "no content"}
    out_tokens = usage["completion_tokens"] if usage else len(stamps)
    e2el = stamps[-1] - t0
    ttft = stamps[0] - t0
    return {"ok": True, "ttft": ttft, "e2el": e2el, "itl": [b - a for a, b in zip(stamps, stamps[1:])],
            "tpot": (e2el - ttft) / (out_tokens - 1) if out_tokens > 1 else None,
            "out": out_tokens, "in": usage["prompt_tokens"] if usage else 0}


async def run_level(args, concurrency, prompts):
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=args.base_url, timeout=args.timeout) as client:
        async def limited(p):
            async with sem:
                return await one_request(client, args, p)
        t0, c0 = time.perf_counter(), time.process_time()
        results = await asyncio.gather(*[limited(p) for p in prompts])
        duration = time.perf_counter() - t0
        cpu = time.process_time() - c0
    return results, duration, cpu


def summarize(concurrency, results, duration, cpu):
    ok = [r for r in results if r["ok"]]
    s = {"concurrency": concurrency, "completed": len(ok), "failed": len(results) - len(ok),
         "duration_s": duration, "client_cpu_share": cpu / duration, "input_tokens": sum(r["in"] for r in ok),
         "output_tokens": sum(r["out"] for r in ok),
         "request_throughput": len(ok) / duration, "output_throughput": sum(r["out"] for r in ok) / duration}
    series = {"ttft": [r["ttft"] for r in ok], "tpot": [r["tpot"] for r in ok if r["tpot"] is not None],
              "itl": [x for r in ok for x in r["itl"]], "e2el": [r["e2el"] for r in ok]}
    for name, xs in series.items():
        s[f"mean_{name}_ms"] = statistics.fmean(xs) * 1e3 if xs else float("nan")
        for p in (50, 90, 99):
            s[f"p{p}_{name}_ms"] = percentile(xs, p) * 1e3
    return s


def print_table(s):
    print(f"\n============ concurrency {s['concurrency']} ============")
    print(f"{'Successful requests:':<34}{s['completed']}  (failed {s['failed']})")
    print(f"{'Benchmark duration (s):':<34}{s['duration_s']:.2f}")
    print(f"{'Total input / generated tokens:':<34}{s['input_tokens']} / {s['output_tokens']}")
    print(f"{'Request throughput (req/s):':<34}{s['request_throughput']:.2f}")
    print(f"{'Output token throughput (tok/s):':<34}{s['output_throughput']:.2f}")
    # Near 100%, this one-thread Python client is what limits the figure (about 75-100 us of
    # CPU per SSE event on the 2-core CPU machine): measure with sse_load (C++) instead.
    print(f"{'Client CPU (% of one core):':<34}{100 * s['client_cpu_share']:.0f}")
    print(f"{'metric (ms)':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}")
    for name in ("ttft", "tpot", "itl", "e2el"):
        print(f"{name.upper():<10}" + "".join(f"{s[k]:>10.2f}" for k in
              (f"mean_{name}_ms", f"p50_{name}_ms", f"p90_{name}_ms", f"p99_{name}_ms")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default=None, help="default: the first of /v1/models")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=64, help="prompt length in words (~tokens)")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--seed", type=int, default=0, help="varies prompts between runs (prefix cache)")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    if args.model is None:
        args.model = httpx.get(args.base_url + "/v1/models").json()["data"][0]["id"]
    rng = random.Random(args.seed)
    for c in args.concurrency:
        prompts = [make_prompt(rng, args.input_len) for _ in range(args.num_prompts)]
        results, duration, cpu = asyncio.run(run_level(args, c, prompts))
        s = summarize(c, results, duration, cpu)
        print_table(s)
        print(json.dumps({"bench": "serving", "model": args.model, **s}))
        for r in results:
            if not r["ok"]:
                print("error:", r["error"])
                break


if __name__ == "__main__":
    main()
