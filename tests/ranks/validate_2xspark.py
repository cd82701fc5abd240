#!/usr/bin/env python3
"""`tandem validate` on the two-Spark serving graph and its CPU sibling (suite 'ranks').

usage: validate_2xspark.py TANDEM_EXE

- pipelines/glm5-flash-2xspark.yaml validates; in a build without backend.cuda /
  transport.nccl those are the only errors (each naming the plugin), and every other section
  validates on a copy with the CPU plugins in their place.
- pipelines/glm-tiny-2rank-cpu.yaml validates, and is the same graph: the same scheduler
  and drafter plugins, the scheduler's seed knobs, and the same topology (over transport.gloo,
  as CPU ranks need).
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
SPARK = ROOT / "pipelines/glm5-flash-2xspark.yaml"
TINY = ROOT / "pipelines/glm-tiny-2rank-cpu.yaml"


def validate(path):
    r = subprocess.run([TANDEM, "validate", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def section(path, name):
    """The flow mapping of one top-level section as {key: value} strings."""
    m = re.search(rf"^{name}:\s*\{{(.*)\}}\s*(#.*)?$", path.read_text(), flags=re.M)
    assert m, f"{path.name} has no one-line {name}: section"
    return dict(re.match(r"\s*([\w.]+):\s*(.*?)\s*$", kv).groups() for kv in m.group(1).split(","))


class TwoSparkGraph(unittest.TestCase):
    def test_the_two_spark_pipeline_validates(self):
        rc, out = validate(SPARK)
        # Allowed here, and only these: a build without CUDA has no backend.cuda and no
        # transport.nccl, each a clear validate error naming the plugin.
        allowed = ["unknown plugin 'backend.cuda'", "unknown plugin 'transport.nccl'"]
        errors = [line for line in out.splitlines() if ": error: " in line]
        for e in errors:
            self.assertTrue(any(a in e for a in allowed), e)
        cuda_built = not any(allowed[0] in e for e in errors)
        nccl_built = not any(allowed[1] in e for e in errors)
        if errors:  # every other section validates with the CPU plugins in their place
            text = SPARK.read_text()
            if not cuda_built:
                text = re.sub(r"^backend:.*$", "backend:   { plugin: backend.cpu }", text, flags=re.M)
            if not nccl_built:
                text = re.sub(r"^transport:.*$", "transport: { plugin: transport.gloo }", text, flags=re.M)
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / SPARK.name
                copy.write_text(text.replace("model: tests/", f"model: {ROOT}/tests/"))
                rc, out = validate(copy)
        self.assertEqual(rc, 0, out)
        for plugin in ("weights.exl3", "scheduler.warm_bypass", "drafter.suffix"):
            self.assertIn(plugin, out)
        self.assertIn("backend.cuda" if cuda_built else "backend.cpu", out)
        self.assertIn("transport.nccl" if nccl_built else "transport.gloo", out)

    def test_the_seed_knobs_and_the_window(self):
        s = section(SPARK, "scheduler")
        self.assertEqual((s["page_tokens"], s["max_wait_ms"], s["late_cap"]), ("3584", "1500", "512"))
        self.assertEqual(section(SPARK, "engine")["max_model_len"], "1048576")
        self.assertEqual(section(SPARK, "topology")["ranks"], "2")

    def test_the_tiny_sibling_validates_and_has_the_same_graph(self):
        rc, out = validate(TINY)
        self.assertEqual(rc, 0, out)
        for name in ("scheduler", "drafter"):  # the transport differs: gloo for CPU ranks
            self.assertEqual(section(TINY, name)["plugin"], section(SPARK, name)["plugin"], name)
        self.assertEqual(section(SPARK, "transport")["plugin"], "transport.nccl")
        for knob in ("max_wait_ms", "late_cap"):
            self.assertEqual(section(TINY, "scheduler")[knob], section(SPARK, "scheduler")[knob], knob)
        self.assertEqual(section(TINY, "topology"), section(SPARK, "topology"))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
