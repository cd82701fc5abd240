#!/usr/bin/env python3
"""bench_ranks: one model over two CPU ranks (tensor, expert, pipeline parallel) against one.

usage: bench/ranks/bench_ranks.py [--build build] [--threads 1] [--only NAME]

For each set-up, `tandem worker` runs rank 1 and build/bench/engine/bench_engine rank 0 (its
prefill, 1-stream and N-stream decode figures), both with transport.profile on, so rank 0's
transport prints the wall time spent in each collective. Two runs per set-up: a prefill run
(one 256-token prompt, 2 generated tokens) and a decode run (16-token prompts, 64 tokens).
The collectives' share is the time rank 0 spent in the forward's collectives (all-reduce,
all-gather, send / recv) over bench_engine's step time (engine_s); it includes waiting for the
other rank, so for pipeline parallel (rank 0 receives the first stage's output) it is mostly
rank 1's compute. backend.threads is per rank: one rank at --threads 1 against two ranks at
--threads 1 each, on a machine with at least two cores.
"""
import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLM_TWO = ROOT / "pipelines/glm-tiny-2rank-cpu.yaml"
RUNS = {"prefill": ["--prompt", "256", "--gen", "2", "--streams", "1", "--repeats", "1"],
        "decode": ["--prompt", "16", "--gen", "64", "--decode-prompt", "8", "--streams", "1,4", "--repeats", "1"]}
FORWARD_COLLECTIVES = ("all_reduce_sum", "all_gather", "send", "recv")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def glm_pipelines(tmp):
    """The GLM tiny two-rank file without its drafter (the figures are the model's), and one rank."""
    text = GLM_TWO.read_text().replace("model: tests/", f"model: {ROOT}/tests/")
    text = re.sub(r"^drafter:.*$", "", text, flags=re.M)
    one = re.sub(r"^transport:.*$", "transport: { plugin: transport.local }", text, flags=re.M)
    one = re.sub(r"^topology:.*$", "topology:  { ranks: 1, tensor_parallel: 1, expert_parallel: 1 }", one, flags=re.M)
    (Path(tmp) / "glm2.yaml").write_text(text)
    (Path(tmp) / "glm1.yaml").write_text(one)
    return str(Path(tmp) / "glm1.yaml"), str(Path(tmp) / "glm2.yaml")


def setups(tmp):
    glm1, glm2 = glm_pipelines(tmp)
    topo = lambda tp, pp, ep: ["--set", f"topology.tensor_parallel={tp}", "--set", f"topology.pipeline_parallel={pp}",
                               "--set", f"topology.expert_parallel={ep}"]
    return [  # name, pipeline, overrides, ranks
        ("llama one rank", str(ROOT / "pipelines/cpu.yaml"), [], 1),
        ("llama TP=2", str(ROOT / "pipelines/tp2-cpu.yaml"), [], 2),
        ("llama PP=2", str(ROOT / "pipelines/pp2-cpu.yaml"), [], 2),
        ("glm tiny one rank", glm1, [], 1),
        ("glm tiny TP=2", glm2, topo(2, 1, 1), 2),
        ("glm tiny TP=2 EP=2", glm2, topo(2, 1, 2), 2),
        ("glm tiny PP=2", glm2, topo(1, 2, 1), 2),
    ]


def collectives(stderr):
    """{name: seconds} from rank 0's transport.profile line."""
    m = re.search(r"transport\.gloo rank 0 collectives:(.*)", stderr)
    if not m:
        return {}
    return {w: float(s) for w, s in re.findall(r" (\w+) \d+ calls ([\d.]+) s;", m.group(1))}


def run(build, pipeline, extra, ranks, bench_args, threads):
    common = ["--set", f"backend.threads={threads}", "--set", "engine.kv_tokens=8192", *extra]
    worker = None
    if ranks == 2:
        port = free_port()
        common += ["--set", f"transport.rendezvous=127.0.0.1:{port}", "--set", "transport.profile=true",
                   "--set", "transport.timeout_s=120", "--set", "topology.heartbeat_s=5"]
        worker = subprocess.Popen([str(build / "cli/tandem"), "worker", "--pipeline", pipeline, "--rank", "1", *common],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = subprocess.run([str(build / "bench/engine/bench_engine"), "--pipeline", pipeline, *bench_args,
                        *common], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if worker:
        worker.wait(timeout=120)
    if r.returncode != 0:
        sys.exit(f"bench_engine failed on {pipeline}:\n{r.stderr}")
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    by = lambda fig, **k: next((x for x in lines if x["figure"] == fig and all(x.get(a) == v for a, v in k.items())), {})
    figures = {"prefill_tps": by("prefill").get("tps", float("nan")),
               "decode_tps_1": by("decode", streams=1).get("tps", float("nan")),
               "decode_tps_n": by("decode", streams=4).get("tps", float("nan")),
               "engine_s": by("engine_time")["engine_s"]}
    spent = collectives(r.stderr)
    figures["collective_s"] = sum(spent.get(k, 0.0) for k in FORWARD_COLLECTIVES)
    return figures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", default="", help="run the set-ups whose name contains this")
    a = ap.parse_args()
    build = Path(a.build)
    print(f"| set-up | prefill tok/s | decode tok/s, 1 stream | decode tok/s, 4 streams | collectives' share, "
          f"prefill run | collectives' share, decode run |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name, pipeline, extra, ranks in setups(tmp):
            if a.only and a.only not in name:
                continue
            p = run(build, pipeline, extra, ranks, RUNS["prefill"], a.threads)
            d = run(build, pipeline, extra, ranks, RUNS["decode"], a.threads)
            share = lambda f: f"{100 * f['collective_s'] / f['engine_s']:.0f}%" if f["collective_s"] else "-"
            print(f"| {name} | {p['prefill_tps']:.1f} | {d['decode_tps_1']:.1f} | {d['decode_tps_n']:.1f} | "
                  f"{share(p)} | {share(d)} |", flush=True)


if __name__ == "__main__":
    main()
