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
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file
import gguf


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


def unpermute(w, n_head):
    # inverse of llama.cpp's permute: GGUF rows (adjacent pairs) -> HF rows (half split)
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("gguf")
    ap.add_argument("--max-rel-error", type=float, default=None)
    ap.add_argument("--json", action="store_true")
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
    if a.json:
        print(json.dumps({"modules": report, "failures": fails}, indent=1))
    else:
        for k, v in report.items():
            print(f"{k:40s} K={v['bits']} {v['codebook']:5s} rel_error {v['rel_error']:.6f}")
        for f in fails:
            print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
