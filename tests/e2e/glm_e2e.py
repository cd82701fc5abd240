#!/usr/bin/env python3
"""The tiny random GLM-5-family model served end to end (suite 'e2e').

usage: glm_e2e.py TANDEM_EXE

tests/fixtures/glm_moe_dsa/tiny (tools/fixtures/make_tiny_glm_moe_dsa.py: a glm_moe_dsa
Hugging Face directory, bf16 safetensors in two shards, GLM's pre-tokenizer and chat template)
runs through `tandem run --model DIR` (pipelines/safetensors.yaml: weights.safetensors on
backend.cpu) and `tandem serve --model DIR`, answered through the official openai client:
- greedy tokens of a prompt longer than index_topk (the sparse path) equal
  tests/fixtures/glm_moe_dsa/tiny_reference.json (Hugging Face transformers) up to the first
  near-tie of the reference;
- the completions endpoint returns what `tandem run` printed; chat completions render GLM's
  template; streaming equals the non-streamed text;
- broken directories (an unknown config key, a missing shard, a truncated shard) fail with a
  message naming the file, exit status 1.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tandem_server import Server  # noqa: E402

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
MODEL = ROOT / "tests/fixtures/glm_moe_dsa/tiny"
REFERENCE = ROOT / "tests/fixtures/glm_moe_dsa/tiny_reference.json"
TMP = tempfile.mkdtemp(prefix="tandem_glm_e2e_")


def tandem(*args, timeout=300):
    return subprocess.run([TANDEM, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


class GlmServing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ref = json.loads(REFERENCE.read_text())
        cls.server = Server(TANDEM, MODEL, ROOT)

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.close()
        assert rc == 0, f"server exited {rc}"

    def test_run_greedy_matches_transformers(self):
        checked = 0
        for prompt in self.ref["prompts"]:
            ids = prompt["token_ids"]
            if len(ids) <= 8:  # index_topk: only prompts that take the sparse path
                continue
            want = prompt["greedy"]["token_ids"]
            margins = prompt["greedy"].get("margins", [1.0] * len(want))
            out = os.path.join(TMP, f"run_{checked}.json")
            r = tandem("run", "--model", str(MODEL), "--raw", "--prompt", prompt["text"], "-n", str(len(want)),
                       "--ignore-eos", "-q", "--logprobs-out", out)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            got = json.loads(Path(out).read_text())
            self.assertEqual(got["prompt"], ids, "tokenization differs from Hugging Face tokenizers")
            n = next((i for i, m in enumerate(margins) if m < 1e-3), len(want))
            self.assertEqual(got["tokens"][:n], want[:n], prompt["text"][:60])
            checked += 1
        self.assertGreaterEqual(checked, 2)

    def test_completion_equals_run(self):
        text = "The quick brown fox jumps over the lazy dog, again and again."
        run = tandem("run", "--model", str(MODEL), "--raw", "--prompt", text, "-n", "12", "--ignore-eos", "-q")
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        r = self.server.client.completions.create(model=self.server.model, prompt=text, max_tokens=12, temperature=0,
                                                  extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.choices[0].text + "\n", run.stdout)

    def test_chat_and_stream(self):
        msgs = [{"role": "user", "content": "Count from one to ten, please."}]
        r = self.server.client.chat.completions.create(model=self.server.model, messages=msgs, max_tokens=10, temperature=0)
        self.assertGreater(r.usage.prompt_tokens, 8)
        full = r.choices[0].message.content
        parts = self.server.client.chat.completions.create(model=self.server.model, messages=msgs, max_tokens=10,
                                                           temperature=0, stream=True)
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in parts if c.choices), full)

    def broken(self, name, mutate):
        d = Path(TMP) / name
        shutil.copytree(MODEL, d)
        mutate(d)
        r = tandem("run", "--model", str(d), "--prompt", "hi", "-n", "2")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        return r.stderr

    def test_broken_directories_fail_clearly(self):
        def unknown_key(d):
            cfg = json.loads((d / "config.json").read_text())
            cfg["magic_new_attention"] = True
            (d / "config.json").write_text(json.dumps(cfg))
        err = self.broken("unknown_key", unknown_key)
        self.assertIn("magic_new_attention", err)
        self.assertIn("config.json", err)

        err = self.broken("missing_shard", lambda d: (d / "model-00002-of-00002.safetensors").unlink())
        self.assertIn("model-00002-of-00002.safetensors", err)

        def truncate(d):
            f = d / "model-00001-of-00002.safetensors"
            f.write_bytes(f.read_bytes()[:5000])
        err = self.broken("truncated", truncate)
        self.assertIn("model-00001-of-00002.safetensors", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
