#!/usr/bin/env python3
"""Independent check of an EXL3 directory written by `tandem quantize`, against its source GGUF.

    python tools/exl3/check_quantized.py OUT_DIR SOURCE.gguf [--max-rel-error X] [--json]

Decodes every quantized linear from the stored tensors alone, following
shared/research/exl3.md (§2.1 layout, §3.2 bit stream and tile placement, §3.3 codebooks,
§4 W = diag(suh)·Hb·Ŵ·Hb·diag(svh)), written from the spec with numpy only, and reports
the relative reconstruction error ||W - W_gguf||² / ||W_gguf||² per module (q/k rows
un-permuted from llama.cpp's order). Also checks the unquantized tensors, the shard index
and the config's quantization_config. Exit status 1 when a check fails or an error exceeds
--max-rel-error. Needs numpy, safetensors and gguf (tools/requirements-exl3.txt).

    ... --compare-run RUN.json [--logprob-tol 2e-3]

also runs a float64 numpy llama forward (Hugging Face convention: rotate-half RoPE on the
stored, un-permuted q/k; hyperparameters from config.json) on the decoded weights over the
prompt and generated tokens of a `tandem run --logprobs-out RUN.json` file, teacher forced,
and checks every generated token against it: tandem's full log-softmax row within
--logprob-tol (max abs difference over the 64 most likely tokens), and the token tandem
picked greedily is numpy's argmax (or within the tolerance of it: a near tie).
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def codebook_values(cb, states):
    s = states.astype(np.uint64)
    if cb == "mul1":
        x = (s * 0x83DCD12D) & 0xFFFFFFFF
        bs = (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24)
        k_inv = float(np.array([0x1EEE], np.uint16).view(np.float16)[0])
        k_bias = float(np.array([0xC931], np.uint16).view(np.float16)[0])
        return ((1024.0 + bs.astype(np.float64)) * k_inv + k_bias).astype(np.float16)
    x = (s * 89226354 + 64248484) if cb == "3inst" else (s * 0xCBAC1FED)
    x = ((x & 0xFFFFFFFF) & 0x8FFF8FFF) ^ 0x3B603B60
    lo = (x & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
    hi = (x >> 16).astype(np.uint16).view(np.float16).astype(np.float32)
    return (lo + hi).astype(np.float16)


def tile_states(trellis):
    """trellis int16 [tk, tn, 16K] -> states uint32 [tk, tn, 256] (position order)."""
    tk, tn, w16 = trellis.shape
    K = w16 // 16
    u = trellis.view(np.uint16).astype(np.uint32).reshape(tk, tn, 8 * K, 2)
    words = u[..., 0] | (u[..., 1] << 16)                      # Wd[m], MSB-first stream
    bits = ((words[..., None] >> np.arange(31, -1, -1, dtype=np.uint32)) & 1).reshape(tk, tn, 256 * K)
    L = 256 * K
    p = np.arange(256)
    idx = ((p[:, None] + 1) * K - 16 + np.arange(16)[None, :]) % L  # the 16 ring bits of s_p
    window = bits[..., idx]                                          # [tk, tn, 256, 16]
    return (window * (1 << np.arange(15, -1, -1, dtype=np.uint32))).sum(-1).astype(np.uint32)


def position_rc():
    p = np.arange(256)
    lane, j = p >> 3, p & 7
    r = 2 * (lane & 3) + np.array([0, 1, 8, 9])[j & 3]
    c = (lane >> 2) + 8 * (j >> 2)
    return r, c


def hadamard128():
    h = np.array([[1.0]])
    while h.shape[0] < 128:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(128.0)


def decode_linear(t, key):
    trellis = t[key + ".trellis"]
    cb = "mul1" if key + ".mul1" in t else "mcg" if key + ".mcg" in t else "3inst"
    tk, tn, _ = trellis.shape
    vals = codebook_values(cb, tile_states(trellis)).astype(np.float64)  # [tk, tn, 256]
    r, c = position_rc()
    what = np.zeros((tk * 16, tn * 16))
    tiles = np.zeros((tk, tn, 16, 16))
    tiles[:, :, r, c] = vals
    what[:] = tiles.transpose(0, 2, 1, 3).reshape(tk * 16, tn * 16)
    H = hadamard128()
    k, n = what.shape
    w = (H @ what.reshape(k // 128, 128, n)).reshape(k, n)                 # Hb_k · Ŵ
    w = (w.reshape(k, n // 128, 128) @ H).reshape(k, n)                    # · Hb_n
    suh = t[key + ".suh"].astype(np.float64)
    svh = t[key + ".svh"].astype(np.float64)
    return suh[:, None] * w * svh[None, :], trellis.shape[-1] // 16, cb


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rope_hf(x, pos, theta):
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def quantized_model(t, cfg):
    """The dequantized model as float64 arrays, y = x @ W with W [in, out]."""
    d, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or d // nh
    shapes = {"self_attn.q_proj": (d, nh * hd), "self_attn.k_proj": (d, nkv * hd),
              "self_attn.v_proj": (d, nkv * hd), "self_attn.o_proj": (nh * hd, d),
              "mlp.gate_proj": (d, ffn), "mlp.up_proj": (d, ffn), "mlp.down_proj": (ffn, d)}
    m = {"emb": t["model.embed_tokens.weight"].astype(np.float64),
         "norm": t["model.norm.weight"].astype(np.float64), "layers": []}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        layer = {"attn_norm": t[p + "input_layernorm.weight"].astype(np.float64),
                 "ffn_norm": t[p + "post_attention_layernorm.weight"].astype(np.float64)}
        for mod, (i, o) in shapes.items():
            layer[mod] = decode_linear(t, p + mod)[0][:i, :o]
        m["layers"].append(layer)
    vocab = m["emb"].shape[0]
    if "lm_head.trellis" in t:
        m["head"] = decode_linear(t, "lm_head")[0][:d, :vocab]
    elif "lm_head.weight" in t:
        m["head"] = t["lm_head.weight"].astype(np.float64).T
    else:  # tied
        m["head"] = m["emb"].T
    return m


def forward(m, cfg, ids):
    """Logits [T, vocab] of a causal float64 forward over ids."""
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or d // nh
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = m["emb"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for L in m["layers"]:
        h = rms_norm(x, L["attn_norm"], eps)
        q = rope_hf((h @ L["self_attn.q_proj"]).reshape(T, nh, hd), pos, theta)
        k = rope_hf((h @ L["self_attn.k_proj"]).reshape(T, nkv, hd), pos, theta)
        v = (h @ L["self_attn.v_proj"]).reshape(T, nkv, hd)
        out = np.zeros_like(q)
        for head in range(nh):
            kv = head // (nh // nkv)
            sc = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
            pr = np.exp(sc - sc.max(-1, keepdims=True))
            out[:, head] = (pr / pr.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, -1) @ L["self_attn.o_proj"]
        h = rms_norm(x, L["ffn_norm"], eps)
        g, u = h @ L["mlp.gate_proj"], h @ L["mlp.up_proj"]
        x = x + (g / (1 + np.exp(-g)) * u) @ L["mlp.down_proj"]
    return rms_norm(x, m["norm"], eps) @ m["head"]


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def compare_run(t, cfg, run_path, tol):
    """Checks a `tandem run --logprobs-out` file against the numpy forward; returns (report, failures)."""
    run = json.load(open(run_path))
    prompt, toks = run["prompt"], run["tokens"]
    fails = []
    if not toks:
        return {}, ["the run generated no tokens"]
    lp_ref = log_softmax(forward(quantized_model(t, cfg), cfg, prompt + toks[:-1]))[len(prompt) - 1:]
    worst, argmax_ok = 0.0, 0
    for i, tok in enumerate(toks):
        got = np.array([-np.inf if v is None else v for v in run["logprobs"][i]], dtype=np.float64)
        ref = lp_ref[i]
        if got.shape != ref.shape:
            fails.append(f"step {i}: tandem's row has {got.shape[0]} entries, the model's vocab {ref.shape[0]}")
            continue
        top = np.argsort(-ref)[:64]
        diff = float(np.abs(got[top] - ref[top]).max())
        worst = max(worst, diff)
        if diff > tol:
            fails.append(f"step {i}: log-probabilities differ by {diff:.3g} > {tol}")
        best = int(np.argmax(ref))
        if tok == best:
            argmax_ok += 1
        elif ref[best] - ref[tok] > tol:
            fails.append(f"step {i}: tandem chose {tok} (numpy log-prob {ref[tok]:.5f}), numpy's argmax is "
                         f"{best} ({ref[best]:.5f})")
    return {"steps": len(toks), "argmax_equal": argmax_ok, "max_logprob_diff": worst}, fails


def unpermute(w, n_head):
    # inverse of llama.cpp's permute: GGUF rows (adjacent pairs) -> HF rows (half split)
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("gguf")
    ap.add_argument("--max-rel-error", type=float, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare-run", metavar="RUN_JSON",
                    help="a `tandem run --logprobs-out` file to check against a numpy forward")
    ap.add_argument("--logprob-tol", type=float, default=2e-3)
    a = ap.parse_args()
    fails = []
    index = json.load(open(os.path.join(a.out_dir, "model.safetensors.index.json")))
    t = {}
    for shard in sorted(set(index["weight_map"].values())):
        t.update(load_file(os.path.join(a.out_dir, shard)))
    if set(t) != set(index["weight_map"]):
        fails.append("index weight_map does not match the shards' tensors")
    cfg = json.load(open(os.path.join(a.out_dir, "config.json")))
    qc = cfg.get("quantization_config", {})
    for k in ["quant_method", "version", "bits", "head_bits", "calibration", "out_scales", "codebook"]:
        if k not in qc:
            fails.append("config.json quantization_config lacks " + k)
    if qc.get("quant_method") != "exl3":
        fails.append("quant_method is not exl3")
    for f in ["quantization_config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        if not os.path.exists(os.path.join(a.out_dir, f)):
            fails.append("missing " + f)

    import gguf  # only the comparison with the source needs it (the decoders do not)
    r = gguf.GGUFReader(a.gguf)
    src = {x.name: x for x in r.tensors}

    def src_weight(name):
        x = src[name]
        return np.array(x.data, dtype=np.float64).reshape([int(d) for d in reversed(x.shape)])

    nh = int(r.fields["llama.attention.head_count"].parts[-1][0])
    nkv = int(r.fields["llama.attention.head_count_kv"].parts[-1][0])
    L = int(r.fields["llama.block_count"].parts[-1][0])
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    report = {}
    pairs = [(f"model.layers.{l}.{hf}", f"blk.{l}.{gg}.weight", hf) for l in range(L) for hf, gg in names.items()]
    if "lm_head.trellis" in t:
        pairs.append(("lm_head", "output.weight" if "output.weight" in src else "token_embd.weight", "lm_head"))
    for key, gname, kind in pairs:
        if key + ".trellis" not in t:
            fails.append("missing " + key + ".trellis")
            continue
        w, K, cb = decode_linear(t, key)
        ref = src_weight(gname)
        if kind == "self_attn.q_proj":
            ref = unpermute(ref, nh)
        elif kind == "self_attn.k_proj":
            ref = unpermute(ref, nkv)
        ref = ref.T  # [in, out]
        got = w[: ref.shape[0], : ref.shape[1]]
        rel = float(((got - ref) ** 2).sum() / (ref ** 2).sum())
        report[key] = {"bits": K, "codebook": cb, "rel_error": rel}
        if a.max_rel_error is not None and rel > a.max_rel_error:
            fails.append(f"{key}: relative error {rel:.5f} > {a.max_rel_error}")
    plain = [("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight")]
    plain += [(f"model.layers.{l}.input_layernorm.weight", f"blk.{l}.attn_norm.weight") for l in range(L)]
    plain += [(f"model.layers.{l}.post_attention_layernorm.weight", f"blk.{l}.ffn_norm.weight") for l in range(L)]
    if "lm_head.weight" in t:
        plain.append(("lm_head.weight", "output.weight"))
    for hf, gg in plain:
        if hf not in t:
            fails.append("missing " + hf)
        elif not np.array_equal(t[hf], src_weight(gg).astype(np.float16)):
            fails.append(hf + " differs from fp16(" + gg + ")")
    run_report = None
    if a.compare_run:
        run_report, run_fails = compare_run(t, cfg, a.compare_run, a.logprob_tol)
        fails += run_fails
    if a.json:
        print(json.dumps({"modules": report, "run": run_report, "failures": fails}, indent=1))
    else:
        for k, v in report.items():
            print(f"{k:40s} K={v['bits']} {v['codebook']:5s} rel_error {v['rel_error']:.6f}")
        if run_report is not None:
            print("tandem run vs numpy forward:", json.dumps(run_report))
        for f in fails:
            print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
