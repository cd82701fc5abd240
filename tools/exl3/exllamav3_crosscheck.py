#!/usr/bin/env python3
"""Cross-load check: exllamav3's own kernels on an EXL3 directory written by `tandem quantize`.

    python tools/exl3/exllamav3_crosscheck.py DIR [DIR ...] [--rows 1,8] [--json OUT] [--no-build]
        [--max-rel 1e-2] [--seed N]

For every quantized linear (a `{key}.trellis` with `{key}.suh` / `{key}.svh`, codebook from the
`{key}.mcg` / `{key}.mul1` markers, K from the trellis shape) it runs, with the exllamav3 extension
subset (tools/exl3/exllamav3_ext_subset.py; --no-build imports only parts that already built):

  reconstruct  ext.reconstruct -> rotated Ŵ (fp16), against the spec decoder of
               tools/exl3/check_quantized.py (numpy; bit stream, tile placement, codebooks):
               the fp16 bits must be identical ("w_hat_mismatches" = 0);
  orig         ext.reconstruct_had_slice -> W = diag(suh)·H·Ŵ·H·diag(svh) in fp16 (exllamav3's
               prefill weight), against the float64 numpy W: relative RMS error <= --max-rel;
  gemm         the EXL3 GEMM kernel on R random fp16 rows x (each of --rows), fp16 out, against
               float64 x @ W: relative RMS error <= --max-rel.

Prints one line per tensor (max |diff| and relative errors) and a summary; exit status 1 when any
tensor mismatches or fails, 2 when nothing could be checked. A whole forward with exllamav3's Python
modules is not attempted: they need the full extension (attention, norms, RoPE, BC_* classes).
"""
import argparse
import glob
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from exllamav3_ext_subset import load_part  # noqa: E402


def spec_decoder():
    """tools/exl3/check_quantized.py's numpy decoder (bit stream, tile placement, codebooks)."""
    return importlib.import_module("check_quantized")


def load_dir(d):
    t = {}
    files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no .safetensors in {d}")
    for f in files:
        t.update(load_file(f))
    return t


def w_hat_numpy(cq, trellis, cb):
    """Ŵ [k, n] fp16 from the spec: states, codebook, tile placement."""
    tk, tn, _ = trellis.shape
    vals = cq.codebook_values(cb, cq.tile_states(trellis))           # fp16 [tk, tn, 256]
    r, c = cq.position_rc()
    tiles = np.zeros((tk, tn, 16, 16), dtype=np.float16)
    tiles[:, :, r, c] = vals
    return tiles.transpose(0, 2, 1, 3).reshape(tk * 16, tn * 16)


def hb(x, axis):
    """Block Hadamard (128) along axis 0 or 1, float64."""
    h = np.array([[1.0]])
    while h.shape[0] < 128:
        h = np.block([[h, h], [h, -h]])
    h /= np.sqrt(128.0)
    k, n = x.shape
    if axis == 0:
        return (h @ x.reshape(k // 128, 128, n)).reshape(k, n)
    return (x.reshape(k, n // 128, 128) @ h).reshape(k, n)


def rel(a, b):
    d = a.astype(np.float64) - b.astype(np.float64)
    den = np.sqrt(np.mean(b.astype(np.float64) ** 2))
    return float(np.sqrt(np.mean(d * d)) / den) if den > 0 else float(np.sqrt(np.mean(d * d))), float(np.abs(d).max())


def check_tensor(ext, cq, t, key, rows_list, rng, max_rel):
    trellis = t[key + ".trellis"]
    suh = t[key + ".suh"].astype(np.float16)
    svh = t[key + ".svh"].astype(np.float16)
    cb = "mul1" if key + ".mul1" in t else "mcg" if key + ".mcg" in t else "3inst"
    mcg, mul1 = cb == "mcg", cb == "mul1"
    tk, tn, w16 = trellis.shape
    K = w16 // 16
    k, n = tk * 16, tn * 16
    res = {"key": key, "K": K, "codebook": cb, "k": k, "n": n, "ok": True, "errors": []}
    dev = torch.device("cuda")
    tr = torch.from_numpy(np.ascontiguousarray(trellis)).to(dev)
    suh_t = torch.from_numpy(suh).to(dev)
    svh_t = torch.from_numpy(svh).to(dev)

    wh_ref = w_hat_numpy(cq, trellis, cb)
    W_ref = suh.astype(np.float64)[:, None] * hb(hb(wh_ref.astype(np.float64), 0), 1) * svh.astype(np.float64)[None, :]

    if "core" in ext:
        w = torch.empty((k, n), dtype=torch.half, device=dev)
        ext["core"].reconstruct(w, tr, float(K), mcg, mul1)
        wh = w.cpu().numpy()
        mism = int(np.count_nonzero(wh.view(np.uint16) != wh_ref.view(np.uint16)))
        res["w_hat_mismatches"] = mism
        res["w_hat_max_abs"] = float(np.abs(wh.astype(np.float64) - wh_ref.astype(np.float64)).max())
        if mism:
            res["ok"] = False
            res["errors"].append(f"reconstruct differs from the spec decode in {mism} of {k * n} values")
        if k % 128 == 0 and n % 128 == 0:
            wo = torch.empty((k, n), dtype=torch.half, device=dev)
            ext["core"].reconstruct_had_slice(wo, tr, suh_t, svh_t, float(K), mcg, mul1, 0)
            r_rel, r_max = rel(wo.cpu().numpy(), W_ref)
            res["orig_rel_rms"], res["orig_max_abs"] = r_rel, r_max
            res["orig_max_abs_W"] = float(np.abs(W_ref).max())
            if not r_rel <= max_rel:
                res["ok"] = False
                res["errors"].append(f"reconstruct_had_slice relative error {r_rel:.3e} > {max_rel}")
    if "gemm" in ext:
        for rows in rows_list:
            x = rng.standard_normal((rows, k)).astype(np.float16)
            xd = torch.from_numpy(x).to(dev)
            y = torch.empty((rows, n), dtype=torch.half, device=dev)
            a_had = torch.empty_like(xd)
            shape = ext["gemm"].exl3_gemm(xd, tr, y, suh_t, a_had, svh_t, mcg, mul1, 0, 0)
            ref = x.astype(np.float64) @ W_ref
            g_rel, g_max = rel(y.cpu().numpy(), ref)
            res[f"gemm{rows}"] = {"shape_idx": int(shape), "rel_rms": g_rel, "max_abs": g_max,
                                  "max_abs_y": float(np.abs(ref).max())}
            if not g_rel <= max_rel:
                res["ok"] = False
                res["errors"].append(f"exl3_gemm ({rows} rows) relative error {g_rel:.3e} > {max_rel}")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--max-rel", type=float, default=1e-2,
                    help="relative RMS error allowed for the fp16 paths (a wrong decode is O(1))")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", default=None, help="write the per-tensor results here")
    ap.add_argument("--no-build", action="store_true", help="only import extension parts that already built")
    args = ap.parse_args()
    ext = {}
    for part in ("core", "gemm"):
        try:
            ext[part] = load_part(part, build=not args.no_build)
        except Exception as e:  # noqa: BLE001
            print(f"part {part}: unavailable: {e}", flush=True)
    if not ext:
        print("no exllamav3 extension part available: nothing checked")
        return 2
    cq = spec_decoder()
    rows_list = [int(r) for r in args.rows.split(",") if r]
    rng = np.random.default_rng(args.seed)
    results, bad, checked = [], 0, 0
    for d in args.dirs:
        try:
            t = load_dir(d)
        except Exception as e:  # noqa: BLE001
            print(f"{d}: cannot read: {e}")
            bad += 1
            continue
        keys = sorted(k[: -len(".trellis")] for k in t if k.endswith(".trellis"))
        print(f"{d}: {len(keys)} quantized linears; parts: {', '.join(ext)}", flush=True)
        for key in keys:
            t0 = time.time()
            try:
                r = check_tensor(ext, cq, t, key, rows_list, rng, args.max_rel)
            except Exception as e:  # noqa: BLE001
                r = {"key": key, "ok": False, "errors": [f"{type(e).__name__}: {e}"], "traceback": traceback.format_exc()}
            r["dir"] = d
            r["seconds"] = round(time.time() - t0, 3)
            results.append(r)
            checked += 1
            bad += 0 if r["ok"] else 1
            parts = [f"K={r.get('K')} {r.get('codebook')} {r.get('k')}x{r.get('n')}"]
            if "w_hat_mismatches" in r:
                parts.append(f"w_hat mismatches {r['w_hat_mismatches']} (max|d| {r['w_hat_max_abs']:.3g})")
            if "orig_rel_rms" in r:
                parts.append(f"W rel {r['orig_rel_rms']:.2e} max|d| {r['orig_max_abs']:.3g}")
            for rows in rows_list:
                g = r.get(f"gemm{rows}")
                if g:
                    parts.append(f"gemm{rows} rel {g['rel_rms']:.2e} max|d| {g['max_abs']:.3g} (shape {g['shape_idx']})")
            print(f"  {'ok  ' if r['ok'] else 'FAIL'} {key}: " + "; ".join(parts)
                  + ("" if r["ok"] else "  <- " + " | ".join(r["errors"])), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "bad": bad, "checked": checked,
                                               "torch": torch.__version__}, indent=1) + "\n")
    print(f"crosscheck: {checked} tensors checked, {bad} mismatched or failed", flush=True)
    if not checked:
        return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
