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
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash2 import load_drafter  # noqa: E402
from train import OUT_DIR, ROOT, compute_taps, load_jsonl, load_target, split, write_manifest  # noqa: E402

MARK = "<!-- eval_offline.py writes below this line -->"


@torch.no_grad()
def accept_counts(model, emb, head, rec, taps, chunk=64):
    """(selector accepted, argmax accepted), one int each per anchor."""
    B = model.cfg.block_size
    seq = rec["prompt_ids"] + rec["response_ids"]
    n = len(seq)
    tok = torch.tensor(seq)
    Ps = list(range(len(rec["prompt_ids"]) - 1, n - B + 1))
    pos = torch.arange(n)[None]
    kv = model.context_kv(model.context(taps[None]), pos)
    valid = torch.ones(1, n, dtype=torch.bool)
    sel, arg = [], []
    for i in range(0, len(Ps), chunk):
        P = torch.tensor(Ps[i:i + chunk])[None]
        z = model.block_z(emb[tok[P]], P, kv, pos, valid)[0, :, 1:]  # [A, B-1, d]
        for a in range(z.shape[0]):
            logits = z[a] @ head.T
            true = tok[P[0, a] + 1: P[0, a] + B]
            for out, d in ((sel, model.select(logits, z[a], int(tok[P[0, a]]))), (arg, logits.argmax(-1))):
                ok = (d == true).long()
                out.append(int(ok.cumprod(0).sum()))
    return sel, arg


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
    ap.add_argument("--write", action="store_true", help="write the figures into the drafter's TRAINING.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_drafter(args.drafter)
    B = model.cfg.block_size
    _, held = split([r for path in args.data.split(",") for r in load_jsonl(path)])
    bench = load_jsonl(args.bench)
    target = load_target("cpu")
    emb = target.model.embed_tokens.weight.detach().float()
    head = target.get_output_embeddings().weight.detach().float()
    sets = {"held-out": held, "bench": bench}
    lines = ["| set | task | sequences | anchors | tau (selector) | tau (argmax) | "
             "per-position acceptance, selector (k=1..%d) |" % (B - 1), "| --- | --- | --- | --- | --- | --- | --- |"]
    for sname, recs in sets.items():
        if not recs:
            continue
        taps = compute_taps(target, [r["prompt_ids"] + r["response_ids"] for r in recs], model.cfg.target_layers, "cpu")
        by_task = {}
        for r, t in zip(recs, taps):
            s, a = accept_counts(model, emb, head, r, t)
            d = by_task.setdefault(r["task"], ([], [], 0))
            by_task[r["task"]] = (d[0] + s, d[1] + a, d[2] + 1)
        all_s = [x for v in by_task.values() for x in v[0]]
        all_a = [x for v in by_task.values() for x in v[1]]
        rows = sorted(by_task.items()) + [("all", (all_s, all_a, len(recs)))]
        for task, (s, a, nseq) in rows:
            tau_s, pp, na = summarize(s, B)
            tau_a, _, _ = summarize(a, B)
            line = (f"| {sname} | {task} | {nseq} | {na} | {tau_s:.2f} | {tau_a:.2f} | "
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
