#!/usr/bin/env python3
"""Reference fixtures from exllamav3 itself (PyPI 1.6.5) for tests/exl3/test_exl3_exllamav3_fixtures.cpp.

    python tools/exl3/make_exllamav3_fixtures.py [--out DIR] [--seed N] [--viterbi-tiles T] [--no-build]

Needs a CUDA GPU, torch, numpy, safetensors and the exllamav3 extension subset
(tools/exl3/exllamav3_ext_subset.py; --no-build imports only parts that already built). Writes
DIR/exllamav3_fixtures.safetensors and DIR/manifest.json (default DIR: tests/fixtures/exl3/exllamav3).

For each codebook (3inst, mcg, mul1: quantize_tiles' / reconstruct's flags mcg and mul1, neither =
3INST) and K = 1..8, one 128x128 layer (case prefix "K{K}.{cb}."):

  1. a deterministic random weight regularized as exllamav3's quantizer does without a Hessian
     (regularize(): sv = sign * column RMS, W / sv, W·Hb; su = sign * row RMS / -1.24371088, W / su,
     Hb·W; a global scale: 1 for 3INST/MCG, 1/1.24371088 for MUL1, whose codebook RMS is 1), cut
     into 16x16 tiles as ldlq()/fallback_quant() do (16-row bands, then tensor_core_perm: trellis
     position order) and rounded to fp16 (the kernel's first step, so storing fp16 loses nothing);
  2. exllamav3's Viterbi, ext.quantize_tiles, over all 64 tiles in one call (scratch buffers as
     get_temp_buffers() allocates them), and ext.pack_trellis of its indices;
  3. ext.reconstruct of that trellis (rotated Ŵ, fp16);
  4. the EXL3 GEMM (exllamav3's exl3_gemm_kernel through our launcher, fp16 output) of 8 random
     fp16 rows x and of the first row alone, with suh = fp16(su), svh = fp16(sv): y = x·W in the
     original basis, W = diag(suh)·H·Ŵ·H·diag(svh).

Tensors per case: tiles_in F16 [T,256] (the first T tiles, in trellis order [tk][tn], position
order within a tile, as quantize_tiles saw them), trellis I16 [8,8,16K], w_hat F16 [128,128],
suh F16 [128], svh F16 [128], x F16 [8,128], y8 F16 [8,128], y1 F16 [1,128]. A case whose step
fails keeps the tensors made so far, and manifest.json (also in the safetensors metadata under
"manifest") says what failed. Without the quant part the trellis is random words (no tiles_in);
without the gemm part there are no y1/y8. Exit status 1 when any case is incomplete.
The script also checks exllamav3 against itself (unpack_trellis(pack) == indices, reconstruct ==
the Viterbi's own output values, decode(indices) == those values) and records the results.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from exllamav3_ext_subset import load_part, ext_src_dir  # noqa: E402

CODEBOOKS = {"3inst": (False, False), "mcg": (True, False), "mul1": (False, True)}
CODEBOOK_SCALE = 1.24371088  # exllamav3 quantize.py: the 3INST codebook's RMS
SIZE_K = SIZE_N = 128
ROWS = 8


def tensor_core_perm():
    """exllamav3 quantize.py::tensor_core_perm: perm[p] = r*16 + c of trellis position p."""
    perm = [0] * 256
    for t in range(32):
        r0 = (t % 4) * 2
        c0 = t // 4
        for j, (r, c) in enumerate([(r0, c0), (r0 + 1, c0), (r0 + 8, c0), (r0 + 9, c0),
                                    (r0, c0 + 8), (r0 + 1, c0 + 8), (r0 + 8, c0 + 8), (r0 + 9, c0 + 8)]):
            perm[t * 8 + j] = r * 16 + c
    return torch.tensor(perm, dtype=torch.long)


def hadamard128():
    h = torch.ones((1, 1), dtype=torch.float64)
    while h.shape[0] < 128:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / np.sqrt(128.0)


def regularized_weight(cb, seed, k=SIZE_K, n=SIZE_N):
    """(W, su, sv): W as exllamav3's regularize() hands it to the tile quantizer (no Hessian)."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(k, n, generator=g, dtype=torch.float64)
    W = W * torch.exp(0.5 * torch.randn(k, 1, generator=g, dtype=torch.float64))   # uneven rows
    W = W * torch.exp(0.25 * torch.randn(1, n, generator=g, dtype=torch.float64))  # and columns
    H = hadamard128()
    su = torch.sign(torch.randn(k, generator=g, dtype=torch.float64))
    sv = torch.sign(torch.randn(n, generator=g, dtype=torch.float64))
    su[su == 0] = 1.0
    sv[sv == 0] = 1.0
    oc = W.square().mean(0).sqrt()
    oc = oc / oc.mean()
    sv = sv * oc                                            # out_scales "always"
    W = W / sv[None, :]
    W = (W.view(k, n // 128, 128) @ H).view(k, n)           # W·Hb_n
    ic = W.square().mean(1).sqrt()
    ic[ic == 0] = 0.1
    su = su * ic / -CODEBOOK_SCALE
    W = W / su[:, None]                                     # rows at the 3INST codebook RMS
    W = (H @ W.view(k // 128, 128, n)).view(k, n)           # Hb_k·W
    gs = 1.0 / CODEBOOK_SCALE if cb == "mul1" else 1.0
    W = W * gs
    su = su / gs
    return W, su, sv


def tiles_of(W):
    """[tk*tn, 256] in [tk][tn] order, trellis position order within each tile."""
    k, n = W.shape
    t = W.view(k // 16, 16, n // 16, 16).permute(0, 2, 1, 3).reshape(k // 16 * (n // 16), 256)
    return t[:, tensor_core_perm()].contiguous()


def untile(t, k, n):
    """Inverse of tiles_of."""
    inv = torch.argsort(tensor_core_perm())
    t = t[:, inv]
    return t.view(k // 16, n // 16, 16, 16).permute(0, 2, 1, 3).reshape(k, n)


def temp_buffers(ext_q, device, K, mcg, mul1, num_tiles):
    """quantize.py::get_temp_buffers, batch = num_tiles for the generic kernel."""
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else 0)
    optimized, wave = ext_q.quantize_tiles_scratch(index, K, mcg, mul1, 256)
    if optimized:
        cols = (65536 >> K) // (8 if K == 1 else 1)
        return (torch.empty((1,), dtype=torch.half, device=device),
                torch.empty((wave, 256, cols), dtype=torch.uint8, device=device)), True
    return (torch.zeros((num_tiles, 2, 65536 >> K), dtype=torch.half, device=device),
            torch.zeros((num_tiles, 256, 65536 >> K), dtype=torch.short, device=device)), False


def original_weight(w_hat, suh, svh):
    """float64 W = diag(suh)·Hb·Ŵ·Hb·diag(svh)."""
    H = hadamard128()
    k, n = w_hat.shape
    w = w_hat.double().cpu()
    w = (H @ w.view(k // 128, 128, n)).view(k, n)
    w = (w.view(k, n // 128, 128) @ H).view(k, n)
    return suh.double().cpu()[:, None] * w * svh.double().cpu()[None, :]


def version_info():
    info = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "argv": [sys.executable] + sys.argv, "cwd": os.getcwd(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = "%d.%d" % torch.cuda.get_device_capability()
    except Exception as e:  # noqa: BLE001
        info["device"] = f"? ({e})"
    try:
        v = (ext_src_dir().parent / "VERSION")
        info["exllamav3"] = v.read_text().strip() if v.is_file() else "exllamav3 1.6.5 (no VERSION file)"
    except Exception as e:  # noqa: BLE001
        info["exllamav3"] = f"? ({e})"
    for key, cmd in (("nvcc", ["nvcc", "--version"]), ("git", ["git", "-C", str(ROOT), "rev-parse", "HEAD"])):
        try:
            info[key] = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[-1]
        except Exception as e:  # noqa: BLE001
            info[key] = f"? ({e})"
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "exl3" / "exllamav3"))
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--viterbi-tiles", type=int, default=16, help="input tiles stored per case (of 64)")
    ap.add_argument("--bits", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--codebooks", default="3inst,mcg,mul1")
    ap.add_argument("--no-build", action="store_true", help="only import extension parts that already built")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # dry runs with a mock extension
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.pop("EXL3_QT_OPTIMIZED", None)  # the kernel choice exllamav3 makes by itself

    manifest = {"format": "tandem exllamav3 fixtures v1", "versions": version_info(), "seed": args.seed,
                "size_k": SIZE_K, "size_n": SIZE_N, "rows": ROWS, "viterbi_tiles": args.viterbi_tiles,
                "layout": {
                    "tiles_in": "F16 [T,256]: quantize_tiles input, tiles in [tk][tn] order, trellis position order",
                    "trellis": "I16 [k/16,n/16,16K]: ext.pack_trellis of quantize_tiles' indices",
                    "w_hat": "F16 [k,n]: ext.reconstruct(trellis), rotated basis",
                    "suh": "F16 [k]", "svh": "F16 [n]", "x": "F16 [8,k]",
                    "y8": "F16 [8,n]: exl3_gemm_kernel(x), fp16 out, both Hadamards and scales",
                    "y1": "F16 [1,n]: exl3_gemm_kernel(x[:1])"},
                "parts": {}, "cases": {}}
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ext = {}
    for part in ("core", "quant", "gemm"):
        try:
            ext[part] = load_part(part, build=not args.no_build)
            manifest["parts"][part] = "ok"
        except Exception as e:  # noqa: BLE001
            manifest["parts"][part] = f"unavailable: {type(e).__name__}: {e}"
            print(f"part {part}: unavailable: {e}", flush=True)
    tensors = {}
    incomplete = 0
    if "core" not in ext:
        print("the core part (pack/reconstruct) is needed; no fixtures", flush=True)
        incomplete = 1
    bits = [int(b) for b in args.bits.split(",")]
    cbs = [c.strip() for c in args.codebooks.split(",")]
    for cbi, cb in enumerate(cbs if "core" in ext else []):
        mcg, mul1 = CODEBOOKS[cb]
        for K in bits:
            name = f"K{K}.{cb}"
            p = name + "."
            info = {"K": K, "codebook": cb, "steps": {}}
            manifest["cases"][name] = info
            t_case = time.time()
            seed = args.seed + 1000 * cbi + K
            step = "weight"
            try:
                W, su, sv = regularized_weight(cb, seed)
                tiles = tiles_of(W).half()                       # what the kernel sees
                num_tiles = tiles.shape[0]
                tk, tn = SIZE_K // 16, SIZE_N // 16
                suh, svh = su.half(), sv.half()
                tensors[p + "suh"] = suh.contiguous()
                tensors[p + "svh"] = svh.contiguous()
                info["steps"][step] = "ok"

                step = "quantize_tiles"
                if "quant" in ext:
                    t_in = tiles.float().to(device).contiguous()
                    q_tiles = torch.zeros_like(t_in)
                    q_idx = torch.zeros_like(t_in, dtype=torch.short)
                    (temp_costs, temp_edges), optimized = temp_buffers(ext["quant"], device, K, mcg, mul1, num_tiles)
                    t0 = time.time()
                    ext["quant"].quantize_tiles(t_in, q_tiles, q_idx, temp_costs, temp_edges, K, mcg, mul1)
                    sync()
                    info["quantize_tiles_s"] = round(time.time() - t0, 4)
                    info["quantize_tiles_kernel"] = "optimized" if optimized else "generic"
                    del temp_costs, temp_edges
                    err = (q_tiles.double() - t_in.double()).square()
                    info["viterbi_mse_all"] = err.mean().item()
                    info["viterbi_mse_stored"] = err[: args.viterbi_tiles].mean().item()
                    tensors[p + "tiles_in"] = tiles[: args.viterbi_tiles].clone()
                    dec = torch.empty(q_idx.shape, dtype=torch.half, device=device)
                    ext["quant"].decode(q_idx, dec, mcg, mul1)
                    info["self_decode_equals_viterbi_values"] = bool(torch.equal(dec.float(), q_tiles))
                    encoded = q_idx.view(tk, tn, 256).contiguous()
                    info["steps"][step] = "ok"
                else:
                    g = torch.Generator().manual_seed(seed)
                    q_tiles = None
                    encoded = None
                    info["steps"][step] = "skipped (no quant part): random trellis words"

                step = "pack_trellis"
                packed = torch.zeros((tk, tn, 16 * K), dtype=torch.short, device=device)
                if encoded is not None:
                    ext["core"].pack_trellis(packed, encoded, K)
                    unpacked = torch.zeros_like(encoded)
                    ext["core"].unpack_trellis(unpacked, packed, K)
                    info["self_unpack_equals_indices"] = bool(torch.equal(unpacked, encoded))
                else:
                    words = torch.randint(-32768, 32768, (tk, tn, 16 * K), generator=g, dtype=torch.int32)
                    packed.copy_(words.to(torch.short))
                tensors[p + "trellis"] = packed.cpu().contiguous()
                info["steps"][step] = "ok"

                step = "reconstruct"
                w_hat = torch.empty((SIZE_K, SIZE_N), dtype=torch.half, device=device)
                ext["core"].reconstruct(w_hat, packed, float(K), mcg, mul1)
                sync()
                tensors[p + "w_hat"] = w_hat.cpu().contiguous()
                if q_tiles is not None:
                    info["self_reconstruct_equals_viterbi_values"] = bool(
                        torch.equal(untile(q_tiles.cpu(), SIZE_K, SIZE_N), w_hat.float().cpu()))
                info["steps"][step] = "ok"

                step = "gemm"
                g = torch.Generator().manual_seed(seed + 500)
                x = torch.randn(ROWS, SIZE_K, generator=g).half()
                tensors[p + "x"] = x.contiguous()
                if "gemm" in ext:
                    Wo = original_weight(w_hat, suh, svh)
                    xd = x.to(device).contiguous()
                    for rows, key in ((ROWS, "y8"), (1, "y1")):
                        xa = xd[:rows].contiguous()
                        y = torch.empty((rows, SIZE_N), dtype=torch.half, device=device)
                        a_had = torch.empty_like(xa)
                        shape = ext["gemm"].exl3_gemm(xa, packed, y, suh.to(device), a_had, svh.to(device),
                                                      mcg, mul1, 0, 0)
                        sync()
                        tensors[p + key] = y.cpu().contiguous()
                        ref = x[:rows].double() @ Wo
                        d = y.double().cpu() - ref
                        info[key] = {"shape_idx": int(shape),
                                     "rel_rms_vs_float64": (d.square().mean().sqrt() / ref.square().mean().sqrt()).item(),
                                     "max_abs_vs_float64": d.abs().max().item(),
                                     "max_abs_y": ref.abs().max().item()}
                    info["steps"][step] = "ok"
                else:
                    info["steps"][step] = "skipped (no gemm part)"
            except Exception as e:  # noqa: BLE001 -- record it, go on with the next case
                info["steps"][step] = f"FAILED: {type(e).__name__}: {e}"
                info["traceback"] = traceback.format_exc()
            if any(s != "ok" for s in info["steps"].values()):
                incomplete += 1
            info["seconds"] = round(time.time() - t_case, 3)
            print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in info["steps"].items())
                  + (f"; viterbi mse {info['viterbi_mse_all']:.5f}" if "viterbi_mse_all" in info else "")
                  + (f"; y8 rel {info['y8']['rel_rms_vs_float64']:.2e} (shape {info['y8']['shape_idx']})" if "y8" in info else ""),
                  flush=True)

    manifest["incomplete_cases"] = incomplete
    meta = {"manifest": json.dumps(manifest, sort_keys=True)}
    st = out_dir / "exllamav3_fixtures.safetensors"
    if tensors:
        save_file(tensors, str(st), metadata=meta)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    size = st.stat().st_size if st.exists() else 0
    print(f"wrote {len(tensors)} tensors, {size} bytes -> {st}; {incomplete} incomplete case(s)", flush=True)
    return 1 if incomplete or not tensors else 0


if __name__ == "__main__":
    sys.exit(main())
