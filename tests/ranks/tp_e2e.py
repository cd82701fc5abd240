#!/usr/bin/env python3
"""llama (the default model) over two `tandem` processes on loopback (suite 'ranks').

usage: tp_e2e.py TANDEM_EXE

- TP=2 greedy text equals one process's on the fixture prompts (float linears). The split
  sums o_proj / down partials in another order (two halves, then the all-reduce), so exact
  identity is not guaranteed by arithmetic; it holds on these prompts, and a failure here
  names the prompt to look at.
- PP=2 (pipelines/pp2-cpu.yaml: rank 1 the first 15 layers, rank 0 the last 15 and the head)
  greedy text equals one process's; here every sum is one process's, so it must, also with
  the default q8 linears. Combining PP with TP is refused before the rendezvous.
- ranks that disagree (a different engine.seed on the worker) are refused on both, naming it;
- a worker killed mid-request: the request ends with an error, later ones fail at once,
  /health answers 503 naming it, and nothing waits longer than the transport's timeout;
- bad topology / transport settings are validate-time errors.
"""
import json
import os
import socket
import subprocess
import sys
import time
import unittest
import urllib.request
from pathlib import Path

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
TP2 = str(ROOT / "pipelines/tp2-cpu.yaml")
PP2 = str(ROOT / "pipelines/pp2-cpu.yaml")
ONE = str(ROOT / "pipelines/cpu.yaml")
COMMON = ["--set", "backend.linear=float", "--set", "backend.threads=1", "--set", "engine.max_model_len=512",
          "--set", "engine.kv_tokens=8192"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendezvous_args(port, timeout_s=20):
    return ["--set", f"transport.rendezvous=127.0.0.1:{port}", "--set", f"transport.timeout_s={timeout_s}",
            "--set", "topology.heartbeat_s=1"]


def tandem(*args, timeout=300):
    return subprocess.run([TANDEM, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def worker(port, *extra, timeout_s=20, pipeline=TP2, common=COMMON):
    return subprocess.Popen([TANDEM, "worker", "--pipeline", pipeline, "--rank", "1", *common,
                             *rendezvous_args(port, timeout_s), *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def prompts():
    doc = json.loads((ROOT / "tests/fixtures/logits/llamacpp_f32deq.json").read_text())
    return [(p["name"], p["text"]) for p in doc["prompts"] if p["name"] in ("raw_capital", "code_fib", "long_prose")]


class TensorParallel(unittest.TestCase):
    def test_greedy_text_equals_one_process(self):
        for name, text in prompts():
            with self.subTest(prompt=name):
                one = tandem("run", "--raw", "--prompt", text, "-n", "32", "--pipeline", ONE, *COMMON, "-q")
                self.assertEqual(one.returncode, 0, one.stderr)
                port = free_port()
                w = worker(port)
                two = tandem("run", "--raw", "--prompt", text, "-n", "32", "--pipeline", TP2, *COMMON,
                             *rendezvous_args(port), "-q")
                out, err = w.communicate(timeout=60)
                self.assertEqual(two.returncode, 0, two.stderr)
                self.assertEqual(w.returncode, 0, err)
                self.assertIn("tensor parallel rank 1 of 2", err)
                self.assertEqual(two.stdout, one.stdout)

    def test_ranks_that_disagree_are_refused_naming_the_difference(self):
        port = free_port()
        w = worker(port, "--set", "engine.seed=7")
        r0 = tandem("run", "--raw", "--prompt", "Hi", "-n", "2", "--pipeline", TP2, *COMMON, *rendezvous_args(port),
                    "-q", timeout=120)
        _, err = w.communicate(timeout=60)
        self.assertNotEqual(r0.returncode, 0)
        self.assertNotEqual(w.returncode, 0)
        for text in (r0.stderr, err):
            self.assertIn("rank 1 refused to join: engine.seed differs", text)

    def test_killed_worker_ends_the_request_with_an_error(self):
        port, http = free_port(), free_port()
        w = worker(port, timeout_s=3)
        server = subprocess.Popen([TANDEM, "serve", "--pipeline", TP2, "--port", str(http), *COMMON,
                                   *rendezvous_args(port, 3)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, text=True)
        try:
            base = f"http://127.0.0.1:{http}"
            deadline = time.time() + 120
            while True:
                try:
                    urllib.request.urlopen(base + "/health", timeout=2)
                    break
                except Exception:
                    self.assertLess(time.time(), deadline, "the server never became healthy")
                    time.sleep(0.5)
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "stream": True,
                               "ignore_eos": True}).encode()
            req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
            start = time.time()
            events = []
            with urllib.request.urlopen(req, timeout=60) as resp:
                for raw in resp:
                    line = raw.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    events.append(line[6:])
                    if len(events) == 3:
                        w.kill()
                    if line == "data: [DONE]":
                        break
            self.assertLess(time.time() - start, 60)
            tail = " ".join(events[-3:])
            self.assertIn("ranks are lost", tail, events[-3:])
            # A later request fails at once with the same reason instead of waiting.
            body = json.dumps({"prompt": "Hello", "max_tokens": 4}).encode()
            req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
            t0 = time.time()
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    reply = resp.read().decode()
            except urllib.error.HTTPError as e:
                reply = e.read().decode()
            self.assertLess(time.time() - t0, 10)
            self.assertIn("ranks are lost", reply)
            # /health says so too (a load balancer takes the server out).
            with self.assertRaises(urllib.error.HTTPError) as health:
                urllib.request.urlopen(base + "/health", timeout=10)
            self.assertEqual(health.exception.code, 503)
            self.assertIn("ranks are lost", health.exception.read().decode())
        finally:
            w.kill()
            w.communicate(timeout=30)
            server.terminate()
            server.communicate(timeout=60)


class PipelineParallel(unittest.TestCase):
    def check(self, common):
        for name, text in prompts():
            with self.subTest(prompt=name, settings=common):
                one = tandem("run", "--raw", "--prompt", text, "-n", "32", "--pipeline", ONE, *common, "-q")
                self.assertEqual(one.returncode, 0, one.stderr)
                port = free_port()
                w = worker(port, pipeline=PP2, common=common)
                two = tandem("run", "--raw", "--prompt", text, "-n", "32", "--pipeline", PP2, *common,
                             *rendezvous_args(port))
                out, err = w.communicate(timeout=60)
                self.assertEqual(two.returncode, 0, two.stderr)
                self.assertEqual(w.returncode, 0, err)
                self.assertIn("pipeline stage 0 of 2: layers 0-14", err)
                self.assertIn("pipeline stage 1 of 2: layers 15-29", two.stderr)
                # rank 0 holds the KV of its 15 layers only: 15 x 3 KV heads x 64 x 2 x 4 bytes
                self.assertIn("KV per token: 23040 bytes", two.stderr)
                self.assertEqual(two.stdout, one.stdout)

    def test_greedy_text_equals_one_process(self):
        self.check(COMMON)

    def test_greedy_text_equals_one_process_with_q8_linears(self):
        self.check(["backend.linear=q8" if c == "backend.linear=float" else c for c in COMMON])

    def test_pipeline_with_tensor_parallel_is_refused_before_the_rendezvous(self):
        r = tandem("run", "--raw", "--prompt", "x", "--pipeline", PP2, "--set", "topology.ranks=4",
                   "--set", "topology.tensor_parallel=2", "-q", timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("topology.pipeline_parallel: pipeline parallel together with tensor parallel is not "
                      "supported yet", r.stderr)


class Validation(unittest.TestCase):
    def test_bad_transport_settings_fail_validate(self):
        cases = [(["--set", "transport.rank=2"], "transport.rank: rank 2 does not exist"),
                 (["--set", "topology.ranks=3", "--set", "topology.tensor_parallel=3", "--set", "transport.plugin=local"],
                  "transport.local serves 1 rank but topology.ranks is 3"),
                 (["--set", "transport.rendezvous=nowhere", "--set", "transport.timeout_s=0"],
                  "transport.timeout_s")]
        for extra, want in cases:
            with self.subTest(extra=extra):
                r = tandem("validate", TP2, *extra)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn(want, r.stdout + r.stderr)

    def test_serving_as_a_worker_rank_and_a_worker_without_ranks_are_errors(self):
        r = tandem("run", "--raw", "--prompt", "x", "--pipeline", TP2, "--set", "transport.rank=1", "-q")
        self.assertEqual(r.returncode, 1)
        self.assertIn("start the other ranks with `tandem worker --rank R`", r.stderr)
        r = tandem("worker", "--pipeline", ONE, "--rank", "1", "-q")
        self.assertEqual(r.returncode, 1)
        self.assertIn("transport.rank: rank 1 does not exist", r.stderr)  # a world of one has no rank 1
        r = tandem("worker", "--pipeline", TP2, "--rank", "0")
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
