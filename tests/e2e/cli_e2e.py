#!/usr/bin/env python3
"""End-to-end checks of the `tandem` command line, run by meson (suite 'e2e').

usage: cli_e2e.py TANDEM_EXE TEST_PLUGIN_DIR

Generation is checked against llama.cpp's greedy output on the same file (the fixture
tests/fixtures/logits/llamacpp_f32deq.json, made by tools/fixtures/logits_reference.py),
pipeline errors against the golden files in tests/pipelines/bad/, and bad input against
its exit status: every failure must be a clear message and a non-zero exit, never a crash.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

TANDEM, PLUGINS = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
MODEL = os.environ["TANDEM_TEST_MODEL"]
EXACT = ["--set", "backend.plugin=backend.cpu", "--set", "backend.linear=float", "-q"]


def tandem(*args, env=None, timeout=300):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([TANDEM, *args], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def reference(name):
    doc = json.loads((ROOT / "tests/fixtures/logits/llamacpp_f32deq.json").read_text())
    return next(p for p in doc["prompts"] if p["name"] == name)


class Generation(unittest.TestCase):
    def test_raw_prompt_matches_llama_cpp_greedy(self):
        ref = reference("raw_capital")
        r = tandem("run", "--raw", "--prompt", ref["text"], "-n", "64", *EXACT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, ref["greedy"]["text"].replace("<|im_end|>", "") + "\n")

    def test_chat_prompt_matches_llama_cpp_greedy(self):
        # The fixture's prompt is the model's chat template rendered for this question.
        ref = reference("chatml_2plus2")
        r = tandem("run", "--prompt", "What is 2+2?", "-n", "64", *EXACT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, ref["greedy"]["text"].replace("<|im_end|>", "") + "\n")

    def test_same_seed_same_text_and_speed_line(self):
        args = ["run", "--prompt", "Tell me a story.", "-n", "24", "-t", "0.9", "--seed", "7"]
        a, b = tandem(*args), tandem(*args)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(a.stdout, b.stdout)
        self.assertIn("KV pool:", a.stderr)
        self.assertIn("generated:", a.stderr)


class Validation(unittest.TestCase):
    def test_bad_pipelines_print_their_golden_errors(self):
        bad = sorted((ROOT / "tests/pipelines/bad").glob("*.yaml"))
        self.assertGreaterEqual(len(bad), 15)
        for f in bad:
            want = [l for l in f.with_suffix(".expected").read_text().splitlines() if l]
            # Hints listing the whole search path differ here: run from the build tree, the
            # binary also searches the build's own plugins. host_pipeline_golden checks those
            # files against a search path of the test plugins alone.
            if any("searched <test-plugins>" in l for l in want):
                continue
            with self.subTest(file=f.name):
                args, env = [], {}
                for line in f.read_text().splitlines():
                    if line.startswith("# set: "):
                        args += ["--set", line[7:]]
                    elif line.startswith("# env: "):
                        k, v = line[7:].split("=", 1)
                        env[k] = v
                # Only the test plugins: the golden hints name what the search path holds.
                env["TANDEM_PLUGIN_PATH"] = PLUGINS
                r = tandem("validate", str(f.relative_to(ROOT)), *args, env=env)
                self.assertEqual(r.returncode, 1, r.stderr)
                lines = [l.replace(PLUGINS, "<test-plugins>") for l in r.stderr.splitlines()]
                # The golden order: errors, then warnings (ignored settings).
                got = [l for l in lines if ": error: " in l] + [l for l in lines if ": warning: " in l]
                self.assertEqual(got, want)

    def test_shipped_pipelines_validate(self):
        for f in sorted((ROOT / "pipelines").glob("*.yaml")):
            with self.subTest(file=f.name):
                extra = []
                # spec-dflash2.yaml's drafter opens its trained weight directory at validate;
                # until the weights are there, it is the tiny fixture's (blocks of 6: k <= 5).
                if f.name == "spec-dflash2.yaml" and not (ROOT / "drafters/smollm2-135m-instruct-dflash2").is_dir():
                    missing = tandem("validate", str(f.relative_to(ROOT)))
                    self.assertEqual(missing.returncode, 1)
                    self.assertIn("drafter.weights", missing.stderr)
                    extra = ["--set", "drafter.weights=tests/spec/fixtures/dflash2_tiny", "--set", "drafter.k=5"]
                r = tandem("validate", str(f.relative_to(ROOT)), *extra)
                self.assertEqual(r.returncode, 0, r.stderr)


class BadInput(unittest.TestCase):
    def test_usage_errors_exit_2(self):
        self.assertEqual(tandem().returncode, 2)
        self.assertEqual(tandem("frobnicate").returncode, 2)
        self.assertEqual(tandem("run", "--prompt", "x", "--top-p", "7").returncode, 2)
        self.assertEqual(tandem("run").returncode, 2)

    def test_missing_pipeline_and_model_exit_1_with_a_message(self):
        r = tandem("run", "--pipeline", "no/such.yaml", "--prompt", "x")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no/such.yaml", r.stderr)
        r = tandem("inspect", "/nonexistent/model.gguf")
        self.assertEqual(r.returncode, 1)
        self.assertIn("model.gguf", r.stderr)

    def test_corrupt_model_files_are_refused(self):
        data = Path(MODEL).read_bytes()[: 2 << 20]
        with tempfile.TemporaryDirectory() as d:
            for name, blob in [("truncated.gguf", data), ("magic.gguf", b"GGUX" + data[4:]),
                               ("empty.gguf", b"")]:
                p = Path(d) / name
                p.write_bytes(blob)
                r = tandem("inspect", str(p))
                self.assertEqual(r.returncode, 1, f"{name}: {r.stderr}")
                self.assertIn(name, r.stderr)
            # A truncated model named by a pipeline fails the run the same way.
            r = tandem("run", "--prompt", "x", "--set", f"model={Path(d) / 'truncated.gguf'}")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("truncated.gguf", r.stderr)

    def test_kv_dtype_the_backend_cannot_keep_is_refused_at_load(self):
        # backend.cpu's attention reads f32 only: bf16 and fp8 are refused before any
        # request, naming the setting; f32 (and auto, which is f32 there) run.
        for t in ("bf16", "fp8_e4m3"):
            r = tandem("run", "--raw", "--prompt", "x", "-n", "1", *EXACT, "--set", f"engine.kv_dtype={t}")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(f"engine.kv_dtype: backend.cpu cannot keep the KV cache in {t} (its attention reads f32)",
                          r.stderr)
        r = tandem("run", "--raw", "--prompt", "x", "-n", "1", *EXACT[:-1], "--set", "engine.kv_dtype=f32")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("MiB of f32", r.stderr)  # the pool's line names its element type
        r = tandem("validate", "pipelines/default.yaml", "--set", "engine.kv_dtype=f16")
        self.assertEqual(r.returncode, 1)
        self.assertIn("engine.kv_dtype", r.stderr)
        self.assertIn("'f16' is not one of auto, f32, bf16, fp8_e4m3", r.stderr)

    def test_gpu_memory_utilization_is_a_cuda_setting(self):
        # serve's vLLM spelling is backend.memory_utilization: backend.cpu has no such
        # setting, so the pipeline is refused at once, naming it.
        r = tandem("serve", "--pipeline", "pipelines/cpu.yaml", "--gpu-memory-utilization", "0.5", timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("backend.memory_utilization", r.stderr)

    def test_prompt_longer_than_the_context_fails_cleanly(self):
        r = tandem("run", "--raw", "--prompt", "word " * 600, "--set", "engine.max_model_len=256", "-q")
        self.assertEqual(r.returncode, 1)
        self.assertIn("context", r.stderr)


class Inspection(unittest.TestCase):
    def test_inspect_lists_metadata_and_tensors(self):
        r = tandem("inspect", MODEL)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("general.architecture = \"llama\"", r.stdout)
        self.assertIn("summary: 272 tensors", r.stdout)

    def test_plugins_lists_the_shipped_plugins(self):
        r = tandem("plugins", "--schema")
        for name in ["weights.gguf", "backend.cpu", "scheduler.fcfs", "transport.local", "drafter.dflash2"]:
            self.assertIn(name, r.stdout)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
