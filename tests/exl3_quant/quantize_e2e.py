#!/usr/bin/env python3
"""`tandem quantize --to exl3` end to end on a tiny random llama (suite 'unit').

    quantize_e2e.py TANDEM SOURCE_ROOT

Builds the tiny GGUF with tools/fixtures/make_tiny_llama.py (vocabulary from the default
model when $TANDEM_TEST_MODEL exists, else a byte-level one), checks the CLI's errors,
quantizes with calibration (interrupting the first run after layer 0 to check the
resume), then decodes the result independently with tools/exl3/check_quantized.py.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

tandem, root = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="tandem_quant_")
gguf_path = os.path.join(tmp, "tiny.gguf")
cmd = [sys.executable, os.path.join(root, "tools/fixtures/make_tiny_llama.py"), gguf_path]
model = os.environ.get("TANDEM_TEST_MODEL", "")
if model and os.path.exists(model):
    cmd += ["--vocab-from", model]
subprocess.run(cmd, check=True)
calib = os.path.join(tmp, "calib.txt")
with open(calib, "w") as f:
    f.write(open(os.path.join(root, "README.md")).read()[:6000])

failures = []


def run(args, want_rc, want_text):
    p = subprocess.run([tandem, "quantize"] + args, capture_output=True, text=True, timeout=600)
    if p.returncode != want_rc or want_text not in p.stderr + p.stdout:
        failures.append(f"{args}: rc {p.returncode} (want {want_rc}), output lacks {want_text!r}:\n{p.stderr[-800:]}")
    return p


out = os.path.join(tmp, "out")
base = ["--to", "exl3", "--out", out]
run(base + ["--bits", "9", gguf_path], 2, "--bits must be 1..8")
run(base + ["--bits", "0", gguf_path], 2, "--bits must be 1..8")
run(base + ["--bits", "4", "--head-bits", "12", gguf_path], 2, "--head-bits")
run(base + ["--bits", "4", "--codebook", "xyz", gguf_path], 2, "unknown codebook")
run(["--to", "gguf", "--bits", "4", "--out", out, gguf_path], 2, "unknown target format")
run(["--to", "exl3", "--bits", "4", gguf_path], 2, "--out")
run(base + ["--bits", "4", "--calibration", os.path.join(tmp, "nope.txt"), gguf_path], 1, "not found")
run(base + ["--bits", "4", os.path.join(tmp, "missing.gguf")], 1, "error")
bad = os.path.join(tmp, "bad.gguf")
open(bad, "wb").write(b"this is not a gguf file at all" * 10)
run(base + ["--bits", "4", bad], 1, "error")

# Quantize; stop the first run once layer 0 is done, then resume.
args = [tandem, "quantize", "--to", "exl3", "--bits", "4", "--head-bits", "16", "--calibration", calib,
        "--rows", "4", "--cols", "128", "--out", out, "--no-progress", gguf_path]
t0 = time.time()
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
prog = os.path.join(out, "quantize_progress.json")
while p.poll() is None and not os.path.exists(prog):
    time.sleep(0.2)
p.kill()
p.wait()
if not os.path.exists(prog):
    failures.append("no progress file after the first layer")
r = subprocess.run(args, capture_output=True, text=True, timeout=900)
print(r.stdout)
print(f"quantize took {time.time() - t0:.1f} s in all")
if r.returncode != 0:
    failures.append("quantize failed: " + r.stderr[-2000:])
elif "resumed after 1 finished layers" not in r.stdout:
    failures.append("the rerun did not resume after layer 0")
run(base + ["--bits", "4", gguf_path], 1, "not empty")  # a finished directory is not overwritten

if r.returncode == 0:
    c = subprocess.run([sys.executable, os.path.join(root, "tools/exl3/check_quantized.py"), out, gguf_path,
                        "--max-rel-error", "0.012", "--json"], capture_output=True, text=True)
    print(c.stdout[-3000:], c.stderr[-3000:])
    if c.returncode != 0:
        failures.append("check_quantized.py failed")
    names = sorted(os.listdir(out))
    for want in ["config.json", "model.safetensors.index.json", "quantization_config.json", "tokenizer.json",
                 "tokenizer_config.json", "generation_config.json", "model-00003-of-00003.safetensors"]:
        if want not in names:
            failures.append("missing " + want)
    if "quantize_progress.json" in names:
        failures.append("progress file left behind")
    qc = json.load(open(os.path.join(out, "quantization_config.json")))
    st = qc["tensor_storage"].get("model.layers.1.mlp.down_proj", {})
    if st.get("bits_per_weight") != 4 or "model.layers.1.mlp.down_proj.mul1" not in st.get("stored_tensors", {}):
        failures.append("tensor_storage entry wrong: " + json.dumps(st)[:300])
    tj = json.load(open(os.path.join(out, "tokenizer.json")))
    if tj["model"]["type"] != "BPE" or len(tj["model"]["vocab"]) < 257:
        failures.append("tokenizer.json is not a BPE vocabulary")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
