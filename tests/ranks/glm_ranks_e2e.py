#!/usr/bin/env python3
"""glm_moe_dsa over two `tandem` processes on loopback (suite 'ranks').

usage: glm_ranks_e2e.py TANDEM_EXE

The tiny GLM-5-family fixture through pipelines/glm-tiny-2rank-cpu.yaml (MLA + DSA, routed
and shared experts, drafter.suffix, scheduler.warm_bypass) on two ranks gives the greedy
text of the same graph on one process, with the routed experts split by FFN (tensor
parallel, expert_parallel 1) and by expert id (expert_parallel 2), and without the drafter.
The split sums o_proj / MLP partials in another order (per rank, then the all-reduce), so
exact identity is not guaranteed by arithmetic; it holds on these prompts, and a failure
names the prompt and the split to look at.

Pipeline parallel (tensor_parallel 1, pipeline_parallel 2): rank 1 holds layers 0-1, rank 0
layer 2 (a "shared" DSA layer, so the top-k crosses with the residual stream), the norm and
the head; every sum is one process's, so the text must be identical. Also over three ranks,
one layer each (rank 2 a middle stage).

A worker killed while the server is idle is noticed by the heartbeat: /health turns 503
naming the lost ranks within the heartbeat plus the transport's timeout, and the server
still stops cleanly.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
TWO = ROOT / "pipelines/glm-tiny-2rank-cpu.yaml"
COMMON = ["--set", "backend.threads=1", "--set", "engine.kv_tokens=4096"]
PROMPTS = ["The capital of France is", "def fib(n):\n    return", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,"]
TOKENS = "24"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tandem(*args, timeout=300):
    return subprocess.run([TANDEM, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def pipelines(tmp, drafter):
    """The two-rank file (model path made absolute) and the same graph on one process."""
    text = TWO.read_text().replace("model: tests/", f"model: {ROOT}/tests/")
    if not drafter:
        text = re.sub(r"^drafter:.*$", "", text, flags=re.M)
    one = re.sub(r"^transport:.*$", "transport: { plugin: transport.local }", text, flags=re.M)
    one = re.sub(r"^topology:.*$", "topology:  { ranks: 1, tensor_parallel: 1, expert_parallel: 1 }", one, flags=re.M)
    paths = []
    for name, body in (("two.yaml", text), ("one.yaml", one)):
        p = Path(tmp) / name
        p.write_text(body)
        paths.append(str(p))
    return paths


TENSOR = {"tensor_parallel": 2, "pipeline_parallel": 1}
PIPELINE = {"tensor_parallel": 1, "pipeline_parallel": 2, "expert_parallel": 1}


def run_two(two, prompt, port, topology):
    """Rank 0's run and the workers' (ranks 1..; topology.ranks of them in all): rank 0's
    result, the workers' worst return code and their stderr joined."""
    ranks = topology.get("ranks", 2)
    split = [a for k, v in topology.items() for a in ("--set", f"topology.{k}={v}")]
    split += ["--set", f"transport.rendezvous=127.0.0.1:{port}", "--set", "transport.timeout_s=20",
              "--set", "topology.heartbeat_s=1"]
    workers = [subprocess.Popen([TANDEM, "worker", "--pipeline", two, "--rank", str(r), *COMMON, *split], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(1, ranks)]
    errs = []
    try:
        r0 = tandem("run", "--raw", "--prompt", prompt, "-n", TOKENS, "--pipeline", two, *COMMON, *split, "-q")
        errs = [w.communicate(timeout=60)[1] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.communicate()
    return r0, max(abs(w.returncode) for w in workers), "".join(errs)


class GlmAcrossRanks(unittest.TestCase):
    def check(self, drafter, topology, worker_says):
        with tempfile.TemporaryDirectory() as tmp:
            two, one = pipelines(tmp, drafter)
            for prompt in PROMPTS:
                with self.subTest(prompt=prompt, topology=topology, drafter=drafter):
                    ref = tandem("run", "--raw", "--prompt", prompt, "-n", TOKENS, "--pipeline", one, *COMMON, "-q")
                    self.assertEqual(ref.returncode, 0, ref.stderr)
                    r0, wrc, err = run_two(two, prompt, free_port(), topology)
                    self.assertEqual(r0.returncode, 0, r0.stderr)
                    self.assertEqual(wrc, 0, err)
                    for text in worker_says:
                        self.assertIn(text, err)
                    self.assertGreater(len(ref.stdout), 0)
                    self.assertEqual(r0.stdout, ref.stdout)

    def check_tensor(self, ep, drafter):
        self.check(drafter, {**TENSOR, "expert_parallel": ep},
                   ["tensor parallel rank 1 of 2", "experts 4-7" if ep == 2 else "experts all, FFN 16"])

    def test_expert_parallel_with_the_drafter(self):
        self.check_tensor(ep=2, drafter=True)

    def test_experts_split_by_ffn_with_the_drafter(self):
        self.check_tensor(ep=1, drafter=True)

    def test_expert_parallel_without_a_drafter(self):
        self.check_tensor(ep=2, drafter=False)

    def test_pipeline_parallel_with_the_drafter(self):
        self.check(True, PIPELINE, ["pipeline stage 0 of 2: layers 0-1"])

    def test_pipeline_parallel_over_three_ranks(self):
        # A middle stage receives and passes on; the top-k crosses from stage 1 to stage 2.
        self.check(False, {**PIPELINE, "ranks": 3, "pipeline_parallel": 3},
                   ["pipeline stage 0 of 3: layers 0-0", "pipeline stage 1 of 3: layers 1-1"])


class Refused(unittest.TestCase):
    def test_an_expert_split_other_than_the_tensor_parallel_ranks_fails_at_once(self):
        r = tandem("run", "--raw", "--prompt", "hi", "-n", "2", "--pipeline", str(TWO), *COMMON,
                   "--set", "topology.ranks=4", "--set", "topology.tensor_parallel=4",
                   "--set", "topology.expert_parallel=2", "-q", timeout=60)
        self.assertEqual(r.returncode, 1)  # before the rendezvous: nothing waits for ranks
        self.assertIn("topology.expert_parallel: expert_parallel must be 1 or tensor_parallel (4)", r.stderr)


def health(base):
    """(status, body) of GET /health."""
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:  # not listening yet
        return None, str(e)


class IdleWorkerLost(unittest.TestCase):
    def test_health_turns_unhealthy_when_an_idle_worker_dies(self):
        port, http = free_port(), free_port()
        split = ["--set", f"transport.rendezvous=127.0.0.1:{port}", "--set", "transport.timeout_s=3",
                 "--set", "topology.heartbeat_s=1"]
        w = subprocess.Popen([TANDEM, "worker", "--pipeline", str(TWO), "--rank", "1", *COMMON, *split], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = subprocess.Popen([TANDEM, "serve", "--pipeline", str(TWO), "--port", str(http), *COMMON, *split],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{http}"
        try:
            deadline = time.time() + 60
            while health(base)[0] != 200:
                self.assertLess(time.time(), deadline, "the server never became healthy")
                time.sleep(0.2)
            w.kill()
            w.communicate(timeout=30)
            killed = time.time()
            while (h := health(base))[0] == 200:
                self.assertLess(time.time() - killed, 20, "/health still says ok 20 s after the worker died")
                time.sleep(0.2)
            self.assertEqual(h[0], 503, h)
            self.assertIn("the ranks are lost", h[1])
        finally:
            if w.poll() is None:
                w.kill()
                w.communicate()
            server.terminate()
            try:
                _, err = server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
                self.fail("the server did not stop within 60 s of SIGTERM")
        self.assertEqual(server.returncode, 0, err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
