#!/usr/bin/env python3
"""exllamav3 1.6.5's own EXL3 kernels timed on this GPU, the other side of tandem's benches (issue 6).

    python tools/exl3/exllamav3_bench.py [--out DIR] [--no-build] [--sections gemm,gemv,moe] [--quick]

Mirrors bench/cuda/exl3_bench.cpp and bench/cuda/exl3_moe_bench.cpp: random trellis words, the MUL1
codebook, random suh/svh (so both Hadamards run), weights rotated over enough copies to exceed 3x the
L2 (they come from DRAM, as in decode), each figure the median of 15 replays of a CUDA graph of
several calls (3 warm-up replays) divided by the calls, against a 2 GiB device-to-device copy
measured in the same run (bytes read + written, as tandem's bench_util copy_gbs).

Dense (8192^2 and 16384^2, K = 2, 3, 4, 6, 8, 1 / 8 / 16 rows), with the exllamav3 extension subset
(tools/exl3/exllamav3_ext_subset.py):
  int8    exllamav3's exl3_gemv_int8 (its own host code, default plain-int8 mode): what exl3_gemm runs
          first for mul1 at <= 2 rows and K <= exl3_gemv_int8_max_k (6 on Hopper); one-row kernel built
  gemv    the QTIP-style exl3_gemv_kernel, narrow (512 threads) and wide (256) configs, <= 8 rows,
          K = 2, 3, 4, launched as exl3_gemv_try_launch; exllamav3's heuristic choice is recorded
  gemm    exl3_gemm_kernel at shapes 1, 2 (part gemm) and 3, 4 (part gemm34) on all SMs: the
          candidates exl3_gemm's autotuner picks from at these sizes (best = what it would pick)
  x3      the path exl3_gemm dispatches to by default (int8 if it takes the call, else the GEMV if
          its heuristic takes it, else the best GEMM shape) and its time
MoE (E = 256, top-8, hidden 6144, width 2048, K = 4 mul1, uniformly random distinct experts per token
with softmax weights, T = 1, 8, 64, 4096, each forward with its own routing), as
BlockSparseMLP.forward (exllamav3/modules/block_sparse_mlp.py, GLM-style gated SiLU experts):
  T <= 8  BC_BlockSparseMLP.run_bszN: exl3_moe_coop (rotation + gate/up + down launches), buffers as
          BlockSparseMLP.load allocates them; a CUDA graph of 20 forwards ("graph"), and eagerly
  T > 8   the fused tier: argsort/bincount of the routing, expert_count.tolist() (a host sync, since
          T * 8 > fused_rows = 256), deterministic slot tables, one exl3_moe launch per row tile tier
          (64 / 32 / 16 rows), exl3_moe_gather. Timed eagerly as that Python runs it ("eager"), and
          its exl3_moe + gather launches alone on prebuilt tables in a CUDA graph ("graph").

Every kernel's output is checked against a float32 torch reference of the same math (MUL1 decode of the
trellis written from shared/research/exl3.md, y = ((x*suh)·Hb)·Ŵ·Hb*svh; for MoE the gated SiLU expert
MLP summed with the routing weights) before and after its timing: relative RMS error <= 1e-2 (fp16
paths) or 5e-2 (int8 activations), else the row is marked FAIL, so a mis-launched kernel cannot pass
off a timing for garbage. With the core part built, the torch decoder is also checked bit for bit
against exllamav3's reconstruct.

Each section runs in a child process (a CUDA fault in one cannot take the others down) within a time
budget. Writes DIR/exllamav3_bench.json (all records), DIR/exllamav3_bench.md (the tables) and prints
the tables. Needs torch with CUDA and the parts built (--no-build: import only parts that built).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DENSE_N = (8192, 16384)
DENSE_K = (2, 3, 4, 6, 8)
DENSE_ROWS = (1, 8, 16)
MOE_T = (1, 8, 64, 4096)
E, TOPK, HID, WID, MOE_K = 256, 8, 6144, 2048, 4
TOL_FP16, TOL_INT8, TOL_MOE = 1e-2, 5e-2, 3e-2
CALLS = 20          # calls per graph (tandem: 20)
WARM, REPS = 3, 15  # graph replays (tandem: 3 warm-up, 15 timed)
DEV = "cuda"        # the device of the data (a test may point it at the CPU with a stand-in extension)
SECTION_BUDGET = {"gemm": 110, "gemv": 80, "moe": 130}   # seconds per child process, start-up included


# ---------------------------------------------------------------------------------------------------
# Torch helpers (imported lazily: the parent only measures the copy and assembles tables)

def torch_mod():
    import torch
    return torch


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def copy_gbs():
    """GB/s of a 2 GiB device-to-device copy, bytes read + written (bench_util.hpp copy_gbs)."""
    torch = torch_mod()
    n = 2 << 30
    a = torch.ones(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for i in range(12):
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        if i >= 2:
            t.append(e0.elapsed_time(e1))
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * n / (median(t) * 1e-3) / 1e9


def warm_gpu(seconds=1.0):
    """Keep the GPU busy for a moment so the clocks are up before the first timing."""
    torch = torch_mod()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.half)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def time_graph(body, calls, warm=WARM, reps=REPS):
    """Median microseconds per call of body(i), i = 0..calls-1 captured in one CUDA graph (bench_util's
    graph_ms). Falls back to eager launches timed with events when capture fails. -> (us, method)"""
    torch = torch_mod()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    method = "graph"
    try:
        with torch.cuda.stream(s):
            g.capture_begin(capture_error_mode="thread_local")
            try:
                for i in range(calls):
                    body(i)
            finally:
                g.capture_end()
        torch.cuda.current_stream().wait_stream(s)
        run = g.replay
    except Exception as e:  # noqa: BLE001
        torch.cuda.synchronize()
        print(f"    (graph capture failed: {type(e).__name__}: {str(e)[:200]}; timing eagerly)", flush=True)
        method = "eager"
        g = None

        def run():
            for i in range(calls):
                body(i)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warm):
        run()
    t = []
    for _ in range(reps):
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1))
    del g
    return median(t) * 1e3 / calls, method


def hadamard128(torch, device):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < 128:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(128.0)).to(device=device, dtype=torch.float32)


class Decoder:
    """Ŵ (rotated basis, float32 [k, n]) of a MUL1 trellis (int16 [k/16, n/16, 16K]), from the spec
    (shared/research/exl3.md §3, as tools/exl3/check_quantized.py): 16-bit state of position p = the
    ring window of bits ((p+1)K - 16 .. (p+1)K - 1) mod 256K of the tile's MSB-first word stream
    (word m = u16[2m] | u16[2m+1] << 16); value = fp16((1024 + bytesum(s * 0x83DCD12D)) * k_inv + k_bias);
    position p -> tile row 2(l&3) + {0,1,8,9}[j&3], column (l>>2) + 8(j>>2), l = p>>3, j = p&7."""

    def __init__(self, torch, device):
        import numpy as np
        self.t = torch
        self.dev = device
        self.k_inv = float(np.array([0x1EEE], np.uint16).view(np.float16)[0])
        self.k_bias = float(np.array([0xC931], np.uint16).view(np.float16)[0])
        p = torch.arange(256, device=device)
        lane, j = p >> 3, p & 7
        self.r = 2 * (lane & 3) + torch.tensor([0, 1, 8, 9], device=device)[j & 3]
        self.c = (lane >> 2) + 8 * (j >> 2)
        self.tables = {}

    def _tab(self, K):
        if K not in self.tables:
            t = self.t
            p = t.arange(256, device=self.dev, dtype=t.int64)
            L = 256 * K
            b = ((p + 1) * K - 16) % L
            w0 = b // 32
            w1 = (w0 + 1) % (8 * K)
            off = b % 32
            self.tables[K] = (w0, w1, off)
        return self.tables[K]

    def states(self, trellis):
        t = self.t
        tk, tn, w16 = trellis.shape
        K = w16 // 16
        w0, w1, off = self._tab(K)
        u = trellis.to(t.int64) & 0xFFFF
        u = u.view(tk, tn, 8 * K, 2)
        words = u[..., 0] | (u[..., 1] << 16)                       # [tk, tn, 8K], < 2^32
        a = words.index_select(2, w0)
        b = words.index_select(2, w1)
        lo = (a >> (16 - off).clamp(min=0)) & 0xFFFF                  # window inside word w0 (off <= 16)
        hi = ((a << (off - 16).clamp(min=0)) | (b >> (48 - off).clamp(max=32))) & 0xFFFF   # straddles w0, w1
        return t.where(off <= 16, lo, hi)

    def values(self, s):
        t = self.t
        x = (s * 0x83DCD12D) & 0xFFFFFFFF
        bs = (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24)
        return ((1024.0 + bs.to(t.float64)) * self.k_inv + self.k_bias).to(t.float16)

    def what(self, trellis, chunk_tiles=1 << 17):
        t = self.t
        tk, tn, _ = trellis.shape
        out = t.empty(tk * 16, tn * 16, dtype=t.float32, device=self.dev)
        rows = max(1, chunk_tiles // tn)
        for r0 in range(0, tk, rows):
            tr = trellis[r0:r0 + rows]
            c = tr.shape[0]
            v = self.values(self.states(tr))                           # fp16 [c, tn, 256]
            tiles = t.zeros(c, tn, 16, 16, dtype=t.float16, device=self.dev)
            tiles[:, :, self.r, self.c] = v
            out[r0 * 16:(r0 + c) * 16] = tiles.permute(0, 2, 1, 3).reshape(c * 16, tn * 16).float()
        return out


def lin_ref(torch, H, x, what, suh, svh):
    """x·W in float32, W = diag(suh)·Hb·Ŵ·Hb·diag(svh)."""
    m, k = x.shape
    n = what.shape[1]
    xs = ((x.float() * suh.float()).view(m, k // 128, 128) @ H).view(m, k)
    y = xs @ what
    return (y.view(m, n // 128, 128) @ H).view(m, n) * svh.float()


def rel_err(y, ref):
    d = (y.float() - ref.float()).norm().item()
    r = ref.float().norm().item()
    e = d / r if r > 0 else d
    return e if math.isfinite(e) else float("inf")


def load_parts(names, build):
    from exllamav3_ext_subset import load_part
    got = {}
    for p in names:
        try:
            got[p] = load_part(p, build=build)
        except Exception as e:  # noqa: BLE001
            print(f"part {p}: not available ({type(e).__name__}: {str(e)[:300]})", flush=True)
    return got


# ---------------------------------------------------------------------------------------------------
# Dense sections (child processes): one record per (kernel, variant, N, K, rows)

class DenseCase:
    """Weights (copies rotated past the L2), scales, inputs and the float32 reference of one (N, K)."""

    def __init__(self, torch, N, K, seed, l2_bytes, dec, H):
        self.N, self.K = N, K
        dev = DEV
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        self.tbytes = N * N // 8 * K
        self.copies = max(2, 3 * l2_bytes // self.tbytes + 1)
        shape = (N // 16, N // 16, 16 * K)
        self.tr = [torch.randint(0, 256, (self.tbytes,), dtype=torch.uint8, device=dev, generator=g)
                   .view(torch.int16).view(shape) for _ in range(self.copies)]

        def scales(n):
            mag = 1.0 + torch.randint(0, 512, (n,), device=dev, generator=g).float() / 1024.0
            sign = torch.randint(0, 2, (n,), device=dev, generator=g).float() * 2 - 1
            return (mag * sign).half()
        self.suh, self.svh = scales(N), scales(N)
        self.x = (torch.rand(16, N, device=dev, generator=g) * 2 - 1).half()
        self.C = torch.empty(16, N, dtype=torch.half, device=dev)
        self.A_had = torch.empty(16, N, dtype=torch.half, device=dev)
        wh = dec.what(self.tr[0])
        self.ref = lin_ref(torch, H, self.x, wh, self.suh, self.svh)   # [16, N] float32
        self.what0 = wh

    def check(self, call, rows):
        """Run call(rows, copy 0) once, return the relative error against the reference."""
        torch = torch_mod()
        self.C.zero_()
        r = call(rows, 0)
        torch.cuda.synchronize()
        return r, rel_err(self.C[:rows], self.ref[:rows])


def run_dense(section, args, out):
    torch = torch_mod()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(DEV)
    props = torch.cuda.get_device_properties(0)
    parts = load_parts(["core", "gemm", "gemm34"] if section == "gemm" else ["core", "gemv"], not args.no_build)
    dec = Decoder(torch, dev)
    H = hadamard128(torch, dev)
    warm_gpu()
    recs = out["records"]
    ns = (8192,) if args.quick else DENSE_N
    ks = (4,) if args.quick else DENSE_K
    seed = 1
    for N in ns:
        for K in ks:
            seed += 1
            t0 = time.time()
            case = DenseCase(torch, N, K, seed, props.L2_cache_size, dec, H)
            base = {"N": N, "K": K, "trellis_bytes": case.tbytes, "copies": case.copies}
            if "core" in parts:   # the reference decoder against exllamav3's reconstruct, bit for bit
                w = torch.empty(N, N, dtype=torch.half, device=dev)
                parts["core"].reconstruct(w, case.tr[0], float(K), False, True)
                torch.cuda.synchronize()
                mism = int((w.view(torch.int16) != case.what0.half().view(torch.int16)).sum().item())
                recs.append(dict(base, kernel="decoder_vs_reconstruct", mismatches=mism, ok=mism == 0))
                print(f"  {N}^2 K={K}: torch decoder vs exllamav3 reconstruct: {mism} mismatching values", flush=True)
                del w
            del case.what0
            variants = []
            if section == "gemm":
                for s in (1, 2):
                    if "gemm" in parts:
                        variants.append(("gemm", f"shape{s}", DENSE_ROWS, TOL_FP16,
                                         lambda m, i, s=s: parts["gemm"].exl3_gemm(
                                             case.x[:m], case.tr[i], case.C[:m], case.suh, case.A_had[:m], case.svh,
                                             False, True, s, 0)))
                for s in (3, 4):
                    if "gemm34" in parts and K in tuple(parts["gemm34"].exl3_gemm34_bits()):
                        variants.append(("gemm", f"shape{s}", DENSE_ROWS, TOL_FP16,
                                         lambda m, i, s=s: parts["gemm34"].exl3_gemm34(
                                             case.x[:m], case.tr[i], case.C[:m], case.suh, case.A_had[:m], case.svh,
                                             s, 0)))
            elif "gemv" in parts:
                gv = parts["gemv"]
                variants.append(("int8", "sq", DENSE_ROWS, TOL_INT8,
                                 lambda m, i: gv.exl3_gemv_int8(case.x[:m], case.tr[i], case.C[:m], case.suh,
                                                                case.A_had[:m], case.svh)))
                for cfg, mode in (("narrow", 3), ("wide", 4)):
                    variants.append(("gemv", cfg, DENSE_ROWS, TOL_FP16,
                                     lambda m, i, mode=mode: gv.exl3_gemv(case.x[:m], case.tr[i], case.C[:m], case.suh,
                                                                          case.A_had[:m], case.svh, mode)))
                for m in DENSE_ROWS:
                    recs.append(dict(base, kernel="gemv_choice", rows=m,
                                     choice=int(gv.exl3_gemv_choice(m, N, N, K, 1)),
                                     int8_max_k=int(gv.exl3_gemv_int8_max_k(0))))
            for kernel, variant, rows_list, tol, call in variants:
                for m in rows_list:
                    rec = dict(base, kernel=kernel, variant=variant, rows=m)
                    try:
                        r, err = case.check(call, m)
                        declined = (kernel == "int8" and r is False) or (kernel == "gemv" and r == -1)
                        if declined:
                            rec.update(declined=True)
                            recs.append(rec)
                            continue
                        us, method = time_graph(lambda i: call(m, i % case.copies), CALLS)
                        _, err2 = case.check(call, m)
                        ok = err <= tol and err2 <= tol
                        rec.update(us=us, method=method, rel_err=err, rel_err_after=err2, ok=ok,
                                   gbs=case.tbytes / (us * 1e-6) / 1e9)
                        print(f"  {N}^2 K={K} {kernel}/{variant} {m:2d} rows: {us:8.2f} us ({method}), rel err "
                              f"{err:.2e} / {err2:.2e}{'' if ok else '  FAIL'}", flush=True)
                    except Exception as e:  # noqa: BLE001
                        rec.update(error=f"{type(e).__name__}: {str(e)[:300]}", ok=False)
                        print(f"  {N}^2 K={K} {kernel}/{variant} {m} rows: ERROR {rec['error']}", flush=True)
                    recs.append(rec)
                    write_json(args.child_json, out)
            print(f"  {N}^2 K={K}: {time.time() - t0:.1f} s", flush=True)
            variants = case = None      # free the weights before the next case
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------
# MoE section (child process)

class Experts:
    """E experts x {gate, up, down} K=4 MUL1 trellis with scales, and exllamav3's pointer tables."""

    def __init__(self, torch, seed):
        dev = DEV
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        K = MOE_K
        self.gu_shape = (HID // 16, WID // 16, 16 * K)
        self.d_shape = (WID // 16, HID // 16, 16 * K)
        mat_bytes = HID * WID // 8 * K
        self.mat_bytes = mat_bytes
        self.gu = torch.randint(0, 256, (E * 2 * mat_bytes,), dtype=torch.uint8, device=dev, generator=g) \
            .view(torch.int16).view(E, 2, *self.gu_shape)
        self.d = torch.randint(0, 256, (E * mat_bytes,), dtype=torch.uint8, device=dev, generator=g) \
            .view(torch.int16).view(E, *self.d_shape)

        def scales(n, scale):
            mag = 0.75 + 0.5 * torch.rand(E, n, device=dev, generator=g)
            sign = torch.randint(0, 2, (E, n), device=dev, generator=g).float() * 2 - 1
            return (mag * sign * scale).half().contiguous()
        # gate/up: k = HID, n = WID; down: k = WID, n = HID (svh ~ 1/sqrt(k) keeps activations O(1))
        self.g_suh, self.g_svh = scales(HID, 1.0), scales(WID, 1.0 / math.sqrt(HID))
        self.u_suh, self.u_svh = scales(HID, 1.0), scales(WID, 1.0 / math.sqrt(HID))
        self.d_suh, self.d_svh = scales(WID, 1.0), scales(HID, 1.0 / math.sqrt(WID))

        def ptrs(ts):
            return torch.tensor([t.data_ptr() for t in ts], dtype=torch.long, device=dev)
        # MultiLinear: device int64 tables of per-expert data_ptr()
        self.g_tr = ptrs([self.gu[e, 0] for e in range(E)])
        self.u_tr = ptrs([self.gu[e, 1] for e in range(E)])
        self.d_tr = ptrs([self.d[e] for e in range(E)])
        self.g_su, self.g_sv = ptrs([self.g_suh[e] for e in range(E)]), ptrs([self.g_svh[e] for e in range(E)])
        self.u_su, self.u_sv = ptrs([self.u_suh[e] for e in range(E)]), ptrs([self.u_svh[e] for e in range(E)])
        self.d_su, self.d_sv = ptrs([self.d_suh[e] for e in range(E)]), ptrs([self.d_svh[e] for e in range(E)])


def routing(torch, T, seed):
    """Top-8 distinct experts per token, uniformly random; weights a softmax of N(0, 1) logits (fp16,
    exllamav3's routing dtype). -> sel int64 [T, 8], rw fp16 [T, 8]"""
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    sel = torch.rand(T, E, device=DEV, generator=g).argsort(dim=1)[:, :TOPK].contiguous()
    rw = torch.softmax(torch.randn(T, TOPK, device=DEV, generator=g), dim=-1).half().contiguous()
    return sel, rw


def moe_ref(torch, H, dec, ex, x, sel, rw, tokens):
    """float32 sum_j rw[t, j] * down(silu(gate(x_t)) * up(x_t)) for the first `tokens` tokens."""
    out = torch.zeros(tokens, HID, device=DEV)
    s = sel[:tokens].cpu()
    by_e = {}
    for t in range(tokens):
        for j in range(TOPK):
            by_e.setdefault(int(s[t, j]), []).append((t, j))
    for e, tj in by_e.items():
        ts = torch.tensor([t for t, _ in tj], device=DEV)
        js = torch.tensor([j for _, j in tj], device=DEV)
        xe = x[ts].float()
        g = lin_ref(torch, H, xe, dec.what(ex.gu[e, 0]), ex.g_suh[e], ex.g_svh[e])
        u = lin_ref(torch, H, xe, dec.what(ex.gu[e, 1]), ex.u_suh[e], ex.u_svh[e])
        a = torch.nn.functional.silu(g) * u
        o = lin_ref(torch, H, a, dec.what(ex.d[e]), ex.d_suh[e], ex.d_svh[e])
        out.index_add_(0, ts, o * rw[ts, js].float()[:, None])
    return out


class CoopPath:
    """BC_BlockSparseMLP.run_bszN (T <= MAX_BSZN = 8): exl3_moe_coop with BlockSparseMLP.load's buffers."""

    def __init__(self, torch, ext, ex):
        dev = DEV
        MAX_BSZN = 8
        rows = MAX_BSZN * TOPK                                          # bszn_rows
        Hi, I, Ho = HID, WID, HID
        self.ext, self.ex = ext, ex
        temp_hidden = torch.empty(max(32 * 2, rows), Hi, dtype=torch.half, device=dev)
        temp_interm = torch.empty(max(32 * 2, 2 * rows), I, dtype=torch.half, device=dev)   # interm_dtype half (GLM)
        temp_activa = torch.empty(max(32, rows), I, dtype=torch.half, device=dev)
        temp_output = torch.empty(max(32, rows), Ho, dtype=torch.float, device=dev)
        self.yh = temp_hidden[:rows].view(rows, 1, Hi)
        self.interm_g = temp_interm[:rows].view(rows, 1, I)
        self.interm_u = temp_interm[rows:rows * 2].view(rows, 1, I)
        self.interm_a = temp_activa[:rows].view(rows, 1, I)
        self.out_d = temp_output[:rows].view(rows, 1, Ho)
        self.coop_ctr = torch.zeros(rows * (I // 128) + MAX_BSZN * (Ho // 128) + 2 * rows + 3, dtype=torch.int, device=dev)
        self.had_u = torch.empty(rows, Hi, dtype=torch.half, device=dev)
        self.out_bszn = torch.empty(MAX_BSZN, HID, dtype=torch.float, device=dev)
        self.keep = (temp_hidden, temp_interm, temp_activa, temp_output)

    def __call__(self, y, sel, rw):
        ex = self.ex
        self.ext.exl3_moe_coop(
            y, sel, rw, -1, -1, HID,
            ex.g_tr, ex.g_su, ex.g_sv, ex.u_tr, ex.u_su, ex.u_sv, ex.d_tr, ex.d_su, ex.d_sv,
            None, None, None,
            float(MOE_K), float(MOE_K), float(MOE_K),
            False, True,
            0,        # MOE_COOP_ACT_SILU
            0.0,      # act_limit
            True,     # gated
            self.yh, self.had_u, self.interm_g, self.interm_u, self.interm_a, self.out_d, self.coop_ctr,
            self.out_bszn, None, None)
        return self.out_bszn[:y.shape[0]]


class FusedPath:
    """BlockSparseMLP.forward's fused tier (T > 8): exl3_moe per row-tile tier + exl3_moe_gather."""

    def __init__(self, torch, ext, ex):
        dev = DEV
        self.t, self.ext, self.ex = torch, ext, ex
        self.fused_rows = 256                 # FUSED_ROWS_WIDE: mtile_ok (MTILE on, mul1)
        C = ext.exl3_moe_max_concurrency(0)
        R = self.fused_rows
        self.concurrency = C
        self.temp_state_g = torch.empty(C, R, HID, dtype=torch.half, device=dev)
        self.temp_state_u = torch.empty(C, R, HID, dtype=torch.half, device=dev)
        self.temp_int_g = torch.empty(C, R, WID, dtype=torch.half, device=dev)
        self.temp_int_u = torch.empty(C, R, WID, dtype=torch.half, device=dev)
        self.aranges = {}

    def flat_token(self, T):
        if T not in self.aranges:           # buffered_interleaved_arange
            self.aranges[T] = self.t.arange(T).repeat_interleave(TOPK).to(DEV)
        return self.aranges[T]

    def plan(self, y, sel, rw):
        """Everything forward does before the kernels: sorting, counts (host sync), slot tables."""
        import numpy as np
        torch = self.t
        T = y.shape[0]
        fhs_ext = torch.zeros(T + 1, HID, dtype=torch.float, device=DEV)
        p = {"final": fhs_ext[:T], "fhs_ext": fhs_ext}
        flat_expert = sel.reshape(-1)
        flat_weight = rw.reshape(-1)
        order = flat_expert.argsort()
        p["token_sorted"] = self.flat_token(T)[order]
        p["weight_sorted"] = flat_weight[order]
        p["expert_count"] = expert_count = torch.bincount(flat_expert, minlength=E + 1)
        p["flat_expert"] = flat_expert
        if T * TOPK <= self.fused_rows:
            counts_list = None
            fused_total = T * TOPK
        else:
            counts_list = expert_count.tolist()
            fused_total = sum(c for c in counts_list[:E] if 0 < c <= self.fused_rows)
            heavy = [e for e in range(E) if counts_list[e] > self.fused_rows]
            if heavy:   # exllamav3 would run its batched reconstruct tier for these: not built here
                raise RuntimeError(f"{len(heavy)} experts above the fused tier's {self.fused_rows} rows")
        A = flat_expert.shape[0]
        p["inv_order"] = torch.empty_like(order).scatter_(0, order, torch.arange(A, device=DEV))
        if counts_list is None:
            expert_start = torch.cumsum(expert_count, 0) - expert_count
            tables = torch.stack([expert_start, expert_start, (expert_count > 0).long()])
            n_slots = fused_total
            launches = [(-1, 1, self.fused_rows, 16)]
        else:
            E1 = len(counts_list)
            base = np.zeros(E1, dtype=np.int64)
            kind = np.zeros(E1, dtype=np.int64)
            starts_np = np.cumsum([0] + counts_list[:-1]).astype(np.int64)
            n_slots = 0
            for e in range(E):
                c = counts_list[e]
                if 0 < c <= self.fused_rows:
                    base[e] = n_slots
                    kind[e] = 1
                    n_slots += c
            tables = torch.from_numpy(np.stack([base, starts_np, kind])).to(DEV, non_blocking=True)
            counts = [c for c in counts_list[:E] if 0 < c <= self.fused_rows]
            t1 = sum(1 for c in counts if 16 < c <= 32)
            t2 = sum(1 for c in counts if c > 32)
            launches = []
            if t1 or t2:      # mtile_ok: one launch per row tile over its expert range, largest first
                t0 = len(counts) - t1 - t2
                if t2:
                    launches.append((t2, 33, self.fused_rows, 64))
                if t1:
                    launches.append((t1, 17, 32, 32))
                if t0:
                    launches.append((t0, 1, 16, 16))
            else:
                launches.append((len(counts), 1, self.fused_rows, 16))
        p["tables"] = tables
        p["scratch"] = torch.empty(max(n_slots, 1), HID, dtype=torch.float, device=DEV)
        p["launches"] = launches
        return p

    def kernels(self, y, p):
        ex = self.ex
        for num_active, lo, hi, m_tile in p["launches"]:
            self.ext.exl3_moe(
                y, p["final"], p["expert_count"], p["token_sorted"], p["weight_sorted"],
                self.temp_state_g, self.temp_state_u, self.temp_int_g, self.temp_int_u,
                0,                                    # MOE_ACT_SILU
                float(MOE_K), float(MOE_K), float(MOE_K),
                ex.g_tr, ex.g_su, ex.g_sv, ex.u_tr, ex.u_su, ex.u_sv, ex.d_tr, ex.d_su, ex.d_sv,
                False, True, False, True, False, True,
                0.0,                                  # act_limit
                num_active, p["scratch"], p["tables"][0], lo, hi, m_tile)
        t = p["tables"]
        self.ext.exl3_moe_gather(p["final"], p["scratch"], p["flat_expert"], p["inv_order"],
                                 t[1, :E], t[0, :E], t[2, :E], p["weight_sorted"])
        return p["final"]

    def __call__(self, y, sel, rw):
        p = self.plan(y, sel, rw)
        return self.kernels(y, p)


def run_moe(args, out):
    torch = torch_mod()
    torch.backends.cuda.matmul.allow_tf32 = False
    recs = out["records"]
    parts = load_parts(["moe"], not args.no_build)
    if "moe" not in parts:
        recs.append({"kernel": "moe", "error": "part moe not built", "ok": False})
        return
    ext = parts["moe"]
    dev = torch.device(DEV)
    dec = Decoder(torch, dev)
    H = hadamard128(torch, dev)
    t0 = time.time()
    ex = Experts(torch, 7)
    torch.cuda.synchronize()
    print(f"  experts: {E} x 3 x {ex.mat_bytes / 1e6:.2f} MB made in {time.time() - t0:.1f} s; "
          f"exl3_moe_max_concurrency {ext.exl3_moe_max_concurrency(0)}", flush=True)
    g = torch.Generator(device=DEV)
    g.manual_seed(77)
    x = torch.randn(4096, HID, device=DEV, generator=g).half()
    coop = CoopPath(torch, ext, ex)
    fused = FusedPath(torch, ext, ex)
    warm_gpu()
    ts = (1, 8) if args.quick else MOE_T
    for T in ts:
        rec = {"kernel": "moe", "tokens": T}
        try:
            nr = 20 if T <= 8 else (10 if T <= 64 else 3)
            rts = [routing(torch, T, 100 * T + i) for i in range(nr)]
            y = x[:T]
            active = [int(torch.unique(s).numel()) for s, _ in rts]
            rec["active_experts"] = sum(active) / nr
            rec["gb_touched"] = rec["active_experts"] * 3 * ex.mat_bytes / 1e9
            check_tokens = T if T <= 8 else 8
            ref = moe_ref(torch, H, dec, ex, y, rts[0][0], rts[0][1], check_tokens)
            if T <= 8:
                rec["path"] = "coop (run_bszN)"
                path = coop
            else:
                rec["path"] = "fused exl3_moe + gather"
                path = fused
            o = path(y, *rts[0])
            torch.cuda.synchronize()
            err = rel_err(o[:check_tokens], ref)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

            def eager_ms(fwd, reps):
                """Median ms of one forward launched from Python, as exllamav3 runs it (host work, syncs)."""
                for i in range(2):
                    fwd(i)
                tt = []
                for rep in range(reps):
                    for i in range(nr):
                        torch.cuda.synchronize()
                        e0.record()
                        fwd(i)
                        e1.record()
                        e1.synchronize()
                        tt.append(e0.elapsed_time(e1))
                return median(tt)
            if T <= 8:
                # run_bszN is two or three plain launches: a graph of nr forwards, and eagerly
                us, method = time_graph(lambda i: coop(y, *rts[i]), nr)
                rec.update(ms_graph=us / 1e3, method=method, ms_eager=eager_ms(lambda i: coop(y, *rts[i]), 1))
            else:
                # as BlockSparseMLP.forward runs it: eager, argsort / bincount / tolist host sync included
                rec["ms_eager"] = eager_ms(lambda i: fused(y, *rts[i]), 2)
                # the kernels alone (exl3_moe launches + gather) on prebuilt tables, in a graph
                plans = [fused.plan(y, *r) for r in rts]
                rec["launches"] = [list(t) for t in plans[0]["launches"]]

                def body(i):
                    plans[i]["fhs_ext"].zero_()
                    fused.kernels(y, plans[i])
                us, method = time_graph(body, nr)
                rec.update(ms_graph=us / 1e3, method=method)
                torch.cuda.synchronize()
                rec["rel_err_graph"] = rel_err(plans[0]["final"][:check_tokens], ref)   # the last replay's
                del plans
            o = path(y, *rts[0])
            torch.cuda.synchronize()
            err2 = rel_err(o[:check_tokens], ref)
            ok = err <= TOL_MOE and err2 <= TOL_MOE and rec.get("rel_err_graph", 0.0) <= TOL_MOE
            rec.update(rel_err=err, rel_err_after=err2, ok=ok, checked_tokens=check_tokens)
            rec["gbs"] = rec["gb_touched"] / (rec["ms_graph"] * 1e-3)
            print(f"  T={T}: {rec['path']}, {rec['active_experts']:.1f} experts, graph {rec['ms_graph']:.3f} ms "
                  f"({rec['method']}), eager {rec['ms_eager']:.3f} ms, rel err {err:.2e} / {err2:.2e}"
                  f"{'' if ok else '  FAIL'}", flush=True)
        except Exception as e:  # noqa: BLE001
            rec.update(error=f"{type(e).__name__}: {str(e)[:300]}", ok=False)
            print(f"  T={T}: ERROR {rec['error']}", flush=True)
            traceback.print_exc()
        recs.append(rec)
        write_json(args.child_json, out)
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------
# Parent: copy bandwidth, sections in child processes, tables

def write_json(path, obj):
    if not path:
        return
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def find(recs, **kw):
    for r in recs:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def fmt_us(r):
    if r is None:
        return "-"
    if r.get("declined"):
        return "no"
    if "us" not in r:
        return "ERR"
    return f"{r['us']:.1f}" + ("" if r.get("ok") else "!")


def x3_default(recs, N, K, m):
    """The path exl3_gemm_gr takes by default for (N, K, m rows) and its record: exl3_gemv_int8 first
    (mul1; it takes <= 2 rows at K <= exl3_gemv_int8_max_k), then the QTIP GEMV if
    exl3_gemv_try_launch's heuristic takes the call, else the autotuned GEMM (the fastest shape)."""
    int8 = find(recs, N=N, K=K, kernel="int8", rows=m)
    if int8 and not int8.get("declined"):
        return "int8", int8
    choice = find(recs, N=N, K=K, kernel="gemv_choice", rows=m)
    if choice and choice.get("choice", -1) >= 0:
        cfg = "narrow" if choice["choice"] == 0 else "wide"
        return f"gemv {cfg}", find(recs, N=N, K=K, kernel="gemv", variant=cfg, rows=m)
    gs = [r for r in (find(recs, N=N, K=K, kernel="gemm", variant=f"shape{s}", rows=m) for s in (1, 2, 3, 4))
          if r and r.get("ok") and "us" in r]
    if gs:
        best = min(gs, key=lambda r: r["us"])
        return f"gemm {best['variant'].replace('shape', 's')}", best
    return "?", None


def dense_tables(res, copy):
    recs = res["records"]
    lines = [f"### exllamav3 1.6.5 dense EXL3 MUL1 linear (input Hadamard + matmul + output Hadamard), "
             f"{res.get('device', '?')}, copy {copy:.0f} GB/s",
             "",
             "µs per call (median of graph replays); `!` = output check failed; `no` = the kernel declines the call "
             "(exllamav3 falls through); x3 = the path exl3_gemm takes by default, its time, GB/s of trellis and % "
             "of the copy bandwidth.",
             "",
             "| matrix | K | rows | x3 path | x3 µs | GB/s | % copy | int8 µs | gemv narrow µs | gemv wide µs | "
             "gemm s1 | s2 | s3 | s4 | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = []
    res["x3_default"] = []
    keys = sorted({(r["N"], r["K"]) for r in recs if "N" in r})
    for N, K in keys:
        for m in DENSE_ROWS:
            int8 = find(recs, N=N, K=K, kernel="int8", rows=m)
            gn = find(recs, N=N, K=K, kernel="gemv", variant="narrow", rows=m)
            gw = find(recs, N=N, K=K, kernel="gemv", variant="wide", rows=m)
            gs = [find(recs, N=N, K=K, kernel="gemm", variant=f"shape{s}", rows=m) for s in (1, 2, 3, 4)]
            path, r = x3_default(recs, N, K, m)
            t = r["us"] if r and r.get("ok") and "us" in r else None
            tb = N * N // 8 * K
            gbs = tb / (t * 1e-6) / 1e9 if t else None
            errs = [x["rel_err"] for x in [int8, gn, gw] + gs if x and "rel_err" in x]
            cells = [f"{N}²", str(K), str(m), path + ("" if t or r is None else " (FAIL)"),
                     f"{t:.1f}" if t else "-", f"{gbs:.0f}" if gbs else "-",
                     f"{100 * gbs / copy:.1f}%" if gbs else "-",
                     fmt_us(int8), fmt_us(gn), fmt_us(gw)] + [fmt_us(x) for x in gs] + \
                    [f"{max(errs):.1e}" if errs else "-"]
            lines.append("| " + " | ".join(cells) + " |")
            res["x3_default"].append({"N": N, "K": K, "rows": m, "path": path, "us": t, "gbs": gbs,
                                      "pct_copy": 100 * gbs / copy if gbs else None})
            if m == 1 and t:
                summary.append(f"{N}² K={K} 1 row: exllamav3 {t:.1f} µs ({path}, {100 * gbs / copy:.1f}% of copy)"
                               f" -> issue 6 target (2x): {t / 2:.1f} µs")
    lines += ["", "Issue 6 targets (at least 2x exllamav3 at 1 row, matrices larger than L2):", ""]
    lines += [f"- {x}" for x in summary]
    return lines


def moe_tables(res, copy):
    recs = [r for r in res["records"] if r.get("kernel") == "moe"]
    lines = [f"### exllamav3 1.6.5 MoE MLP, E={E} top-{TOPK}, hidden {HID}, width {WID}, K={MOE_K} MUL1, "
             f"copy {copy:.0f} GB/s",
             "",
             "ms per forward, median; each forward with its own routing. graph: the exllamav3 launches of the "
             "forward in a CUDA graph (T <= 8: run_bszN's exl3_moe_coop; T > 8: exl3_moe per row tier + "
             "exl3_moe_gather on prebuilt tables); eager: as its Python runs it (T > 8: with the argsort, "
             "bincount and expert_count.tolist() host sync of BlockSparseMLP.forward). GB = trellis bytes of "
             "the experts the routing touches; tok/s, GB/s and % copy of the graph time.",
             "",
             "| tokens | path | experts | graph ms | eager ms | tok/s | GB | GB/s | % copy | rel err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        if "ms_graph" not in r:
            lines.append(f"| {r.get('tokens')} | {r.get('path', '-')} | - | ERROR: {r.get('error', '?')[:80]} "
                         "| | | | | | |")
            continue
        lines.append(f"| {r['tokens']} | {r['path']} | {r['active_experts']:.1f} | {r['ms_graph']:.3f} | "
                     f"{r['ms_eager']:.3f} | {r['tokens'] / (r['ms_graph'] * 1e-3):.0f} | {r['gb_touched']:.2f} | "
                     f"{r['gbs']:.0f} | {100 * r['gbs'] / copy:.1f}% | {r['rel_err']:.1e}"
                     f"{'' if r.get('ok') else ' FAIL'} |")
    return lines


def parent(args):
    deadline = time.time() + args.time_limit
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch = torch_mod()
    props = torch.cuda.get_device_properties(0)
    res = {"bench": "exllamav3_bench", "device": props.name, "sms": props.multi_processor_count,
           "l2_bytes": props.L2_cache_size, "torch": torch.__version__, "records": [], "sections": {}}
    try:
        ver = (Path(__file__).resolve().parents[2] / ".gpu-exllamav3" / "VERSION").read_text().splitlines()[0]
    except OSError:
        ver = "?"
    res["exllamav3"] = ver
    warm_gpu(0.5)
    res["copy_gbs"] = copy_gbs()
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size >> 20} MB; "
          f"device-to-device copy {res['copy_gbs']:.0f} GB/s (read + write); {ver}", flush=True)
    torch.cuda.empty_cache()
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    for sec in sections:
        cj = out_dir / f"exllamav3_bench_{sec}.json"
        if cj.exists():
            cj.unlink()
        cmd = [sys.executable, __file__, "--child", sec, "--child-json", str(cj)]
        if args.no_build:
            cmd.append("--no-build")
        if args.quick:
            cmd.append("--quick")
        budget = SECTION_BUDGET.get(sec, 150) * (1 if not args.quick else 0.5)
        budget = min(budget, deadline - time.time() - 15)   # leave time for the tables
        if budget < 20:
            res["sections"][sec] = {"rc": "skipped (time limit)", "seconds": 0}
            print(f"== section {sec}: skipped, {deadline - time.time():.0f} s left of --time-limit", flush=True)
            continue
        t0 = time.time()
        print(f"== section {sec} (budget {budget:.0f} s)", flush=True)
        try:
            rc = subprocess.run(cmd, timeout=budget).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        res["sections"][sec] = {"rc": rc, "seconds": round(time.time() - t0, 1)}
        print(f"== section {sec}: rc={rc} after {time.time() - t0:.1f} s", flush=True)
        if cj.exists():
            try:
                res["records"] += json.loads(cj.read_text())["records"]
            except (OSError, ValueError) as e:
                print(f"section {sec}: unreadable results ({e})", flush=True)
        write_json(out_dir / "exllamav3_bench.json", res)
    lines = [f"exllamav3 bench: {ver}, {props.name}, torch {torch.__version__}, copy {res['copy_gbs']:.0f} GB/s; "
             f"sections " + ", ".join(f"{k} rc={v['rc']} ({v['seconds']} s)" for k, v in res["sections"].items()), ""]
    if any("N" in r for r in res["records"]):
        lines += dense_tables(res, res["copy_gbs"]) + [""]
    if any(r.get("kernel") == "moe" for r in res["records"]):
        lines += moe_tables(res, res["copy_gbs"]) + [""]
    fails = [r for r in res["records"] if r.get("ok") is False]
    dec = [r for r in res["records"] if r.get("kernel") == "decoder_vs_reconstruct"]
    if dec:
        lines.append(f"Reference decoder vs exllamav3 reconstruct: {sum(r['mismatches'] for r in dec)} mismatching "
                     f"values over {len(dec)} matrices.")
    lines.append(f"Checks: {sum(1 for r in res['records'] if r.get('ok'))} passed, {len(fails)} failed or errored.")
    text = "\n".join(lines) + "\n"
    (out_dir / "exllamav3_bench.md").write_text(text)
    write_json(out_dir / "exllamav3_bench.json", res)
    print(text, flush=True)
    return 0 if res["records"] and not fails else 1


def child(args):
    out = {"section": args.child, "records": []}
    t0 = time.time()
    try:
        if args.child in ("gemm", "gemv"):
            run_dense(args.child, args, out)
        elif args.child == "moe":
            run_moe(args, out)
        else:
            raise ValueError(f"unknown section {args.child}")
    finally:
        out["seconds"] = round(time.time() - t0, 1)
        write_json(args.child_json, out)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="exllamav3-bench-out", help="output directory (JSON, markdown)")
    ap.add_argument("--sections", default="gemm,gemv,moe", help="comma list of gemm, gemv, moe")
    ap.add_argument("--no-build", action="store_true", help="import only parts that already built")
    ap.add_argument("--quick", action="store_true", help="8192^2 K=4 and MoE T=1, 8 only")
    ap.add_argument("--time-limit", type=float, default=300.0,
                    help="seconds for the whole run: sections get what is left (default 300)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.environ.setdefault("MAX_JOBS", "16")
    if args.child:
        return child(args)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
