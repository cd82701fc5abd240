"""DFlash2 drafter: the PyTorch reference of plugins/dflash2/ARCHITECTURE.md (the contract).

Two forward paths share the weights:
  * draft()          the inference path, one block at a time, written plainly as the C++
                     plugin computes it (window-gathered context, explicit GQA, selector);
  * block_logits_z() the training path: many anchors per sequence at once, all of a
                     sequence's context with the training mask (P - window <= p_j < P).
test_dflash2.py checks that both give the same logits.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

CONFIG_KEYS = {
    "architecture", "target", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
    "head_dim", "intermediate_size", "rms_norm_eps", "rope_theta", "target_layers",
    "block_size", "conv_group_size", "selector_top_k", "selector_rank", "context_window",
}
TARGET_KEYS = {"arch", "hidden_size", "vocab_size", "num_layers"}


@dataclass
class Config:
    target: dict
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    target_layers: list
    block_size: int
    conv_group_size: int
    selector_top_k: int
    selector_rank: int
    context_window: int
    architecture: str = "dflash2"

    @staticmethod
    def from_dict(d: dict) -> "Config":
        # The plugin rejects missing and unknown keys; so do we, so a fixture can't drift.
        if set(d) != CONFIG_KEYS:
            raise ValueError(f"config keys: missing {CONFIG_KEYS - set(d)}, unknown {set(d) - CONFIG_KEYS}")
        if set(d["target"]) != TARGET_KEYS:
            raise ValueError(f"config target keys must be {sorted(TARGET_KEYS)}")
        c = Config(**d)
        if c.architecture != "dflash2":
            raise ValueError("architecture must be dflash2")
        if c.hidden_size != c.target["hidden_size"]:
            raise ValueError("hidden_size must equal target.hidden_size")
        if c.num_heads % c.num_kv_heads or c.hidden_size % c.conv_group_size:
            raise ValueError("num_heads % num_kv_heads and hidden_size % conv_group_size must be 0")
        if not all(0 <= l < c.target["num_layers"] for l in c.target_layers):
            raise ValueError("target_layers out of range")
        return c

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in sorted(CONFIG_KEYS)}

    @property
    def groups(self) -> int:
        return self.hidden_size // self.conv_group_size

    @property
    def vocab_size(self) -> int:
        return self.target["vocab_size"]


def load_config(path) -> Config:
    with open(path) as f:
        return Config.from_dict(json.load(f))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    """HF rotate_half over the whole head_dim. x [..., n, heads, D], pos [..., n] integer."""
    D = x.shape[-1]
    half = D // 2
    # float64 angles: positions reach thousands, f32 angles would cost the plugin check digits.
    inv = theta ** (-(torch.arange(half, dtype=torch.float64, device=x.device) * 2.0 / D))
    ang = pos.to(torch.float64).unsqueeze(-1) * inv  # [..., n, half]
    cos = ang.cos().to(x.dtype).unsqueeze(-2)
    sin = ang.sin().to(x.dtype).unsqueeze(-2)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Norm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))


class DynConv(nn.Module):
    """Grouped causal kernel-2 conv over the block rows; base=[1,0], proj=0 is the identity."""

    def __init__(self, d, group_size):
        super().__init__()
        self.group_size = group_size
        g = d // group_size
        self.base = nn.Parameter(torch.tensor([[1.0, 0.0]]).repeat(g, 1))
        self.proj = nn.Linear(d, 2 * g, bias=False)
        nn.init.zeros_(self.proj.weight)

    def forward(self, u):  # u [..., B, d]
        w = self.base + self.proj(u).unflatten(-1, (-1, 2))  # [..., B, G, 2]
        w0 = w[..., 0].repeat_interleave(self.group_size, dim=-1)
        w1 = w[..., 1].repeat_interleave(self.group_size, dim=-1)
        prev = F.pad(u, (0, 0, 1, 0))[..., :-1, :]  # u_{k-1}, u_{-1} = 0
        return w0 * u + w1 * prev


class Layer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        d, H, Hkv, D, Fd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size
        self.input_norm = Norm(d)
        self.conv_attn = DynConv(d, c.conv_group_size)
        self.q_proj = nn.Linear(d, H * D, bias=False)
        self.k_proj = nn.Linear(d, Hkv * D, bias=False)
        self.v_proj = nn.Linear(d, Hkv * D, bias=False)
        self.o_proj = nn.Linear(H * D, d, bias=False)
        self.post_norm = Norm(d)
        self.conv_mlp = DynConv(d, c.conv_group_size)
        self.gate_proj = nn.Linear(d, Fd, bias=False)
        self.up_proj = nn.Linear(d, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, d, bias=False)


class Selector(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.codebook = nn.Parameter(torch.randn(c.vocab_size, c.selector_rank) * 0.02)
        self.proj = nn.Linear(c.hidden_size, c.selector_rank, bias=False)
        nn.init.zeros_(self.proj.weight)  # zero: the selector starts as plain argmax


class DFlash2(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.cfg = c
        d = c.hidden_size
        self.fc = nn.Linear(len(c.target_layers) * d, d, bias=False)
        self.hidden_norm = Norm(d)
        self.mask_embedding = nn.Parameter(torch.randn(d) * 0.02)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_layers))
        self.norm = Norm(d)
        self.selector = Selector(c)
        std = 0.02
        for layer in self.layers:
            for lin in (layer.q_proj, layer.k_proj, layer.v_proj, layer.gate_proj, layer.up_proj):
                nn.init.normal_(lin.weight, std=std)
            for lin in (layer.o_proj, layer.down_proj):  # residual branches start small
                nn.init.normal_(lin.weight, std=std / math.sqrt(2 * c.num_layers))
        nn.init.normal_(self.fc.weight, std=1.0 / math.sqrt(self.fc.in_features))

    # ---- context pre-pass -------------------------------------------------------------
    def context(self, taps):
        """taps [..., n, T*d] (concatenated in target_layers order) -> c [..., n, d]."""
        return rms_norm(self.fc(taps), self.hidden_norm.weight, self.cfg.rms_norm_eps)

    def context_kv(self, c, pos):
        """Per layer (K [..., n, Hkv, D] roped at pos, V). No input_norm: c is normed."""
        cf = self.cfg
        out = []
        for L in self.layers:
            k = L.k_proj(c).unflatten(-1, (cf.num_kv_heads, cf.head_dim))
            v = L.v_proj(c).unflatten(-1, (cf.num_kv_heads, cf.head_dim))
            out.append((rope(k, pos, cf.rope_theta), v))
        return out

    # ---- training path ----------------------------------------------------------------
    def block_z(self, emb_anchor, P, ctx_kv, ctx_pos, ctx_valid):
        """Blocks for A anchors per sequence, each seeing only its own window of the context.

        emb_anchor [S, A, d]; P [S, A]; ctx_kv from context_kv over [S, n]; ctx_pos [S, n];
        ctx_valid [S, n] (padding off). Returns z = rms_norm(h, norm) [S, A, B, d].
        """
        cf = self.cfg
        B, H, Hkv, D = cf.block_size, cf.num_heads, cf.num_kv_heads, cf.head_dim
        Sq, A, d = emb_anchor.shape
        h = self.mask_embedding.expand(Sq, A, B, d).clone()
        h[:, :, 0] = emb_anchor
        qpos = P.unsqueeze(-1) + torch.arange(B, device=P.device)  # [S, A, B]
        p = ctx_pos.unsqueeze(1)  # [S, 1, n]
        Pq = P.unsqueeze(-1)
        seen = ctx_valid.unsqueeze(1) & (p < Pq) & (p >= Pq - cf.context_window)  # [S, A, n]
        neg = torch.zeros(seen.shape, dtype=h.dtype, device=h.device).masked_fill(~seen, float("-inf"))
        rep = H // Hkv
        for L, (kc, vc) in zip(self.layers, ctx_kv):
            u = L.conv_attn(rms_norm(h, L.input_norm.weight, cf.rms_norm_eps))
            q = rope(L.q_proj(u).unflatten(-1, (H, D)), qpos, cf.rope_theta)  # [S,A,B,H,D]
            kb = rope(L.k_proj(u).unflatten(-1, (Hkv, D)), qpos, cf.rope_theta)
            vb = L.v_proj(u).unflatten(-1, (Hkv, D))
            qg = q.unflatten(-2, (Hkv, rep))  # [S,A,B,Hkv,rep,D]; head h -> kv head h // rep
            sc = torch.einsum("sabgrd,sngd->sagrbn", qg, kc) + neg[:, :, None, None, None, :]
            sb = torch.einsum("sabgrd,sacgd->sagrbc", qg, kb)  # own block, bidirectional
            att = torch.cat([sc, sb], dim=-1).mul(1.0 / math.sqrt(D)).softmax(-1)
            n = kc.shape[1]
            o = torch.einsum("sagrbn,sngd->sabgrd", att[..., :n], vc)
            o = o + torch.einsum("sagrbc,sacgd->sabgrd", att[..., n:], vb)
            h = h + L.o_proj(o.flatten(-3))
            u = L.conv_mlp(rms_norm(h, L.post_norm.weight, cf.rms_norm_eps))
            h = h + L.down_proj(F.silu(L.gate_proj(u)) * L.up_proj(u))
        return rms_norm(h, self.norm.weight, cf.rms_norm_eps)

    # ---- inference path ---------------------------------------------------------------
    @torch.no_grad()
    def draft(self, embedding, head, taps, ctx_pos, anchor, P, m=None, return_z=False):
        """One block as the plugin runs it. taps [n, T*d] for committed tokens at ctx_pos [n];
        embedding / head [V, d]. Returns (logits [B-1, V], drafts [m] int64)."""
        cf = self.cfg
        B, H, Hkv, D = cf.block_size, cf.num_heads, cf.num_kv_heads, cf.head_dim
        keep = (ctx_pos < P) & (ctx_pos >= P - cf.context_window)
        pos = ctx_pos[keep]
        ctx = self.context_kv(self.context(taps[keep]), pos)
        h = torch.cat([embedding[anchor][None], self.mask_embedding.expand(B - 1, -1)], dim=0)
        qpos = P + torch.arange(B, device=h.device)
        kvh = torch.arange(H, device=h.device) // (H // Hkv)
        for L, (kc, vc) in zip(self.layers, ctx):
            u = L.conv_attn(rms_norm(h, L.input_norm.weight, cf.rms_norm_eps))
            q = rope(L.q_proj(u).view(B, H, D), qpos, cf.rope_theta)
            k = torch.cat([kc, rope(L.k_proj(u).view(B, Hkv, D), qpos, cf.rope_theta)], dim=0)
            v = torch.cat([vc, L.v_proj(u).view(B, Hkv, D)], dim=0)
            s = torch.einsum("bhd,nhd->hbn", q, k[:, kvh]) / math.sqrt(D)
            o = torch.einsum("hbn,nhd->bhd", s.softmax(-1), v[:, kvh])
            h = h + L.o_proj(o.reshape(B, H * D))
            u = L.conv_mlp(rms_norm(h, L.post_norm.weight, cf.rms_norm_eps))
            h = h + L.down_proj(F.silu(L.gate_proj(u)) * L.up_proj(u))
        z = rms_norm(h[1:], self.norm.weight, cf.rms_norm_eps)
        logits = z @ head.T
        drafts = self.select(logits, z, int(anchor), m)
        return (logits, drafts, z) if return_z else (logits, drafts)

    @torch.no_grad()
    def select(self, logits, z, anchor, m=None, margins=None):
        """margins: a list to receive, per slot, the gap between the best and second score."""
        cf = self.cfg
        m = logits.shape[0] if m is None else m
        cb = self.selector.codebook
        prev, out = anchor, []
        for k in range(m):
            K = cf.selector_top_k
            top = logits[k].topk(min(K + 1, logits.shape[-1]))
            if K < logits.shape[-1] and top.values[K - 1] == top.values[K]:
                # a tie at the boundary: stable descending sort keeps the lower ids first
                cand = torch.sort(logits[k], descending=True, stable=True).indices[:K]
            else:  # the top-K set is unique; its order does not matter (sorted by id below)
                cand = top.indices[:K]
            cand = cand.sort().values  # argmax takes the first max: ascending ids = lower id wins
            g = self.selector.proj(z[k])
            score = logits[k][cand] + (cb[cand] * (cb[prev] * g)).sum(-1)
            prev = int(cand[int(score.argmax())])
            if margins is not None:
                top2 = score.topk(2).values
                margins.append(float(top2[0] - top2[1]))
            out.append(prev)
        return torch.tensor(out, dtype=torch.int64)


    @torch.no_grad()
    def select_batch(self, logits, z, anchor):
        """select() for many blocks at once, on their device: logits [A, m, V], z [A, m, d],
        anchor [A] (ids). Returns [A, m] int64, equal to select() row by row (a row whose
        top-K boundary is tied anywhere is handed to select() itself)."""
        K = self.cfg.selector_top_k
        A, m, V = logits.shape
        cb = self.selector.codebook
        g = self.selector.proj(z)  # [A, m, r]
        if K < V:
            top = logits.topk(K + 1, dim=-1)
            tied = (top.values[..., K - 1] == top.values[..., K]).any(-1)  # [A]
            cand = top.indices[..., :K].sort(dim=-1).values  # [A, m, K]
        else:
            tied = torch.zeros(A, dtype=torch.bool, device=logits.device)
            cand = torch.arange(V, device=logits.device).expand(A, m, V)
        prev, out = anchor, []
        for k in range(m):
            c = cand[:, k]  # [A, K]
            score = logits[:, k].gather(1, c) + (cb[c] * (cb[prev] * g[:, k])[:, None]).sum(-1)
            prev = c.gather(1, score.argmax(-1, keepdim=True))[:, 0]  # first max, as select()
            out.append(prev)
        sel = torch.stack(out, dim=1)
        for a in tied.nonzero()[:, 0].tolist():
            sel[a] = self.select(logits[a], z[a], int(anchor[a])).to(sel.device)
        return sel


# ---- training loss -----------------------------------------------------------------------
def position_weights(B, gamma, device=None):
    return torch.exp(-torch.arange(B - 1, device=device, dtype=torch.float32) / gamma)


def _chunk_loss(z, gsel, tgt, prev, valid, w, head, codebook, top_k):
    """Weighted CE and selector CE sums over rows of one chunk (recomputed on backward)."""
    logits = z @ head.T  # [r, V]
    ce = F.cross_entropy(logits, tgt.clamp_min(0), reduction="none")
    cand = logits.detach().topk(top_k, dim=-1).indices  # [r, K]
    cand = torch.cat([cand, tgt.clamp_min(0)[:, None]], dim=-1)  # true token appended last
    dup = cand[:, :-1] == cand[:, -1:]
    score = logits.gather(1, cand) + torch.einsum("rkq,rq->rk", codebook[cand], codebook[prev] * gsel)
    score = torch.cat([score[:, :-1].masked_fill(dup, float("-inf")), score[:, -1:]], dim=-1)
    sel = F.cross_entropy(score, torch.full_like(tgt, top_k), reduction="none")
    vf = valid.float()
    return (ce * w * vf).sum(), (sel * vf).sum()


def training_loss(model, embedding, head, taps, tokens, ctx_valid, anchors, gamma=4.0, chunk=1024, ckpt=True):
    """taps [S, n, T*d], tokens [S, n] (ids, -1 = padding), ctx_valid [S, n], anchors [S, A]
    (anchor positions; every anchor's token is real). Positions are 0..n-1. ckpt recomputes
    each chunk's logits on backward instead of keeping them (memory for time).

    Returns (loss, stats). loss = sum_k w_k CE_k / sum_k w_k + mean selector CE, both averaged
    over the valid (anchor, k) pairs: the normalisation ARCHITECTURE.md leaves open. stats
    ("ce", "sel", "pairs") are detached 0-d tensors on the loss's device: reading them
    (float(), .item()) waits for the device, so a training loop reads them only when it logs.
    """
    cf = model.cfg
    B = cf.block_size
    S, n = tokens.shape
    dev = taps.device
    pos = torch.arange(n, device=dev).expand(S, n)
    ctx_kv = model.context_kv(model.context(taps), pos)
    emb_anchor = embedding[tokens.gather(1, anchors)]
    z = model.block_z(emb_anchor, anchors, ctx_kv, pos, ctx_valid)[:, :, 1:]  # [S, A, B-1, d]
    tpos = anchors.unsqueeze(-1) + torch.arange(B, device=dev)  # P .. P+B-1
    tok_at = tokens.gather(1, tpos.clamp_max(n - 1).flatten(1)).view_as(tpos)
    tok_at = tok_at.masked_fill(tpos >= n, -1)
    tgt, prev = tok_at[..., 1:], tok_at[..., :-1]
    valid = (tgt >= 0) & (prev >= 0)
    w = position_weights(B, gamma, dev).expand_as(tgt)
    zf, tf, pf, vf, wf = (t.reshape(-1, *t.shape[3:]) for t in (z, tgt, prev, valid, w))
    gsel = model.selector.proj(zf)
    cb = model.selector.codebook
    ce_sum = zf.new_zeros(())
    sel_sum = zf.new_zeros(())
    for i in range(0, zf.shape[0], chunk):
        sl = slice(i, i + chunk)
        args = (zf[sl], gsel[sl], tf[sl], pf[sl].clamp_min(0), vf[sl], wf[sl], head, cb, cf.selector_top_k)
        a, b = checkpoint(_chunk_loss, *args, use_reentrant=False) if ckpt else _chunk_loss(*args)
        ce_sum, sel_sum = ce_sum + a, sel_sum + b
    nvalid = vf.sum().clamp_min(1)
    wsum = (wf * vf).sum().clamp_min(1e-9)
    ce = ce_sum / wsum
    sel = sel_sum / nvalid
    return ce + sel, {"ce": ce.detach(), "sel": sel.detach(), "pairs": vf.sum().detach()}


def load_drafter(path) -> DFlash2:
    """A drafter directory (single file or HF-sharded), checked against its MANIFEST.sha256."""
    import hashlib
    import os

    from safetensors.torch import load_file
    with open(os.path.join(path, "MANIFEST.sha256")) as f:
        for line in f:
            digest, name = line.split()
            with open(os.path.join(path, name), "rb") as fh:
                if hashlib.sha256(fh.read()).hexdigest() != digest:
                    raise ValueError(f"{name}: sha256 differs from MANIFEST.sha256")
    model = DFlash2(load_config(os.path.join(path, "config.json")))
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    sd = {}
    for name in files:
        sd.update(load_file(os.path.join(path, name)))
    model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return model.eval()
