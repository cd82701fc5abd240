#!/usr/bin/env python3
"""llama.cpp's n-gram speculative decoding on bench_spec's requests: the peer of issue 16.

    bench_spec ... --dump-prompts DIR        # the requests, as token ids after the chat template
    python3 bench/peers/spec_peer.py --server llama.cpp/b/bin/llama-server --model M.gguf \\
        --prompts DIR --out OUT [--rounds 3] [--ngl 99]

Each round starts one llama-server per configuration (no drafter, then each n-gram drafter),
all at once on their own ports, one slot each (batch 1), and like bench_spec's runtimes each
first serves the warm-up request (bench_spec's neutral prompt, 32 tokens), then the tasks in
bench_spec's order, the configurations of a task back to back. Fresh servers every round:
ngram-cache and ngram-mod keep what they saw across requests, and must not learn a task's
answer from an earlier round. Every request is POST /completion with the prompt as token ids
(bench_spec's, so both engines see the same tokens), temperature 0, n_predict = bench_spec's
--tokens, stopping at the end of turn unless bench_spec ignored it. tok/s is the server's own
figure (timings.predicted_per_second: the tokens after the first over the time from the first
to the last, bench_spec's definition); acceptance is timings.draft_n_accepted / draft_n.

Writes OUT/llama_spec.jsonl (one line per request, then one summary line per configuration
and task: median tok/s, the median of the per-round ratios to no drafter, acceptance, and
whether the output tokens equal no drafter's: greedy speculative decoding is meant to be
lossless) and the servers' logs in OUT/llama_spec_logs/; prints a table on stdout.
"""
import argparse
import json
import pathlib
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

# llama.cpp's n-gram drafters at commit 0c1e570 (common/speculative.cpp), all in llama-server.
# ngram-simple is vLLM's prompt lookup, tandem's drafter.ngram, with one n-gram size (the
# latest earlier occurrence of the last n tokens proposes what followed, at least n and at
# most m tokens): tandem's k = 4 with n = 1, 2 and 3 (tandem looks up n = 4 down to 1; on the
# CPU n = 4 drafted next to nothing on these tasks), and llama.cpp's defaults (n = 12, m = 48).
# ngram-cache is llama-lookup's algorithm (n-gram statistics of the context, 8 tokens a draft;
# the server never resets them between requests). ngram-map-k at its defaults (n = 12, m = 48).
# --spec-default is llama.cpp's recommended n-gram setting (ngram-mod, 24-token match,
# 48..64-token drafts). The ones that draft nothing on these short answers say so.
CONFIGS = [
    ("none", ""),
    ("simple-n1m4", "--spec-type ngram-simple --spec-ngram-simple-size-n 1 --spec-ngram-simple-size-m 4"),
    ("simple-n2m4", "--spec-type ngram-simple --spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m 4"),
    ("simple-n3m4", "--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 4"),
    ("simple", "--spec-type ngram-simple"),
    ("cache", "--spec-type ngram-cache"),
    ("map-k", "--spec-type ngram-map-k"),
    ("default", "--spec-default"),
]


def post(port, body, timeout, path="/completion"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_servers(a, configs, rnd, logs):
    procs = []
    for i, (name, extra) in enumerate(configs):
        cmd = [a.server, "-m", a.model, "-ngl", str(a.ngl), "-fa", "on", "-np", "1", "-c", str(a.ctx),
               "--port", str(a.port + i), "--no-webui"] + (["-t", str(a.threads)] if a.threads else []) + shlex.split(extra)
        log = open(logs / f"{name}-r{rnd}.log", "w")
        log.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), log))
    deadline = time.time() + a.start_timeout
    for i, (p, _) in enumerate(procs):
        while not healthy(a.port + i):
            if p.poll() is not None or time.time() > deadline:
                stop_servers(procs)
                sys.exit(f"spec_peer: llama-server '{configs[i][0]}' did not start (exit {p.poll()}); "
                         f"see {logs}/{configs[i][0]}-r{rnd}.log")
            time.sleep(0.25)
    return procs


def stop_servers(procs):
    for p, _ in procs:
        if p.poll() is None:
            p.terminate()
    for p, log in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


def request(port, prompt, timeout):
    body = {"prompt": prompt["tokens"], "n_predict": prompt["max_tokens"], "ignore_eos": prompt["ignore_eos"],
            "temperature": 0.0, "top_k": 1, "seed": 0, "cache_prompt": False, "return_tokens": True,
            "stream": False}
    r = post(port, body, timeout)
    t = r.get("timings", {})
    return {"tok_s": t.get("predicted_per_second", 0.0), "predicted_n": t.get("predicted_n", 0),
            "predicted_ms": t.get("predicted_ms", 0.0), "prompt_n": t.get("prompt_n", 0),
            "draft_n": t.get("draft_n", 0), "draft_accepted": t.get("draft_n_accepted", 0),
            "stop_type": r.get("stop_type"), "tokens": r.get("tokens", []), "content": r.get("content", "")}


def same_tokenization(port, prompts, text_dir):
    """Whether llama.cpp's own tokenizer (BOS as the GGUF says, special tokens parsed) gives
    each dumped prompt text exactly tandem's ids: the token ids are what is sent either way."""
    out = {}
    for p in prompts:
        txt = text_dir / f"{p['task']}.txt"
        if txt.exists():
            r = post(port, {"content": txt.read_text(), "add_special": True, "parse_special": True}, 60, "/tokenize")
            out[p["task"]] = r.get("tokens") == p["tokens"]
    return out


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def summarise(runs, configs, tasks):
    out = []
    for task in tasks:
        for name, extra in configs:
            mine = [r for r in runs if r["task"] == task and r["config"] == name]
            if not mine:
                continue
            base = {r["round"]: r for r in runs if r["task"] == task and r["config"] == "none"}
            ratios = [r["tok_s"] / base[r["round"]]["tok_s"] for r in mine if base.get(r["round"], {}).get("tok_s")]
            diffs = [first_difference(r["tokens"], base[r["round"]]["tokens"]) for r in mine if r["round"] in base]
            drafted = sum(r["draft_n"] for r in mine)
            accepted = sum(r["draft_accepted"] for r in mine)
            out.append({"bench": "llama_spec_summary", "task": task, "config": name, "args": extra,
                        "rounds": len(mine), "tok_s": statistics.median(r["tok_s"] for r in mine),
                        "speedup": statistics.median(ratios) if ratios else None,
                        "tokens": statistics.median(r["predicted_n"] for r in mine),
                        "draft_n": drafted, "draft_accepted": accepted,
                        "acceptance": accepted / drafted if drafted else None,
                        # the first token where the output parts from no drafter's (null: identical)
                        "first_difference": next((d for d in diffs if d is not None), None),
                        "identical": all(d is None for d in diffs)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("--model", required=True, help="the GGUF bench_spec ran")
    ap.add_argument("--prompts", required=True, help="bench_spec --dump-prompts DIR")
    ap.add_argument("--out", required=True, help="where llama_spec.jsonl and the logs go")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ngl", type=int, default=99, help="layers on the GPU (0: CPU only)")
    ap.add_argument("--threads", type=int, default=0, help="llama-server -t (0: its default)")
    ap.add_argument("--ctx", type=int, default=4096, help="each server's context (one slot)")
    ap.add_argument("--port", type=int, default=8093, help="the first server's port (the others follow)")
    ap.add_argument("--configs", help="comma-separated names among: " + ", ".join(n for n, _ in CONFIGS) +
                    " (none is always first)")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=ARGS",
                    help="an extra configuration: NAME and llama-server arguments (repeatable)")
    ap.add_argument("--tasks", help="comma-separated subset of the dumped tasks")
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--request-timeout", type=float, default=300)
    a = ap.parse_args()
    # `timeout` sends SIGTERM: leave through the finally that stops the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    configs = list(CONFIGS)
    if a.configs:
        want = a.configs.split(",")
        unknown = [w for w in want if w not in dict(CONFIGS)]
        if unknown:
            sys.exit(f"spec_peer: unknown configuration(s) {unknown}")
        configs = [c for c in CONFIGS if c[0] == "none" or c[0] in want]
    for c in a.config:
        name, _, extra = c.partition("=")
        configs.append((name, extra))
    prompts = [json.loads(line) for line in (pathlib.Path(a.prompts) / "prompts.jsonl").read_text().splitlines() if line]
    warm = next((p for p in prompts if p["task"] == "warmup"), None)
    work = [p for p in prompts if p["task"] != "warmup" and (not a.tasks or p["task"] in a.tasks.split(","))]
    out = pathlib.Path(a.out)
    logs = out / "llama_spec_logs"
    logs.mkdir(parents=True, exist_ok=True)

    runs = []
    with open(out / "llama_spec.jsonl", "w") as f:
        for rnd in range(a.rounds):
            t0 = time.time()
            procs = start_servers(a, configs, rnd, logs)
            try:
                if rnd == 0:
                    same = same_tokenization(a.port, prompts, pathlib.Path(a.prompts))
                    f.write(json.dumps({"bench": "llama_spec_tokenization", "same_as_tandem": same}) + "\n")
                    print(f"llama.cpp's tokenization of the prompt texts = tandem's ids: {same}", file=sys.stderr)
                if warm:
                    for i in range(len(configs)):
                        request(a.port + i, warm, a.request_timeout)
                for p in work:
                    for i, (name, extra) in enumerate(configs):
                        r = request(a.port + i, p, a.request_timeout)
                        r.update({"bench": "llama_spec", "round": rnd, "task": p["task"], "config": name,
                                  "args": extra, "prompt_tokens": len(p["tokens"])})
                        runs.append(r)
                        f.write(json.dumps(r) + "\n")
                        f.flush()
                        print(f"round {rnd} {p['task']:6} {name:12} {r['tok_s']:8.1f} tok/s  "
                              f"{r['predicted_n']:4d} tokens  drafted {r['draft_n']:4d} accepted {r['draft_accepted']:4d}",
                              file=sys.stderr)
            finally:
                stop_servers(procs)
            print(f"round {rnd}: {time.time() - t0:.1f} s", file=sys.stderr)
        summary = summarise(runs, configs, [p["task"] for p in work])
        for s in summary:
            f.write(json.dumps(s) + "\n")

    print("| task | llama.cpp drafter | tok/s | speed-up | accepted / drafted | tokens | output = no drafter's |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in summary:
        acc = f"{s['draft_accepted']}/{s['draft_n']} ({s['acceptance']:.0%})" if s["draft_n"] else "-"
        same = "yes" if s["identical"] else f"no (from token {s['first_difference']})"
        sp = f"{s['speedup']:.2f}x" if s["speedup"] else "-"
        print(f"| {s['task']} | {s['config']} | {s['tok_s']:,.1f} | {sp} | {acc} | {s['tokens']:.0f} | {same} |")


if __name__ == "__main__":
    main()
