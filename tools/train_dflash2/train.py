"""Train the DFlash2 drafter for SmolLM2-135M-Instruct on the target's own greedy responses.

    .venv/bin/python tools/train_dflash2/train.py --data tools/train_dflash2/data/train.jsonl \
        --minutes 25 --seed 0 [--device cuda] [--total-minutes M]

1. Loads the target from its GGUF (--gguf; default tandem's model store under $HOME) with
   transformers (weights dequantized to f32) on --device and computes the taps (outputs of
   target_layers, before the final norm) of every sequence once, no grad, batched, in full
   f32; they stay on that device, packed in one tensor.
2. Trains the drafter (contract's example config: 2 layers) with AdamW (linear warmup,
   cosine decay over the wall budget or --steps), grad clip 1.0; each step takes --seqs
   sequences and --anchors anchors per sequence, drawn in the response part on the device;
   the loss is dflash2.training_loss (full-vocab CE through the frozen tied head, chunked).
   Everything of a step lives on --device; the loss is read back every --log-every steps.
   Budgets: --minutes is the training loop's own; --total-minutes bounds the whole script
   (target load and taps included) and shortens the loop to fit.
3. Exports drafters/smollm2-135m-instruct-dflash2/ (or --out: bf16 shards <= 16 MiB, index,
   config, MANIFEST.sha256), the loss curve CSV and TRAINING.md. eval_offline.py adds the metrics.
"""
from __future__ import annotations

import time

T_START = time.time()  # --total-minutes counts from here (torch's import included)

import argparse
import csv
import hashlib
import json
import math
import os
import platform
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash2 import Config, DFlash2, training_loss  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where tandem's model store keeps the default model; --gguf (or $TANDEM_GGUF) names another copy.
DEFAULT_GGUF = os.environ.get("TANDEM_GGUF") or os.path.join(
    os.path.expanduser("~"), ".cache", "tandem", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
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


def load_target(device, gguf=None):
    """The target from its GGUF (transformers dequantizes it to f32; needs the gguf and
    accelerate packages), in eval mode on `device`."""
    from transformers import AutoModelForCausalLM
    gguf = os.path.abspath(gguf or DEFAULT_GGUF)
    if not os.path.isfile(gguf):
        raise SystemExit(f"{gguf}: no such GGUF (pass --gguf)")
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                             dtype=torch.float32)
    return m.to(device).eval()


class Taps:
    """The taps of many sequences packed in one [tokens, T*d] tensor on the training device;
    sequence i is flat[starts[i] : starts[i] + lens[i]]. starts / lens are host lists."""

    def __init__(self, flat, lens):
        self.flat = flat
        self.lens = list(lens)
        self.starts = [0]
        for n in self.lens[:-1]:
            self.starts.append(self.starts[-1] + n)

    def __len__(self):
        return len(self.lens)

    def __getitem__(self, i):
        return self.flat[self.starts[i]: self.starts[i] + self.lens[i]]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


@torch.no_grad()
def compute_taps(target, seqs, layers, device, tok_budget=4096, dtype=torch.float32):
    """Taps of every sequence (the concatenated outputs of `layers`, in that order), computed
    by `target` on `device` and kept there, as one packed Taps (see above)."""
    device = torch.device(device)
    base = target.model
    keep = max(layers) + 1
    saved = base.layers
    base.layers = saved[:keep]  # layers past the last tap are never needed
    grabbed = {}
    hooks = [saved[l].register_forward_hook(
        lambda mod, inp, out, l=l: grabbed.__setitem__(l, out[0] if isinstance(out, tuple) else out))
        for l in layers]
    d = base.config.hidden_size
    taps = Taps(torch.empty(sum(len(s) for s in seqs), len(layers) * d, dtype=dtype, device=device),
                [len(s) for s in seqs])
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
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
            cat = torch.cat([grabbed[l] for l in layers], dim=-1)
            for r, b in enumerate(batch):
                taps.flat[taps.starts[b]: taps.starts[b] + taps.lens[b]] = cat[r, : taps.lens[b]]
            grabbed.clear()
            i = j
    finally:
        for h in hooks:
            h.remove()
        base.layers = saved
    return taps


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
    model.fc.weight[:, t * d:(t + 1) * d] = torch.eye(d, device=model.fc.weight.device)
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


class Batcher:
    """Training batches built on the device, with no host sync: the records' tokens, starts,
    lengths and prompt lengths live on the device; the epoch order is drawn on the host (Python
    rng) and copied once per epoch; anchors are drawn on the device (torch generator).

    A batch: taps [S, n, T*d] (f32), tokens [S, n] (-1 = padding), valid [S, n], anchors [S, A]:
    per sequence A distinct positions in [len(prompt)-1, len-2] (the response part: the anchor's
    next token is a response token), repeated when the response is shorter than A."""

    def __init__(self, recs, taps, device, seed):
        self.dev = torch.device(device)
        self.taps = taps
        self.lens = taps.lens
        self.tok = torch.tensor([t for r in recs for t in r["prompt_ids"] + r["response_ids"]],
                                dtype=torch.long, device=self.dev)
        self.starts = torch.tensor(taps.starts, dtype=torch.long, device=self.dev)
        self.lens_t = torch.tensor(taps.lens, dtype=torch.long, device=self.dev)
        self.plen = torch.tensor([len(r["prompt_ids"]) for r in recs], dtype=torch.long, device=self.dev)
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(seed)
        self.rng = random.Random(seed)
        self.order, self.order_t, self.pos = [], None, 0

    def next(self, n_seqs, n_anchors):
        if self.pos + n_seqs > len(self.order):
            self.order = list(range(len(self.lens)))
            self.rng.shuffle(self.order)
            self.order_t = torch.tensor(self.order, dtype=torch.long, device=self.dev)
            self.pos = 0
        n = max(self.lens[i] for i in self.order[self.pos: self.pos + n_seqs])  # host-side lengths
        idx = self.order_t[self.pos: self.pos + n_seqs]
        self.pos += n_seqs
        st, ln, pl = self.starts[idx], self.lens_t[idx], self.plen[idx]
        ar = torch.arange(n, device=self.dev)
        valid = ar[None] < ln[:, None]
        g = torch.where(valid, st[:, None] + ar[None], st[:, None])
        taps = self.taps.flat[g].float()
        tok = torch.where(valid, self.tok[g], torch.full_like(g, -1))
        pool = (ar[None] >= pl[:, None] - 1) & (ar[None] <= ln[:, None] - 2)
        keys = torch.rand(g.shape, device=self.dev, generator=self.gen).masked_fill(~pool, 2.0)
        first = keys.argsort(dim=1)  # the pool's positions first, in random order
        j = torch.arange(n_anchors, device=self.dev)[None] % (ln - pl).clamp_min(1)[:, None]
        anchors = first.gather(1, j).sort(dim=1).values
        return taps, tok, valid, anchors


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
        os.chmod(os.path.join(out_dir, name), 0o644)  # save_file leaves 0600
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
    t_start = T_START
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "tools/train_dflash2/data/train.jsonl"),
                    help="comma-separated jsonl files from gen_data.py")
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="the target's GGUF (default: tandem's model store)")
    ap.add_argument("--minutes", type=float, default=25.0,
                    help="wall budget of the training loop alone (target load and taps not included)")
    ap.add_argument("--total-minutes", type=float, default=0.0,
                    help="budget of the whole script from its start (target load, taps, training, export): "
                         "the loop gets min(--minutes, what is left of this less ~15 s for the export)")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --minutes for the schedule)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]: the target (taps), the drafter, the "
                    "loss and the batches all live there")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=32, help="anchors per sequence per step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=float, default=0.05, help="share of the schedule")
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--chunk", type=int, default=1024, help="(anchor, k) rows per LM-head chunk of the loss")
    ap.add_argument("--ckpt", type=int, default=0,
                    help="recompute LM-head chunks on backward (1/0): memory for time")
    ap.add_argument("--tf32", type=int, default=-1,
                    help="TF32 matmuls for the drafter's training (1/0; default: on for cuda). The taps are "
                         "always computed in full f32")
    ap.add_argument("--taps-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="how the taps are kept on the device (bfloat16 halves their memory)")
    ap.add_argument("--taps-batch-tokens", type=int, default=0,
                    help="tokens per target forward when computing taps (default 4096 on cpu, 32768 on cuda)")
    ap.add_argument("--log-every", type=int, default=0,
                    help="read the loss back every N steps (a host sync; default 1 on cpu, 25 on cuda)")
    ap.add_argument("--max-seqs", type=int, default=0, help="use at most this many training sequences")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--notes", default="", help="a markdown file whose text goes into TRAINING.md's Data section "
                    "(how the data was generated: machine, backend, commands, figures)")
    ap.add_argument("--init-from-target", default="",
                    help="comma-separated target layers to start the draft layers from (e.g. 28,29); empty: random")
    ap.add_argument("--taps-cache", default="", help="a file to keep the computed taps in (reused when it matches)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if cuda and dev.index is not None:
        torch.cuda.set_device(dev)
    log_every = args.log_every or (25 if cuda else 1)
    tok_budget = args.taps_batch_tokens or (32768 if cuda else 4096)

    recs = [r for path in args.data.split(",") for r in load_jsonl(path)]
    recs = [r for r in recs if r["response_ids"]]  # an anchor needs a response token after it
    train, held = split(recs)
    if args.max_seqs:
        train = train[: args.max_seqs]
    if not train:
        raise SystemExit(f"no training sequences in {args.data}")
    cfg = Config.from_dict(CONFIG)
    t0 = time.time()
    target = load_target(dev, args.gguf)
    t_load = time.time() - t0
    emb = target.model.embed_tokens.weight.detach().float()
    head = target.get_output_embeddings().weight.detach().float()
    assert emb.data_ptr() == head.data_ptr() or torch.equal(emb, head)  # SmolLM2 ties them
    assert emb.device.type == dev.type and head.device.type == dev.type
    t0 = time.time()
    seqs = [r["prompt_ids"] + r["response_ids"] for r in train]
    tdtype = getattr(torch, args.taps_dtype)
    key = hashlib.sha256(json.dumps([seqs, cfg.target_layers, args.taps_dtype]).encode()).hexdigest()
    taps = None
    if args.taps_cache and os.path.exists(args.taps_cache):
        cached = torch.load(args.taps_cache)
        if cached.get("key") == key:
            taps = Taps(cached["flat"].to(dev), cached["lens"])
    if taps is None:
        need = sum(len(x) for x in seqs) * len(cfg.target_layers) * cfg.hidden_size * 4
        if cuda and tdtype == torch.float32 and need > 0.5 * torch.cuda.mem_get_info(dev)[0]:
            tdtype, args.taps_dtype = torch.bfloat16, "bfloat16"  # keep half the device free for training
            print(f"taps would take {need / 2**30:.1f} GiB in f32: kept as bfloat16", flush=True)
        torch.set_float32_matmul_precision("highest")
        taps = compute_taps(target, seqs, cfg.target_layers, dev, tok_budget=tok_budget, dtype=tdtype)
        if args.taps_cache:
            torch.save({"key": key, "flat": taps.flat.cpu(), "lens": taps.lens}, args.taps_cache)
    if cuda:
        torch.cuda.synchronize()
    t_taps = time.time() - t0
    ntok = len(taps.flat)
    print(f"target loaded in {t_load:.0f}s; taps: {len(train)} sequences, {ntok} tokens "
          f"({taps.flat.numel() * taps.flat.element_size() / 2**30:.2f} GiB {args.taps_dtype} on {dev}) "
          f"in {t_taps:.0f}s", flush=True)
    model = DFlash2(cfg).to(dev)
    if args.init_from_target:
        init_from_target(model, target, [int(x) for x in args.init_from_target.split(",")])
    del target
    if cuda:
        torch.cuda.empty_cache()
    tf32 = cuda if args.tf32 < 0 else bool(args.tf32)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), **({"fused": True} if cuda else {}))
    batches = Batcher(train, taps, dev, args.seed)
    os.makedirs(args.out, exist_ok=True)
    curve_path = os.path.join(args.out, "loss_curve.csv")
    budget = args.minutes * 60
    if args.total_minutes:
        left = args.total_minutes * 60 - (time.time() - t_start) - 15
        if left < budget:
            budget = max(left, 5.0)
            print(f"training loop budget {budget:.0f}s (what --total-minutes {args.total_minutes} leaves)", flush=True)
    step = 0
    rows = []
    pending = []  # per step: host-side (step, elapsed, lr) and a device tensor of its stats
    shown, show_s = [0.0], (10.0 if cuda else 0.0)  # print a curve row at most every show_s

    def flush(w):
        if not pending:
            return
        vals = torch.stack([p[3] for p in pending]).tolist()  # the one host sync per log_every steps
        for (s_, el_, lr_, _), (lo, ce, sel, pairs) in zip(pending, vals):
            row = [s_, round(el_, 2), f"{lr_:.3e}", f"{lo:.4f}", f"{ce:.4f}", f"{sel:.4f}", int(pairs)]
            w.writerow(row)
            rows.append(row)
        pending.clear()
        if time.time() - shown[0] >= show_s:
            shown[0] = time.time()
            print("step", *rows[-1][:6], flush=True)

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
            tp, tok, valid, anchors = batches.next(args.seqs, args.anchors)
            loss, st = training_loss(model, emb, head, tp, tok, valid, anchors, gamma=args.gamma,
                                     chunk=args.chunk, ckpt=bool(args.ckpt))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            pending.append((step, el, lr, torch.stack([loss.detach(), st["ce"], st["sel"], st["pairs"]])))
            if step % log_every == 0:
                flush(w)
        flush(w)
    if cuda:
        torch.cuda.synchronize()
    t_train = time.time() - t_train
    last = rows[-max(1, len(rows) // 20):]
    final = sum(float(r[3]) for r in last) / len(last)
    export(model, args.out)
    write_training_md(args, train, held, ntok, t_load, t_taps, t_train, time.time() - t_start, rows)
    write_manifest(args.out)
    peak = f", peak device memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else ""
    print(f"done: {step} steps of {args.seqs}x{args.anchors} anchors, {t_train:.0f}s training loop, "
          f"final loss (mean of last {len(last)} steps) {final:.3f}, {len(train)} sequences, {ntok} tokens"
          f"{peak}; whole script {time.time() - t_start:.0f}s; exported to {args.out}")


def write_training_md(args, train, held, ntok, t_load, t_taps, t_train, t_all, rows):
    def avg(rs, k):
        return sum(float(r[k]) for r in rs) / max(1, len(rs))
    n = max(1, len(rows) // 20)
    first, last = rows[:n], rows[-n:]
    tasks = {}
    for r in train:
        tasks[r["task"]] = tasks.get(r["task"], 0) + 1
    resp = sum(len(r["response_ids"]) for r in train)
    cuda = args.device.startswith("cuda")
    gpu = torch.cuda.get_device_name() if cuda else "no GPU used"
    cmd = "python tools/train_dflash2/train.py " + " ".join(sys.argv[1:])
    notes = ""
    if args.notes:
        with open(args.notes) as f:
            notes = f.read().rstrip() + "\n"
    else:
        notes = ("- Responses generated by `tandem serve` (pipelines/default.yaml); "
                 "see tools/train_dflash2/README.md.\n")
    tf32 = cuda if args.tf32 < 0 else bool(args.tf32)
    text = f"""# smollm2-135m-instruct-dflash2: how it was trained

A DFlash2 drafter (plugins/dflash2/ARCHITECTURE.md) for SmolLM2-135M-Instruct (the Q4_1 GGUF
tandem serves). Trained by `tools/train_dflash2/train.py` on the target's own greedy outputs.

## Data
- Prompts: `tools/train_dflash2/gen_data.py`, templated tasks written in that script (counting,
  JSON arrays of objects, short Python functions, stories / short prose whose subjects are
  words from this repository's markdown). The four bench prompts are held out exactly.
- Responses: SmolLM2-135M-Instruct's own greedy output (temperature 0), generated by
  `tandem serve`; ids are the ones tandem produced (each streamed chunk's bytes, or where a
  chunk is not one token the logprobs' bytes, mapped onto the GGUF vocabulary). SmolLM2 is
  Apache-2.0; its weights only generated this data.
{notes}- Training sequences: {len(train)} ({', '.join(f'{k} {v}' for k, v in sorted(tasks.items()))}),
  {ntok} tokens, {resp} of them response tokens. Held out for eval: {len(held)} sequences
  (every prompt whose sha256 is 0 mod 20).

## Run
- Command: `{cmd}` (seed {args.seed}, device {args.device}, {args.threads} CPU threads).
- Machine: {platform.machine()}, {os.cpu_count()} cores, {gpu};
  torch {torch.__version__}.
- Taps: target loaded from the GGUF by transformers (Q4_1 dequantized to f32) in {t_load:.0f} s,
  taps of layers {CONFIG['target_layers']} (outputs before the final norm) computed on
  {args.device} in full f32 and kept there as {args.taps_dtype}, {t_taps:.0f} s.
- Training: {len(rows)} steps of {args.seqs} sequences x {args.anchors} anchors (block 8, so
  up to {args.seqs * args.anchors * 7} (anchor, k) pairs per step), AdamW lr {args.lr} betas
  (0.9, 0.95) wd 0.01 on matrices, warmup {args.warmup:.0%} then cosine to 0 over
  {'the step count' if args.steps else f'the wall budget of the loop ({t_train:.0f} s)'}, clip 1.0, gamma {args.gamma};
  f32 weights, {'TF32' if tf32 else 'f32'} matmuls.
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
