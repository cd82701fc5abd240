#!/usr/bin/env python3
"""The speculative-decoding table of bench/peers/gpu.sh spec: tandem against llama.cpp's n-gram
drafters on the same requests, GGUF and machine, batch 1.

    python3 bench/peers/spec_table.py OUT_DIR

Reads OUT_DIR/spec_tandem.jsonl (bench_spec's JSON lines; bench_spec.txt if absent) and
OUT_DIR/llama_spec.jsonl (bench/peers/spec_peer.py's summary lines) and prints, per task:
llama.cpp without a drafter, llama.cpp's best n-gram drafter (its speed-up against its own
no-drafter run, its acceptance), tandem's none / ngram / suffix / dflash2, and tandem's best
over llama.cpp's best (each engine's best of what it ran on that task, no drafter included;
llama.cpp's n-gram drafters count only where they drafted). Then every llama.cpp drafter.
"""
import json
import pathlib
import sys

TANDEM = ("none", "ngram", "suffix", "dflash2")


def json_lines(path):
    out = []
    p = pathlib.Path(path)
    if not p.exists():
        return out
    for line in p.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def main(out):
    out = pathlib.Path(out)
    src = out / "spec_tandem.jsonl"
    if not src.exists():
        src = out / "bench_spec.txt"
    tandem = {(r["task"], r["drafter"]): r for r in json_lines(src) if r.get("batch") == 1 and "drafter" in r}
    llama = [r for r in json_lines(out / "llama_spec.jsonl") if r.get("bench") == "llama_spec_summary"]
    tasks = []
    for r in [*tandem.values(), *llama]:
        if r["task"] not in tasks:
            tasks.append(r["task"])
    if not tasks:
        sys.exit(f"spec_table: no bench_spec or spec_peer figures in {out}")

    fmt = lambda v: f"{v:,.0f}" if v else "-"
    print("Batch 1, greedy, tok/s (medians over rounds; speed-up: the median of each round's ratio to the same "
          "engine's no-drafter run; acceptance: accepted / drafted tokens)\n")
    head = ["task", "llama.cpp none", "llama.cpp n-gram, best", "its speed-up", "its acceptance",
            *(f"tandem {d}" for d in TANDEM), "none: tandem / llama.cpp", "best: tandem / llama.cpp",
            "tokens: llama.cpp / tandem"]
    print("| " + " | ".join(head) + " |")
    print("| --- " * len(head) + "|")
    for task in tasks:
        mine = [r for r in llama if r["task"] == task]
        l_none = next((r for r in mine if r["config"] == "none"), None)
        # Only drafters that drafted: one that never did re-measures no drafter, and the best
        # of several such would pick noise.
        l_ngram = max((r for r in mine if r["config"] != "none" and r["draft_n"]), key=lambda r: r["tok_s"], default=None)
        l_best = max((r for r in (l_none, l_ngram) if r), key=lambda r: r["tok_s"], default=None)
        cells = [task, fmt(l_none and l_none["tok_s"])]
        if l_ngram:
            acc = f"{l_ngram['acceptance']:.0%} ({l_ngram['draft_accepted']}/{l_ngram['draft_n']})" \
                if l_ngram["draft_n"] else "no drafts"
            cells += [f"{l_ngram['tok_s']:,.0f} ({l_ngram['config']})", f"{l_ngram['speedup']:.2f}x", acc]
        else:
            cells += ["no drafts" if mine else "-", "-", "-"]
        t_best = None
        for d in TANDEM:
            r = tandem.get((task, d))
            if not r:
                cells.append("-")
                continue
            extra = f" ({r['speedup']:.2f}x, {r['accepted'] / r['draft_tokens']:.0%})" if d != "none" and r["draft_tokens"] \
                else (f" ({r['speedup']:.2f}x)" if d != "none" else "")
            cells.append(f"{r['decode_tok_s']:,.0f}{extra}")
            if not t_best or r["decode_tok_s"] > t_best["decode_tok_s"]:
                t_best = r
        t_none = tandem.get((task, "none"))
        cells.append(f"{t_none['decode_tok_s'] / l_none['tok_s']:.2f}" if t_none and l_none else "-")
        cells.append(f"**{t_best['decode_tok_s'] / l_best['tok_s']:.2f}** ({t_best['drafter']} / {l_best['config']})"
                     if t_best and l_best else "-")
        # bench_spec's tokens: every round's, less each request's first (it came with the prefill)
        t_tokens = t_none and t_none["tokens"] / t_none["rounds"] + 1
        cells.append(f"{l_none['tokens']:.0f} / {t_tokens:.0f}" if l_none and t_tokens else "-")
        print("| " + " | ".join(cells) + " |")

    tok = next((r for r in json_lines(out / "llama_spec.jsonl") if r.get("bench") == "llama_spec_tokenization"), None)
    if tok:
        differ = [t for t, same in tok["same_as_tandem"].items() if not same]
        print("\nBoth engines got bench_spec's prompt token ids; llama.cpp's own tokenizer gives the same ids for the "
              "prompt texts: " + ("yes, every task" if not differ else "no for " + ", ".join(differ)))
    if llama:
        print("\nllama.cpp's drafters (llama-server --spec-type, one slot; bench/peers/spec_peer.py):\n")
        print("| task | drafter | llama-server arguments | tok/s | speed-up | accepted / drafted | tokens | output = no drafter's |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in llama:
            acc = f"{r['draft_accepted']}/{r['draft_n']} ({r['acceptance']:.0%})" if r["draft_n"] else "-"
            same = "yes" if r["identical"] else f"no, from token {r['first_difference']}"
            print(f"| {r['task']} | {r['config']} | `{r['args'] or '-'}` | {r['tok_s']:,.0f} | {r['speedup']:.2f}x | {acc} | "
                  f"{r['tokens']:.0f} | {same} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: spec_table.py OUT_DIR")
    main(sys.argv[1])
