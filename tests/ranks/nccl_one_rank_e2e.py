#!/usr/bin/env python3
"""transport.nccl bound to backend.cuda's stream, on one GPU (suite 'gpu'; exit 77 without one).

usage: nccl_one_rank_e2e.py TANDEM_EXE

The default model on backend.cuda over transport.nccl with topology.ranks 1 takes the split
path of many ranks (tensor parallel of 1: its o_proj / down all-reduces and the LM head's
all-gather run through NCCL on the backend's stream). Its greedy text must equal the same
pipeline over transport.local, where the model makes no collective call at all.
"""
import ctypes
import os
import subprocess
import sys
import unittest
from pathlib import Path

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
PIPELINE = str(ROOT / "pipelines/default.yaml")
MODEL = os.environ.get("TANDEM_TEST_MODEL", "")
COMMON = ["--model", MODEL, "--set", "backend.plugin=backend.cuda", "--set", "engine.max_model_len=512", "--set", "engine.kv_tokens=8192"]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]


def have_gpu():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    n = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0


def run(prompt, *extra):
    return subprocess.run([TANDEM, "run", "--raw", "--prompt", prompt, "-n", "32", "--pipeline", PIPELINE, *COMMON,
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)


class NcclOneRank(unittest.TestCase):
    def test_greedy_text_equals_transport_local(self):
        for prompt in PROMPTS:
            with self.subTest(prompt=prompt):
                local = run(prompt, "--set", "transport.plugin=transport.local")
                self.assertEqual(local.returncode, 0, local.stderr)
                nccl = run(prompt, "--set", "transport.plugin=transport.nccl")
                self.assertEqual(nccl.returncode, 0, nccl.stderr)
                self.assertIn("tensor parallel rank 0 of 1", nccl.stderr)  # the split path ran
                self.assertNotIn("tensor parallel", local.stderr)
                self.assertGreater(len(local.stdout), 0)
                self.assertEqual(nccl.stdout, local.stdout)


if __name__ == "__main__":
    if not have_gpu():
        print("no CUDA device: skipped")
        sys.exit(77)
    if not MODEL or not os.path.exists(MODEL):
        print(f"model file {MODEL or '(TANDEM_TEST_MODEL unset)'} not found: skipped")
        sys.exit(77)
    unittest.main(argv=sys.argv[:1], verbosity=2)
