#!/usr/bin/env python3
"""A model quantized on the CPU by `tandem quantize` serves through the normal pipeline (suite 'e2e').

usage: exl3_e2e.py TANDEM_EXE [BENCH_EXL3_QUALITY]

1. A tiny llama with tied embeddings like SmolLM2 (tools/fixtures/make_tiny_llama.py: 1 layer,
   hidden 128, ffn 256, the default model's vocabulary when $TANDEM_TEST_MODEL exists) is
   quantized at K = 4 with a small calibration (--head-bits 16: the LM head stays the fp16
   embedding). `tandem run --model DIR` (pipelines/exl3.yaml, backend.cpu with float linears)
   decodes greedily with --logprobs-out; tools/exl3/check_quantized.py decodes the directory
   with numpy alone, runs a float64 llama forward over the same tokens and checks tandem's
   log-probabilities and argmax tokens against it. `tandem serve --model DIR` then answers a
   completion with the same text.
2. A tied tiny llama (byte vocabulary) with a quantized LM head (--head-bits 4: lm_head
   quantized from the embedding) is checked the same way.
3. Bad input: clear messages, exit status 1.
4. When the quality bench is given, it runs on model 1 (a smoke test of its numbers' sanity).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

TANDEM = os.path.abspath(sys.argv[1])
QUALITY = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else ""
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
PY = sys.executable
FLOAT = ["--set", "backend.linear=float"]
TMP = tempfile.mkdtemp(prefix="tandem_exl3_e2e_")
PROMPT = "The quick brown fox jumps over the lazy dog. Quantized models"


def tandem(*args, timeout=600):
    return subprocess.run([TANDEM, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def make_model(name, *extra):
    path = os.path.join(TMP, name + ".gguf")
    subprocess.run([PY, str(ROOT / "tools/fixtures/make_tiny_llama.py"), path, "--layers", "1", "--ffn", "256",
                    *extra], check=True)
    return path


def quantize(gguf_path, out, *extra):
    calib = os.path.join(TMP, "calib.txt")
    if not os.path.exists(calib):
        Path(calib).write_text((ROOT / "README.md").read_text()[:4000])
    t0 = time.time()
    r = tandem("quantize", "--to", "exl3", "--bits", "4", "--calibration", calib, "--rows", "4", "--cols", "128",
               "--no-progress", "--out", out, *extra, gguf_path)
    secs = time.time() - t0
    print(f"quantize {os.path.basename(gguf_path)} {' '.join(extra)}: {secs:.1f} s", flush=True)
    return r, secs


def check(out, gguf_path, run_json):
    return subprocess.run([PY, str(ROOT / "tools/exl3/check_quantized.py"), out, gguf_path, "--max-rel-error", "0.012",
                           "--compare-run", run_json, "--logprob-tol", "2e-3", "--json"],
                          capture_output=True, text=True, timeout=600)


class Exl3Serving(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        model = os.environ.get("TANDEM_TEST_MODEL", "")
        vocab = ["--vocab-from", model] if model and os.path.exists(model) else []
        cls.gguf = make_model("tied_smollm_vocab", "--tied", *vocab)
        cls.out = os.path.join(TMP, "q4")
        cls.quant, cls.quant_s = quantize(cls.gguf, cls.out, "--head-bits", "16")

    def test_1_quantize_is_fast_and_clean(self):
        self.assertEqual(self.quant.returncode, 0, self.quant.stderr[-3000:])
        self.assertIn("LM head: fp16 (the tied embedding, no lm_head tensor)", self.quant.stdout)
        cfg = json.loads(Path(self.out, "config.json").read_text())
        self.assertEqual(cfg["quantization_config"]["quant_method"], "exl3")
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertFalse(any(n.startswith("lm_head") for n in
                             json.loads(Path(self.out, "model.safetensors.index.json").read_text())["weight_map"]))
        self.assertLess(self.quant_s, 120, "the CPU quantize of the tiny model should take well under a minute")

    def test_2_run_matches_the_numpy_forward(self):
        self.assertEqual(self.quant.returncode, 0)
        run_json = os.path.join(TMP, "run.json")
        r = tandem("run", "--model", self.out, "--raw", "--prompt", PROMPT, "-n", "12", "--ignore-eos", "-q",
                   *FLOAT, "--logprobs-out", run_json)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip(), "tandem run printed no text")
        doc = json.loads(Path(run_json).read_text())
        self.assertEqual(len(doc["tokens"]), 12)
        c = check(self.out, self.gguf, run_json)
        print(c.stdout[-1500:], c.stderr[-1500:])
        self.assertEqual(c.returncode, 0, c.stdout[-3000:] + c.stderr[-3000:])
        rep = json.loads(c.stdout)["run"]
        self.assertEqual(rep["argmax_equal"], 12)
        # The default linears (q8 activations) still run the model and produce tokens.
        r = tandem("run", "--model", self.out, "--raw", "--prompt", PROMPT, "-n", "4", "--ignore-eos", "-q")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip())

    def test_3_serve_answers_with_the_same_text(self):
        self.assertEqual(self.quant.returncode, 0)
        run = tandem("run", "--model", self.out, "--raw", "--prompt", PROMPT, "-n", "6", "--ignore-eos", "-q", *FLOAT)
        self.assertEqual(run.returncode, 0, run.stderr)
        p = subprocess.Popen([TANDEM, "serve", "--model", self.out, "--port", "0", *FLOAT], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            m = re.search(r"serving on (http://\S+)", line)
            self.assertIsNotNone(m, line + p.stderr.read() if p.poll() is not None else line)
            body = json.dumps({"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True}).encode()
            req = urllib.request.Request(m.group(1) + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                doc = json.loads(resp.read())
            self.assertEqual(doc["usage"]["completion_tokens"], 6)
            self.assertEqual(doc["choices"][0]["text"] + "\n", run.stdout)
        finally:
            p.terminate()
            p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0)

    def test_4_quality_bench_runs(self):
        if not QUALITY or not os.path.exists(QUALITY):
            self.skipTest("bench_exl3_quality not built")
        self.assertEqual(self.quant.returncode, 0)
        r = subprocess.run([QUALITY, "--source", self.gguf, "--quantized", self.out, "--ctx", "128",
                            "--max-tokens", "400", "--text", str(ROOT / "LICENSE"), "--json"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        q = json.loads(r.stdout)
        self.assertGreater(q["tokens"], 300)
        self.assertGreater(q["mean_kl"], 0)
        self.assertLess(q["mean_kl"], 1.0)
        self.assertGreater(q["top1_agreement"], 0.5)
        # A GGUF named as the quantized directory is refused with a message.
        r = subprocess.run([QUALITY, "--source", self.gguf, "--quantized", self.gguf], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a directory", r.stderr)


class TiedQuantizedHead(unittest.TestCase):
    def test_lm_head_quantized_from_the_embedding(self):
        gguf_path = make_model("tied_bytes", "--tied", "--ffn", "128")
        out = os.path.join(TMP, "tied_head4")
        r, _ = quantize(gguf_path, out, "--head-bits", "4")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("LM head: 4-bit lm_head quantized from the tied embedding", r.stdout)
        qc = json.loads(Path(out, "quantization_config.json").read_text())
        self.assertEqual(qc["tensor_storage"]["lm_head"]["bits_per_weight"], 4)
        run_json = os.path.join(TMP, "run_tied.json")
        r = tandem("run", "--model", out, "--raw", "--prompt", "hello world", "-n", "8", "--ignore-eos", "-q",
                   *FLOAT, "--logprobs-out", run_json)
        self.assertEqual(r.returncode, 0, r.stderr)
        c = check(out, gguf_path, run_json)
        print(c.stdout[-1500:], c.stderr[-1500:])
        self.assertEqual(c.returncode, 0, c.stdout[-3000:] + c.stderr[-3000:])
        self.assertIn("lm_head", json.loads(c.stdout)["modules"])


class BadInput(unittest.TestCase):
    def test_bad_models_fail_with_a_message(self):
        empty = os.path.join(TMP, "empty_dir")
        os.makedirs(empty, exist_ok=True)
        r = tandem("run", "--model", empty, "--prompt", "x", "-q")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no config.json", r.stderr)
        r = tandem("run", "--model", os.path.join(TMP, "missing_dir/"), "--prompt", "x", "-q")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no such model", r.stderr)
        gguf_path = os.path.join(TMP, "bytes.gguf")
        subprocess.run([PY, str(ROOT / "tools/fixtures/make_tiny_llama.py"), gguf_path], check=True)
        r = tandem("run", "--pipeline", "pipelines/exl3.yaml", "--model", gguf_path, "--prompt", "x", "-q")
        self.assertEqual(r.returncode, 1)
        self.assertIn("is not a directory", r.stderr)
        r = tandem("run", "--prompt", "x", "-q", "--logprobs-out", "/nonexistent/dir/x.json")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--logprobs-out", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
