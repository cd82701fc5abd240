"""Writes tests/spec/fixtures/dflash2_tiny: a tiny random DFlash2 drafter directory plus two
cases (target embedding/head, taps, positions, anchor) with the reference's logits and drafts.

    .venv/bin/python tools/train_dflash2/make_fixture.py [OUT_DIR]

Deterministic (seeded generator, float32 throughout); reruns give byte-identical files.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash2 import Config, DFlash2  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "tests", "spec", "fixtures", "dflash2_tiny")

CONFIG = {
    "architecture": "dflash2",
    "target": {"arch": "llama", "hidden_size": 64, "vocab_size": 300, "num_layers": 3},
    "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "intermediate_size": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "target_layers": [0, 1, 2],
    "block_size": 6,
    "conv_group_size": 16,
    "selector_top_k": 8, "selector_rank": 8,
    "context_window": 24,
}

README = """# dflash2_tiny: the DFlash2 drafter's cross-check fixture

Made by `tools/train_dflash2/make_fixture.py` (the PyTorch reference
`tools/train_dflash2/dflash2.py`, float32), with exactly:

    .venv/bin/python tools/train_dflash2/make_fixture.py

A drafter directory (`config.json`, `model.safetensors` in f32, `MANIFEST.sha256` covering
every other file here) of a tiny random drafter (d=64, 2 layers, H=4, Hkv=2, D=16, F=128,
V=300, T=3 taps of a 3-layer target, B=6, conv groups of 16, selector top-k 8 / rank 8,
context window 24). The dynconv bases/projections and the selector projection are random and
large enough that removing either changes the drafts.

Cases (`case.safetensors`, `case2.safetensors`):

| tensor | type, shape | meaning |
| --- | --- | --- |
| target_embedding | f32 {V, d} | the target's token table (the anchor's row is h_0) |
| target_head | f32 {V, d} | the target's output head (differs from the embedding) |
| tap_i | f32 {n_ctx, d} | tap of target layer target_layers[i] for each context token |
| context_positions | i32 {n_ctx} | p_j of each context row (gaps allowed, ascending) |
| anchor | i32 {1} | the anchor token a |
| anchor_pos | i32 {1} | P, greater than every context position |
| expected_logits | f32 {B-1, V} | logits_k, k = 1..B-1 |
| expected_draft | i32 {B-1} | the selector's d_1..d_{B-1} |
| expected_argmax | i32 {B-1} | argmax of each logits_k (not the draft: shows the selector acts) |

`case`: context positions 0..9 and 15..39 (35 rows, a gap, more than the window), anchor at
P=45, so only 21..39 (19 rows) are in the window [P-24, P). `case2`: 12 rows at 0..5 and
8..13, a different anchor at P=16 (all rows in the window).
"""


def rand_weights(model: DFlash2, g: torch.Generator):
    # Every tensor non-trivial: a fixture that keeps dynconv at identity or the selector at
    # argmax would let a plugin that skips them pass.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".base"):
                p[:, 0] = 1.0 + 0.3 * torch.randn(p.shape[0], generator=g)
                p[:, 1] = 0.5 * torch.randn(p.shape[0], generator=g)
            elif name.endswith("conv_attn.proj.weight") or name.endswith("conv_mlp.proj.weight"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif name == "selector.proj.weight":
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name == "selector.codebook":
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
            elif name == "mask_embedding":
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # linears: unit-scale outputs
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def make_case(model, g, positions, anchor, anchor_pos, emb, head):
    c = model.cfg
    T, d = len(c.target_layers), c.hidden_size
    pos = torch.tensor(positions, dtype=torch.int64)
    taps = [torch.randn(len(positions), d, generator=g) * 3.0 for _ in range(T)]
    logits, draft, z = model.draft(emb, head, torch.cat(taps, dim=-1), pos, anchor, anchor_pos, return_z=True)
    # A plugin computing in f32 in another order must land on the same ids: refuse near-ties
    # at the top-k boundary and between the best two selector scores.
    top = logits.sort(-1, descending=True).values
    margins = []
    model.select(logits, z, anchor, margins=margins)
    if (top[:, c.selector_top_k - 1] - top[:, c.selector_top_k]).min() < 1e-2 or min(margins) < 1e-2:
        raise SystemExit(f"near-tie in a case at P={anchor_pos}; change the seed")
    t = {"target_embedding": emb, "target_head": head}
    t.update({f"tap_{i}": x for i, x in enumerate(taps)})
    t.update({
        "context_positions": pos.to(torch.int32),
        "anchor": torch.tensor([anchor], dtype=torch.int32),
        "anchor_pos": torch.tensor([anchor_pos], dtype=torch.int32),
        "expected_logits": logits.contiguous(),
        "expected_draft": draft.to(torch.int32),
        "expected_argmax": logits.argmax(-1).to(torch.int32),
    })
    return t


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(20261204)
    cfg = Config.from_dict(CONFIG)
    model = DFlash2(cfg)
    rand_weights(model, g)
    V, d = cfg.vocab_size, cfg.hidden_size
    emb = torch.randn(V, d, generator=g)
    head = 0.3 * torch.randn(V, d, generator=g)

    cases = {
        "case.safetensors": make_case(model, g, list(range(10)) + list(range(15, 40)), 123, 45, emb, head),
        "case2.safetensors": make_case(model, g, list(range(6)) + list(range(8, 14)), 7, 16, emb, head),
    }
    for name, t in cases.items():
        # The fixture must exercise the selector: some draft differs from plain argmax.
        if torch.equal(t["expected_draft"], t["expected_argmax"]):
            raise SystemExit(f"{name}: selector did not change any draft; pick other scales")
        save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out, name))

    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg.to_dict(), f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(README)
    files = sorted(x for x in os.listdir(out) if x != "MANIFEST.sha256")
    with open(os.path.join(out, "MANIFEST.sha256"), "w") as f:
        for x in files:
            f.write(f"{sha256(os.path.join(out, x))}  {x}\n")
    for name, t in cases.items():
        print(name, "draft", t["expected_draft"].tolist(), "argmax", t["expected_argmax"].tolist())


if __name__ == "__main__":
    main()
