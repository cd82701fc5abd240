#!/usr/bin/env python3
"""A GLM-5-family model quantized to EXL3 by `tandem quantize` and served again (suite 'e2e').

usage: glm_exl3_e2e.py TANDEM_EXE

The model: tests/fixtures/glm_moe_dsa/tiny (tools/fixtures/make_tiny_glm_moe_dsa.py, bf16) cut
by this script to its first 2 layers and 4 of its 8 experts -- a dense first layer, a MoE layer
with 4 routed experts in 2 groups + 1 shared expert, DSA indexers on both, MLA -- written as f32
with the routed experts fused the way transformers 5 holds them (experts.gate_up_proj
{E, 2F, H}, experts.down_proj {E, H, F}). The cut keeps CI fast: the tile coder's cost is per
16x16 tile whatever K, and every linear of the tiny model pads to 128 x 128 (64 tiles); the
whole fixture is ~5,000 tiles (about 100 CPU-seconds with AVX-512), this cut ~2,200.
It is quantized at K = 4, head at 6 bits (exllamav3's default), without calibration, then:
1. Layout, as exllamav3 writes glm-style MoE models: every routed expert its own EXL3 linear
   (mlp.experts.E.{gate,up,down}_proj.trellis, split from the fused source), shared experts,
   the dense MLP and the MLA / indexer projections EXL3; kv_b_proj, the router, weights_proj
   and the norms fp16; the correction bias f32; config.json with quantization_config; the
   tokenizer files.
2. Every EXL3 linear, decoded with numpy alone (tools/exl3/check_quantized.py's decoder,
   written from shared/research/exl3.md, not from tandem's code), is within the relative
   error a K-bit trellis code reaches of the source weight.
3. `tandem serve --model DIR` (pipelines/exl3.yaml: weights.exl3, backend.cpu) answers the
   OpenAI client; prompt log-probabilities (completions echo + logprobs, teacher forced,
   prompts longer than index_topk so the sparse path runs) are within a measured tolerance of
   the f32 source model's, served by weights.safetensors; chat and streaming work.
4. Bad input: --calibration and an unknown source tensor are clear errors (exit status 1).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

TANDEM = os.path.abspath(sys.argv[1])
ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools/exl3"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_quantized import decode_linear  # noqa: E402  (the independent numpy decoder)
from tandem_server import Server  # noqa: E402

FIXTURE = ROOT / "tests/fixtures/glm_moe_dsa/tiny"
TMP = tempfile.mkdtemp(prefix="tandem_glm_exl3_e2e_")
MODEL = Path(TMP) / "cut"  # made by cut_model()
TEXTS = [
    "The quick brown fox jumps over the lazy dog, again and again, until the dog wakes up.",
    "In 1905 Einstein published four papers that changed physics: light quanta, Brownian motion.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint(fib(10))",
]
BITS = 4
# Tolerances, from the measurement recorded in the commit that added this test (K = 4, head 6
# bits, no calibration), with margin.
REL_ERROR = 0.02        # ||W - W_src||² / ||W_src||² per layer linear; measured worst 0.0047
REL_ERROR_HEAD = 0.005  # the 6-bit head
DECODED_TOL = 1e-4      # max |Δ logprob|, EXL3 model vs its numpy-decoded weights served as f32; measured 1e-6
SOURCE_MEAN_TOL = 0.6   # mean |Δ logprob| against the source; measured 0.32 (random weights:
                        # routing and the DSA top-k flip on near-ties)


def tandem(*args, timeout=600):
    return subprocess.run([TANDEM, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def quantize(out, *extra, model=None):
    t0 = time.time()
    r = tandem("quantize", "--to", "exl3", "--bits", str(BITS), "--head-bits", "6", "--no-progress",
               "--out", str(out), *extra, str(model or MODEL))
    print(f"quantize K={BITS}: {time.time() - t0:.1f} s", flush=True)
    return r


def load_st(path):
    """A safetensors file as float64 arrays (BF16 included, which safetensors.numpy cannot read)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "I16": np.int16, "I32": np.int32}[v["dtype"]]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(v["shape"])
        if v["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[k] = arr
    return out


def cut_model():
    """The fixture's first 2 layers and experts 0..3, f32, routed experts fused (see the top)."""
    src = {}
    for f in sorted(FIXTURE.glob("*.safetensors")):
        src.update(load_st(f))
    cfg = json.loads((FIXTURE / "config.json").read_text())
    layers, experts = 2, 4
    cfg.update(num_hidden_layers=layers, n_routed_experts=experts, indexer_types=cfg["indexer_types"][:layers])
    out = {}
    for k, v in src.items():
        m = re.match(r"model\.layers\.(\d+)\.(.*)", k)
        if m and int(m.group(1)) >= layers:
            continue
        if m and ".mlp.experts." in k:
            continue  # fused below
        if k.endswith("mlp.gate.weight") or k.endswith("mlp.gate.e_score_correction_bias"):
            v = v[:experts]
        out[k] = np.ascontiguousarray(v, dtype=np.float32)
    for l in range(cfg["first_k_dense_replace"], layers):
        p = f"model.layers.{l}.mlp.experts."
        out[p + "gate_up_proj"] = np.stack([np.concatenate([src[p + f"{e}.gate_proj.weight"],
                                                            src[p + f"{e}.up_proj.weight"]]) for e in range(experts)])
        out[p + "down_proj"] = np.stack([src[p + f"{e}.down_proj.weight"] for e in range(experts)])
        out[p + "gate_up_proj"] = out[p + "gate_up_proj"].astype(np.float32)
        out[p + "down_proj"] = out[p + "down_proj"].astype(np.float32)
    MODEL.mkdir()
    save_file(out, str(MODEL / "model.safetensors"))
    (MODEL / "config.json").write_text(json.dumps(cfg, indent=1))
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(FIXTURE / f, MODEL / f)
    return cfg, out


def prompt_logprobs(server, text):
    """Teacher-forced log-probabilities of `text`'s tokens (completions echo, max_tokens 0)."""
    r = server.client.completions.create(model=server.model, prompt=text, max_tokens=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    return lp.tokens, lp.token_logprobs[1:], [max(d, key=d.get) for d in lp.top_logprobs[1:]]


class GlmExl3(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cfg, cls.source = cut_model()
        cls.q = Path(TMP) / "exl3"
        r = quantize(cls.q)
        assert r.returncode == 0, r.stdout + r.stderr
        cls.summary = r.stdout
        cls.quant = {}
        for f in sorted(cls.q.glob("*.safetensors")):
            cls.quant.update(load_file(str(f)))

    def test_1_layout_is_exllamav3s(self):
        t, cfg = self.quant, json.loads((self.q / "config.json").read_text())
        self.assertEqual(cfg["quantization_config"]["quant_method"], "exl3")
        self.assertEqual(cfg["model_type"], "glm_moe_dsa")
        for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors.index.json",
                  "quantization_config.json"):
            self.assertTrue((self.q / f).exists(), f)
        for l in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            for lin in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj", "indexer.wq_b", "indexer.wk"):
                self.assertIn(p + f"self_attn.{lin}.trellis", t)
            self.assertEqual(t[p + "self_attn.kv_b_proj.weight"].dtype, np.float16)
            self.assertEqual(t[p + "self_attn.indexer.weights_proj.weight"].dtype, np.float16)
            self.assertEqual(t[p + "input_layernorm.weight"].dtype, np.float16)
            if l < self.cfg["first_k_dense_replace"]:
                self.assertIn(p + "mlp.gate_proj.trellis", t)
                continue
            for e in range(self.cfg["n_routed_experts"]):
                for lin in ("gate_proj", "up_proj", "down_proj"):
                    self.assertIn(p + f"mlp.experts.{e}.{lin}.trellis", t)
                    self.assertIn(p + f"mlp.experts.{e}.{lin}.suh", t)
            self.assertFalse(any(".gate_up_proj" in k for k in t))
            self.assertIn(p + "mlp.shared_experts.down_proj.trellis", t)
            self.assertEqual(t[p + "mlp.gate.weight"].dtype, np.float16)
            self.assertEqual(t[p + "mlp.gate.e_score_correction_bias"].dtype, np.float32)
        self.assertIn("lm_head.trellis", t)
        self.assertIn("6-bit lm_head", self.summary)

    def source_weight(self, key):
        """The source's {out, in} weight of an EXL3 module key (experts from the fused tensors)."""
        m = re.match(r"(.*\.experts\.)(\d+)\.(gate|up|down)_proj$", key)
        if not m:
            return self.source[key + ".weight"]
        e, F = int(m.group(2)), self.cfg["moe_intermediate_size"]
        if m.group(3) == "down":
            return self.source[m.group(1) + "down_proj"][e]
        gu = self.source[m.group(1) + "gate_up_proj"][e]
        return gu[:F] if m.group(3) == "gate" else gu[F:]

    def test_2_decoded_weights_close_to_source(self):
        worst, n = 0.0, 0
        for key in sorted(k[:-len(".trellis")] for k in self.quant if k.endswith(".trellis")):
            w, K, _ = decode_linear(self.quant, key)
            src = self.source_weight(key).astype(np.float64).T  # [in][out]
            w = w[:src.shape[0], :src.shape[1]]
            rel = float(((w - src) ** 2).sum() / (src ** 2).sum())
            self.assertLess(rel, REL_ERROR_HEAD if key == "lm_head" else REL_ERROR, f"{key}: relative error {rel:.5f}")
            if key != "lm_head":
                worst = max(worst, rel)
            n += 1
        print(f"{n} EXL3 linears decoded with numpy; worst relative error (K={BITS}) {worst:.5f}", flush=True)
        self.assertEqual(n, 31)  # 9 in the dense layer, 21 in the MoE layer, the head

    def decoded_model(self):
        """The EXL3 directory with every trellis replaced by its numpy-decoded f32 weight (and the
        fp16 tensors as stored): what the EXL3 model must compute, as a plain directory."""
        d = Path(TMP) / "decoded"
        d.mkdir(exist_ok=True)
        out = {}
        for k, v in self.quant.items():
            if k.endswith(".trellis"):
                key = k[:-len(".trellis")]
                src = self.source_weight(key)
                w, _, _ = decode_linear(self.quant, key)
                out[key + ".weight"] = np.ascontiguousarray(w[:src.shape[1], :src.shape[0]].T, dtype=np.float32)
            elif not re.search(r"\.(suh|svh|mul1|mcg)$", k):
                out[k] = v.astype(np.float32)
        save_file(out, str(d / "model.safetensors"))
        cfg = json.loads((self.q / "config.json").read_text())
        del cfg["quantization_config"]
        (d / "config.json").write_text(json.dumps(cfg))
        for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(self.q / f, d / f)
        return d

    def test_3_served_logprobs(self):
        models = (("source", MODEL), ("exl3", self.q), ("decoded", self.decoded_model()))
        servers = {name: Server(TANDEM, d, ROOT) for name, d in models}
        try:
            res = {name: [prompt_logprobs(s, x) for x in TEXTS] for name, s in servers.items()}
            msgs = [{"role": "user", "content": "Count from one to ten, please."}]
            s = servers["exl3"]
            full = s.client.chat.completions.create(model=s.model, messages=msgs, max_tokens=10, temperature=0)
            self.assertEqual(full.usage.completion_tokens, 10)
            parts = s.client.chat.completions.create(model=s.model, messages=msgs, max_tokens=10, temperature=0,
                                                     stream=True)
            self.assertEqual("".join(c.choices[0].delta.content or "" for c in parts if c.choices),
                             full.choices[0].message.content)
        finally:
            for s in servers.values():
                self.assertEqual(s.close(), 0)

        def compare(a, b):
            diffs, agree, total = [], 0, 0
            for (toks, lp, top), (toks_b, lp_b, top_b) in zip(res[a], res[b]):
                self.assertEqual(toks, toks_b)
                self.assertGreater(len(toks), self.cfg["index_topk"])  # the sparse path
                diffs += [abs(x - y) for x, y in zip(lp, lp_b)]
                agree += sum(x == y for x, y in zip(top, top_b))
                total += len(top)
            mean, worst = float(np.mean(diffs)), float(np.max(diffs))
            print(f"{b} vs {a}: mean |dlogprob| {mean:.6f}, max {worst:.6f}, teacher-forced top-1 agreement "
                  f"{agree / total:.3f} over {total} positions", flush=True)
            return mean, worst

        # The EXL3 model computes what its decoded weights say (backend.cpu reconstructs W in
        # f32; the numpy decoder in float64): only rounding apart.
        _, worst = compare("decoded", "exl3")
        self.assertLess(worst, DECODED_TOL)
        # Against the source: the quantization noise of K = 4 without Hessians.
        mean, _ = compare("source", "exl3")
        self.assertLess(mean, SOURCE_MEAN_TOL)

    def test_4_bad_input_fails_clearly(self):
        calib = Path(TMP) / "calib.txt"
        calib.write_text("some text " * 50)
        r = quantize(Path(TMP) / "calib_out", "--calibration", str(calib))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("--calibration", r.stderr)

        odd = Path(TMP) / "odd_source"
        shutil.copytree(MODEL, odd)
        t = load_file(str(odd / "model.safetensors"))
        t["model.layers.1.mlp.mystery_proj.weight"] = np.zeros((4, 4), np.float32)
        save_file(t, str(odd / "model.safetensors"))
        r = quantize(Path(TMP) / "odd_out", model=odd)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("model.layers.1.mlp.mystery_proj.weight", r.stderr)

        # Broken EXL3 directories: config.json checked as weights.safetensors' path checks it,
        # a missing expert or an EXL3 kv_b_proj named.
        def broken(name, mutate, *expect):
            d = Path(TMP) / name
            shutil.copytree(self.q, d)
            mutate(d)
            r = tandem("run", "--model", str(d), "--prompt", "hi", "-n", "2")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            for e in expect:
                self.assertIn(e, r.stderr)

        def edit_config(d, f):
            cfg = json.loads((d / "config.json").read_text())
            f(cfg)
            (d / "config.json").write_text(json.dumps(cfg))

        def edit_tensors(d, f):
            for p in d.glob("*.safetensors"):
                t = load_file(str(p))
                if f(t):
                    save_file(t, str(p))
            idx = json.loads((d / "model.safetensors.index.json").read_text())
            idx["weight_map"] = {k: p.name for p in d.glob("*.safetensors") for k in load_file(str(p))}
            (d / "model.safetensors.index.json").write_text(json.dumps(idx))

        broken("unknown_key", lambda d: edit_config(d, lambda c: c.update(magic_new_attention=True)),
               "magic_new_attention", "config.json")
        broken("not_exl3", lambda d: edit_config(d, lambda c: c["quantization_config"].update(quant_method="gptq")),
               "quant_method")
        p = "model.layers.1.mlp.experts.3.down_proj."

        def drop_expert(t):
            hit = [k for k in t if k.startswith(p)]
            for k in hit:
                del t[k]
            return bool(hit)
        broken("missing_expert", lambda d: edit_tensors(d, drop_expert), p + "weight is missing")

        def kv_b_as_exl3(t):
            o = "model.layers.0.self_attn.o_proj."
            if o + "trellis" not in t:
                return False
            kv = "model.layers.0.self_attn.kv_b_proj."
            del t[kv + "weight"]
            for k in [k for k in t if k.startswith(o)]:
                t[kv + k[len(o):]] = t[k]
            return True
        broken("kv_b_exl3", lambda d: edit_tensors(d, kv_b_as_exl3), "kv_b_proj.weight", "unquantized")


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
