"""Teacher-forced acceptance of a DFlash2 drafter on held-out greedy sequences.

For every anchor P in a response (P from the last prompt token up to the last position whose
B-1 following tokens exist), the drafter sees the target's taps of positions < P and drafts
d_1..d_{B-1}; accepted = the number of leading drafts equal to the true greedy tokens.
tau = 1 + mean accepted (the verify step's bonus token included). Reported with the selector
(the contract's draft) and with plain argmax, per task, on the held-out split of the training
data and on the four bench prompts' greedy responses.

    .venv/bin/python tools/train_dflash2/eval_offline.py --write
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash2 import load_drafter  # noqa: E402
from train import DEFAULT_GGUF, OUT_DIR, ROOT, compute_taps, load_jsonl, load_target, split, write_manifest  # noqa: E402

MARK = "<!-- eval_offline.py writes below this line -->"


@torch.no_grad()
def accept_counts(model, emb, head, rec, taps, chunk=64):
    """(selector accepted, argmax accepted), one int each per anchor. On taps' device; the
    selector is DFlash2.select_batch (equal to select(), the contract's draft)."""
    B = model.cfg.block_size
    dev = taps.device
    seq = rec["prompt_ids"] + rec["response_ids"]
    n = len(seq)
    tok = torch.tensor(seq, device=dev)
    Ps = list(range(len(rec["prompt_ids"]) - 1, n - B + 1))
    if not Ps:
        return [], []
    pos = torch.arange(n, device=dev)[None]
    kv = model.context_kv(model.context(taps[None].float()), pos)
    valid = torch.ones(1, n, dtype=torch.bool, device=dev)
    ks = torch.arange(1, B, device=dev)
    sel, arg = [], []
    for i in range(0, len(Ps), chunk):
        P = torch.tensor(Ps[i:i + chunk], device=dev)
        z = model.block_z(emb[tok[P]][None], P[None], kv, pos, valid)[0, :, 1:]  # [A, B-1, d]
        logits = z @ head.T  # [A, B-1, V]
        true = tok[P[:, None] + ks]  # [A, B-1]
        for out, d in ((sel, model.select_batch(logits, z, tok[P])), (arg, logits.argmax(-1))):
            out.append((d == true).long().cumprod(-1).sum(-1))
    return torch.cat(sel).tolist(), torch.cat(arg).tolist()


def walk(counts):
    """The anchors a greedy verify loop drafting B-1 tokens every step visits: the first one
    at the last prompt token, each next one just past the accepted run and the verify's own
    token. Their accepted counts, whose mean + 1 is the engine's tau at k = B-1 (teacher
    forcing weighs every position alike, and so overstates tau where hard tokens cluster:
    the engine spends its verifies there)."""
    out, i = [], 0
    while i < len(counts):
        out.append(counts[i])
        i += counts[i] + 1
    return out


def summarize(counts, B):
    t = torch.tensor(counts, dtype=torch.float64)
    per_pos = [float((t >= k).double().mean()) for k in range(1, B)]
    return 1.0 + float(t.mean()), per_pos, len(counts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", default=OUT_DIR)
    ap.add_argument("--data", default=os.path.join(ROOT, "tools/train_dflash2/data/train.jsonl"),
                    help="comma-separated jsonl files, as train.py's --data (their held-out split)")
    ap.add_argument("--bench", default=os.path.join(ROOT, "tools/train_dflash2/data/bench.jsonl"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda: target (taps) and drafter")
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="the target's GGUF (as train.py)")
    ap.add_argument("--max-held", type=int, default=0,
                    help="evaluate at most this many held-out sequences (the first by sha256 of the prompt; 0: all)")
    ap.add_argument("--chunk", type=int, default=64, help="anchors per drafter forward")
    ap.add_argument("--write", action="store_true", help="write the figures into the drafter's TRAINING.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    model = load_drafter(args.drafter).to(dev)
    B = model.cfg.block_size
    _, held = split([r for path in args.data.split(",") for r in load_jsonl(path) if r["response_ids"]])
    if args.max_held and len(held) > args.max_held:
        held = sorted(held, key=lambda r: hashlib.sha256(r["prompt"].encode()).hexdigest())[: args.max_held]
    bench = load_jsonl(args.bench)
    target = load_target(dev, args.gguf)
    emb = target.model.embed_tokens.weight.detach().float()
    head = target.get_output_embeddings().weight.detach().float()
    sets = {"held-out": held, "bench": bench}
    lines = ["| set | task | sequences | anchors | tau (selector) | tau (argmax) | tau (walk, selector) | "
             "per-position acceptance, selector (k=1..%d) |" % (B - 1), "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for sname, recs in sets.items():
        if not recs:
            continue
        taps = compute_taps(target, [r["prompt_ids"] + r["response_ids"] for r in recs], model.cfg.target_layers, dev)
        by_task = {}
        for r, t in zip(recs, taps):
            s, a = accept_counts(model, emb, head, r, t, chunk=args.chunk)
            d = by_task.setdefault(r["task"], ([], [], 0, []))
            by_task[r["task"]] = (d[0] + s, d[1] + a, d[2] + 1, d[3] + walk(s))
        all_s = [x for v in by_task.values() for x in v[0]]
        all_a = [x for v in by_task.values() for x in v[1]]
        all_w = [x for v in by_task.values() for x in v[3]]
        rows = sorted(by_task.items()) + [("all", (all_s, all_a, len(recs), all_w))]
        for task, (s, a, nseq, w) in rows:
            tau_s, pp, na = summarize(s, B)
            tau_a, _, _ = summarize(a, B)
            tau_w = 1.0 + sum(w) / max(len(w), 1)
            line = (f"| {sname} | {task} | {nseq} | {na} | {tau_s:.2f} | {tau_a:.2f} | {tau_w:.2f} | "
                    + " ".join(f"{p:.2f}" for p in pp) + " |")
            lines.append(line)
            print(line, flush=True)
    text = ("Teacher-forced (`tools/train_dflash2/eval_offline.py --write`): every anchor of each "
            "response whose B-1 next tokens exist; tau = 1 + mean leading drafts equal to the "
            "target's greedy tokens (tandem's own output). Taps from the transformers f32 "
            "dequantization of the Q4_1 GGUF, as in training. Bench = the four held-out bench "
            "prompts, one sequence each.\n\n" + "\n".join(lines) + "\n")
    if args.write:
        path = os.path.join(args.drafter, "TRAINING.md")
        with open(path) as f:
            head_md = f.read().split(MARK)[0]
        with open(path, "w") as f:
            f.write(head_md + MARK + "\n" + text)
        write_manifest(args.drafter)


if __name__ == "__main__":
    main()
