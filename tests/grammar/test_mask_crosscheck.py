"""tandem's grammar masks (grammar_mask_dump, built on xgrammar's C++ core from the pinned
sdist) equal the xgrammar package's from PyPI, position by position, on a schema corpus.

The vocabulary is a byte-level one made here: every single byte, JSON punctuation runs, words
and digits, random printable strings, two control tokens (empty bytes) and ids past the
tokenizer's end; the walked token sequences are each schema's valid documents tokenized
greedily (longest match), so every position of a real output is compared.
"""
import json
import os
import random
import subprocess

import pytest
import torch
import xgrammar as xgr

from schema_corpus import CORPUS

DUMP = os.environ.get("TANDEM_GRAMMAR_MASK_DUMP")


def _vocab():
    rng = random.Random(17)
    toks = [b""]  # 0: a control token (the stop token)
    toks += [bytes([b]) for b in range(256)]
    toks += [s.encode() for s in ['{"', '":', '",', '"}', '},', '":"', '"]', '[{', '}]', "true", "false",
                                  "null", "name", "age", "id", "tags", "items", " the", "ing", "00", "12", "3.5",
                                  "-1", "e+", "\\n", "\\\"", "\\u00", "é", "\u2713"]]
    alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789{}[]":,. -_'
    while len(toks) < 1200:
        t = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6))).encode()
        if t not in toks:
            toks.append(t)
    toks.append(b"")  # another control token
    return toks


def _greedy_tokens(text, vocab):
    by_bytes = {t: i for i, t in enumerate(vocab) if t}
    data, out, i = text.encode(), [], 0
    while i < len(data):
        for n in range(min(8, len(data) - i), 0, -1):
            if data[i:i + n] in by_bytes:
                out.append(by_bytes[data[i:i + n]])
                i += n
                break
    return out


def _python_masks(compiler, schema, tokens, vocab_size):
    if schema is None:
        schema = {"type": "object"}
    g = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"),
                                     strict_mode=True)
    m = xgr.GrammarMatcher(g)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    masks = []

    def dump():
        bitmask.fill_(0)
        m.fill_next_token_bitmask(bitmask, 0)
        masks.append([int(w) & 0xFFFFFFFF for w in bitmask[0].tolist()])

    dump()
    for t in tokens:
        if not m.accept_token(t) or m.is_terminated():
            break
        dump()
    return masks


@pytest.mark.skipif(not DUMP, reason="TANDEM_GRAMMAR_MASK_DUMP is not set (meson sets it)")
def test_masks_equal_xgrammar_pypi():
    vocab = _vocab()
    vocab_size = len(vocab) + 37  # the model's vocabulary is wider than the tokenizer's
    stop = [0]
    cases = []
    for schema, docs in CORPUS:
        for doc in docs:
            cases.append({"schema": schema, "tokens": _greedy_tokens(json.dumps(doc, separators=(",", ":")),
                                                                     vocab) + stop})
    req = {"vocab": [t.hex() for t in vocab], "vocab_size": vocab_size, "stop_ids": stop, "cases": cases}
    out = subprocess.run([DUMP], input=json.dumps(req), capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout)["masks"]
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=stop)
    compiler = xgr.GrammarCompiler(info)
    compared = 0
    for case, mine in zip(cases, ours):
        theirs = _python_masks(compiler, case["schema"], case["tokens"], vocab_size)
        # Every token of a valid document is accepted: one mask per token.
        assert len(theirs) == len(case["tokens"]), case
        assert len(mine) == len(theirs), case
        for pos, (a, b) in enumerate(zip(mine, theirs)):
            assert a == b, f"masks differ at position {pos} of {case}"
            compared += 1
    assert compared > 200
