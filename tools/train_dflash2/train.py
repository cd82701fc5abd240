"""Train the DFlash2 drafter for SmolLM2-135M-Instruct on the target's own greedy responses.

    .venv/bin/python tools/train_dflash2/train.py --data tools/train_dflash2/data/train.jsonl \
        --minutes 25 --seed 0 [--device cuda]

1. Loads the target from its GGUF with transformers (weights dequantized to f32) and computes
   the taps (outputs of target_layers, before the final norm) of every sequence once, no grad,
   batched, kept in RAM.
2. Trains the drafter (contract's example config: 2 layers) with AdamW (lr 6e-4, linear warmup,
   cosine decay over the wall budget or --steps), grad clip 1.0; each step takes --seqs
   sequences and --anchors anchors per sequence, drawn in the response part; the loss is
   dflash2.training_loss (full-vocab CE through the frozen tied head, chunked).
3. Exports drafters/smollm2-135m-instruct-dflash2/ (bf16 shards <= 16 MiB, index, config,
   MANIFEST.sha256), the loss curve CSV and TRAINING.md. eval_offline.py adds the metrics.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import platform
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash2 import Config, DFlash2, training_loss  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GGUF_DIR = "/root/.cache/tandem/models/smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_DIR = os.path.join(ROOT, "drafters", "smollm2-135m-instruct-dflash2")
SHARD_BYTES = 16 * 1024 * 1024

CONFIG = {
    "architecture": "dflash2",
    "target": {"arch": "llama", "hidden_size": 576, "vocab_size": 49152, "num_layers": 30},
    "hidden_size": 576, "num_layers": 2, "num_heads": 9, "num_kv_heads": 3, "head_dim": 64,
    "intermediate_size": 1536, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
    "target_layers": [1, 8, 14, 20, 27],
    "block_size": 8,
    "conv_group_size": 16,
    "selector_top_k": 16, "selector_rank": 64,
    "context_window": 2048,
}


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f]


def split(recs, every=20):
    """Deterministic held-out split: every `every`-th prompt (by a hash of its text)."""
    def held(r):
        return int(hashlib.sha256(r["prompt"].encode()).hexdigest(), 16) % every == 0
    return [r for r in recs if not held(r)], [r for r in recs if held(r)]


def load_target(device):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(GGUF_DIR, gguf_file=GGUF_FILE, dtype=torch.float32)
    return m.to(device).eval()


@torch.no_grad()
def compute_taps(target, seqs, layers, device, tok_budget=4096):
    """Per sequence: f32 [len, T*d] on the CPU, the concatenated outputs of `layers`."""
    base = target.model
    keep = max(layers) + 1
    saved = base.layers
    base.layers = saved[:keep]  # layers past the last tap are never needed
    grabbed = {}
    hooks = [saved[l].register_forward_hook(
        lambda mod, inp, out, l=l: grabbed.__setitem__(l, out[0] if isinstance(out, tuple) else out))
        for l in layers]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    out = [None] * len(seqs)
    i = 0
    try:
        while i < len(order):
            n = len(seqs[order[i]])
            j = i
            while j < len(order) and (j - i + 1) * len(seqs[order[j]]) <= max(tok_budget, n):
                j += 1
            batch = order[i:j]
            L = max(len(seqs[b]) for b in batch)
            ids = torch.zeros(len(batch), L, dtype=torch.long)
            att = torch.zeros(len(batch), L, dtype=torch.long)
            for r, b in enumerate(batch):  # right padding: real tokens keep positions 0..len-1
                ids[r, : len(seqs[b])] = torch.tensor(seqs[b])
                att[r, : len(seqs[b])] = 1
            base(input_ids=ids.to(device), attention_mask=att.to(device), use_cache=False)
            cat = torch.cat([grabbed[l] for l in layers], dim=-1).float().cpu()
            for r, b in enumerate(batch):
                out[b] = cat[r, : len(seqs[b])].clone()
            i = j
    finally:
        for h in hooks:
            h.remove()
        base.layers = saved
    return out


@torch.no_grad()
def init_from_target(model, target, layers):
    """Starts draft layer i as a copy of target layer layers[i] (same shapes: the drafter has
    the target's width and head layout) and the context path as that first layer's own input:
    fc picks the tap just below it (identity on that slice, zero elsewhere) and hidden_norm is
    its input norm, so at step 0 the first draft layer's context keys and values are the
    target's own. The final norm is the target's. Why: a 2-layer drafter trained for minutes
    on a CPU learns far more from the target's late layers than from noise."""
    cfg = model.cfg
    if len(layers) != cfg.num_layers:
        raise SystemExit(f"--init-from-target names {len(layers)} layers, the drafter has {cfg.num_layers}")
    below = layers[0] - 1
    if below not in cfg.target_layers:
        raise SystemExit(f"--init-from-target: layer {below} (below {layers[0]}) is not a tap {cfg.target_layers}")
    t = cfg.target_layers.index(below)
    d = cfg.hidden_size
    model.fc.weight.zero_()
    model.fc.weight[:, t * d:(t + 1) * d] = torch.eye(d)
    tl = target.model.layers
    model.hidden_norm.weight.copy_(tl[layers[0]].input_layernorm.weight)
    for L, i in zip(model.layers, layers):
        src = tl[i]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(L, name).weight.copy_(getattr(src.self_attn, name).weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(L, name).weight.copy_(getattr(src.mlp, name).weight)
        L.input_norm.weight.copy_(src.input_layernorm.weight)
        L.post_norm.weight.copy_(src.post_attention_layernorm.weight)
    model.norm.weight.copy_(target.model.norm.weight)


def make_batch(items, taps, n_anchors, B, rng, device):
    """items: records with prompt_ids/response_ids; anchors P in [len(prompt)-1, len-2]."""
    seqs = [r["prompt_ids"] + r["response_ids"] for r in items]
    n = max(len(s) for s in seqs)
    S = len(seqs)
    tok = torch.full((S, n), -1, dtype=torch.long)
    tp = torch.zeros(S, n, taps[0].shape[-1])
    anchors = torch.zeros(S, n_anchors, dtype=torch.long)
    for i, (s, t, r) in enumerate(zip(seqs, taps, items)):
        tok[i, : len(s)] = torch.tensor(s)
        tp[i, : len(s)] = t
        lo, hi = len(r["prompt_ids"]) - 1, len(s) - 2
        pool = list(range(lo, hi + 1))
        pick = rng.sample(pool, n_anchors) if len(pool) >= n_anchors else [rng.choice(pool) for _ in range(n_anchors)]
        anchors[i] = torch.tensor(sorted(pick))
    return tp.to(device), tok.to(device), (tok >= 0).to(device), anchors.to(device)


def lr_at(frac, base, warm):
    if frac < warm:
        return base * frac / warm
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, (frac - warm) / (1 - warm))))


def export(model, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    from safetensors.torch import save_file
    for f in os.listdir(out_dir):
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".json")):
            os.remove(os.path.join(out_dir, f))
    sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.state_dict().items()}
    shards, cur, size = [], {}, 0
    for k in sorted(sd):
        nb = sd[k].numel() * 2
        if cur and size + nb > SHARD_BYTES - 65536:  # leave room for the header
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = sd[k]
        size += nb
    shards.append(cur)
    wmap = {}
    for i, sh in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, os.path.join(out_dir, name), metadata={"format": "pt"})
        assert os.path.getsize(os.path.join(out_dir, name)) <= SHARD_BYTES
        wmap.update({k: name for k in sh})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 2 for v in sd.values())},
                   "weight_map": wmap}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.cfg.to_dict(), f, indent=2)
        f.write("\n")


def write_manifest(out_dir):
    lines = []
    for f in sorted(os.listdir(out_dir)):
        if f == "MANIFEST.sha256" or not os.path.isfile(os.path.join(out_dir, f)):
            continue
        with open(os.path.join(out_dir, f), "rb") as fh:
            lines.append(f"{hashlib.sha256(fh.read()).hexdigest()}  {f}\n")
    with open(os.path.join(out_dir, "MANIFEST.sha256"), "w") as f:
        f.writelines(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "tools/train_dflash2/data/train.jsonl"))
    ap.add_argument("--minutes", type=float, default=25.0, help="wall budget of the training loop")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --minutes for the schedule)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=32, help="anchors per sequence per step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=float, default=0.05, help="share of the schedule")
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--ckpt", type=int, default=-1,
                    help="recompute LM-head chunks on backward (1/0; default: on for cuda, off for cpu)")
    ap.add_argument("--max-seqs", type=int, default=0, help="use at most this many training sequences")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--init-from-target", default="",
                    help="comma-separated target layers to start the draft layers from (e.g. 28,29); empty: random")
    ap.add_argument("--taps-cache", default="", help="a file to keep the computed taps in (reused when it matches)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    dev = torch.device(args.device)
    ckpt = dev.type == "cuda" if args.ckpt < 0 else bool(args.ckpt)
    t_start = time.time()

    recs = [r for path in args.data.split(",") for r in load_jsonl(path)]
    train, held = split(recs)
    if args.max_seqs:
        train = train[: args.max_seqs]
    cfg = Config.from_dict(CONFIG)
    target = load_target(dev)
    emb = target.model.embed_tokens.weight.detach().float()
    head = target.get_output_embeddings().weight.detach().float()
    assert emb.data_ptr() == head.data_ptr() or torch.equal(emb, head)  # SmolLM2 ties them
    t0 = time.time()
    seqs = [r["prompt_ids"] + r["response_ids"] for r in train]
    key = hashlib.sha256(json.dumps([seqs, cfg.target_layers]).encode()).hexdigest()
    taps = None
    if args.taps_cache and os.path.exists(args.taps_cache):
        cached = torch.load(args.taps_cache)
        taps = cached["taps"] if cached.get("key") == key else None
    if taps is None:
        taps = compute_taps(target, seqs, cfg.target_layers, dev)
        if args.taps_cache:
            torch.save({"key": key, "taps": taps}, args.taps_cache)
    t_taps = time.time() - t0
    ntok = sum(len(t) for t in taps)
    print(f"taps: {len(train)} sequences, {ntok} tokens in {t_taps:.0f}s", flush=True)
    model = DFlash2(cfg).to(dev)
    if args.init_from_target:
        init_from_target(model, target, [int(x) for x in args.init_from_target.split(",")])
    del target
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    os.makedirs(args.out, exist_ok=True)
    curve_path = os.path.join(args.out, "loss_curve.csv")
    budget = args.minutes * 60
    order = []
    step = 0
    rows = []
    t_train = time.time()
    with open(curve_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "elapsed_s", "lr", "loss", "ce", "sel", "pairs"])
        while True:
            el = time.time() - t_train
            frac = step / args.steps if args.steps else el / budget
            if frac >= 1.0:
                break
            lr = lr_at(frac, args.lr, args.warmup)
            for g in opt.param_groups:
                g["lr"] = lr
            if len(order) < args.seqs:
                order = list(range(len(train)))
                rng.shuffle(order)
            idx, order = order[: args.seqs], order[args.seqs:]
            tp, tok, valid, anchors = make_batch([train[i] for i in idx], [taps[i] for i in idx],
                                                 args.anchors, cfg.block_size, rng, dev)
            loss, st = training_loss(model, emb, head, tp, tok, valid, anchors, gamma=args.gamma, ckpt=ckpt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            row = [step, round(time.time() - t_train, 1), f"{lr:.3e}", f"{loss.item():.4f}",
                   f"{st['ce']:.4f}", f"{st['sel']:.4f}", st["pairs"]]
            w.writerow(row)
            f.flush()
            rows.append(row)
            if step % 10 == 1:
                print("step", *row[:6], flush=True)
    t_train = time.time() - t_train
    export(model, args.out)
    write_training_md(args, train, held, ntok, t_taps, t_train, time.time() - t_start, rows)
    write_manifest(args.out)
    print(f"done: {step} steps, {t_train:.0f}s training, exported to {args.out}")


def write_training_md(args, train, held, ntok, t_taps, t_train, t_all, rows):
    def avg(rs, k):
        return sum(float(r[k]) for r in rs) / max(1, len(rs))
    n = max(1, len(rows) // 20)
    first, last = rows[:n], rows[-n:]
    tasks = {}
    for r in train:
        tasks[r["task"]] = tasks.get(r["task"], 0) + 1
    resp = sum(len(r["response_ids"]) for r in train)
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "no GPU used"
    cmd = "nice -n 10 .venv/bin/python tools/train_dflash2/train.py " + " ".join(sys.argv[1:])
    text = f"""# smollm2-135m-instruct-dflash2: how it was trained

A DFlash2 drafter (plugins/dflash2/ARCHITECTURE.md) for SmolLM2-135M-Instruct (the Q4_1 GGUF
tandem serves). Trained by `tools/train_dflash2/train.py` on the target's own greedy outputs.

## Data
- Prompts: `tools/train_dflash2/gen_data.py`, templated tasks written in that script (counting,
  JSON arrays of objects, short Python functions, stories / short prose whose subjects are
  words from this repository's markdown). The four bench prompts are held out exactly.
- Responses: SmolLM2-135M-Instruct's own greedy output (temperature 0, max_tokens 256),
  generated by `tandem serve` (CPU, pipelines/default.yaml) on this machine; ids are the ones
  tandem produced (logprob bytes mapped onto the GGUF vocabulary). SmolLM2 is Apache-2.0;
  its weights only generated this data.
- Training sequences: {len(train)} ({', '.join(f'{k} {v}' for k, v in sorted(tasks.items()))}),
  {ntok} tokens, {resp} of them response tokens. Held out for eval: {len(held)} sequences
  (every prompt whose sha256 is 0 mod 20).

## Run
- Command: `{cmd}` (seed {args.seed}, device {args.device}, {args.threads} threads).
- Machine: {platform.machine()}, {os.cpu_count()} cores, {gpu};
  torch {torch.__version__}.
- Taps: target loaded from the GGUF by transformers (Q4_1 dequantized to f32), taps of layers
  {CONFIG['target_layers']} (outputs before the final norm), {t_taps:.0f} s.
- Training: {len(rows)} steps of {args.seqs} sequences x {args.anchors} anchors (block 8, so
  up to {args.seqs * args.anchors * 7} (anchor, k) pairs per step), AdamW lr {args.lr} betas
  (0.9, 0.95) wd 0.01 on matrices, warmup {args.warmup:.0%} then cosine to 0 over
  {'the step count' if args.steps else f'the wall budget of {args.minutes} min'}, clip 1.0, gamma {args.gamma}.
  Training loop {t_train:.0f} s; whole script {t_all:.0f} s.
- Weights: bf16 (the contract allows f32 or bf16; backend.cpu's load_linear widens bf16 to
  f32 at load), shards of at most 16 MiB, `model.safetensors.index.json`.

## Loss (loss_curve.csv: step, elapsed_s, lr, loss, ce, sel, pairs)
| | loss | weighted CE | selector CE |
| --- | --- | --- | --- |
| first {n} steps | {avg(first, 3):.3f} | {avg(first, 4):.3f} | {avg(first, 5):.3f} |
| last {n} steps | {avg(last, 3):.3f} | {avg(last, 4):.3f} | {avg(last, 5):.3f} |

## Offline metrics
<!-- eval_offline.py writes below this line -->
"""
    with open(os.path.join(args.out, "TRAINING.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
