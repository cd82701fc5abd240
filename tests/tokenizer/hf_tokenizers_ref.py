#!/usr/bin/env python3
"""Small Hugging Face tokenizers with the pre-tokenizers tandem maps from tokenizer.json
(hf_common/hf_tokenizer.hpp), and tricky strings to encode with them. Used by
test_hf_tokenizer_json.py (live comparison with `tokenizers`) and to write the committed
fixture tests/tokenizer/hf_glm/ that tokenizer_hf_glm_test.cpp reads:

    .venv/bin/python tests/tokenizer/hf_tokenizers_ref.py tests/tokenizer/hf_glm

Pinned: tokenizers==0.22.1 (the project venv). Each tokenizer is a byte-level BPE trained
here on the strings below (so merges cover digits, CJK, emoji, contractions and space runs),
with the pre-tokenizer of a real family:
  glm4    Sequence[Split(GLM-4's regex, Isolated), ByteLevel(use_regex=false)] (GLM-4 / GLM-5)
  gpt2    ByteLevel(use_regex=true)
  smollm  Sequence[Digits(individual_digits=true), ByteLevel(use_regex=true)]
  chain   Sequence[Split(\\p{N}{1,3}), Split(CJK runs), Split(Llama-3's regex), ByteLevel(false)]
          (DeepSeek-V3's shape)
  qwen2   Sequence[Split(Qwen2's regex), ByteLevel(false)]
  digits  Sequence[Digits(individual_digits=false), Split(String "--"), ByteLevel(true)]
"""
import json
import random
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

GLM4 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CJK = r"[一-龥\u3040-ゟ゠-ヿ]+"

GLM_SPECIAL = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
               "<|assistant|>", "<|observation|>"]
GLM_ADDED = ["<think>", "</think>"]  # added, not special

# Pieces random strings are made of: contractions in every case (and with the long s and
# the Kelvin sign, which case-fold to s / k), digit runs of every length and script, every
# kind of space and line break, letters with and without marks, CJK, emoji with modifiers
# and joiners, punctuation runs, special tokens.
PIECES = [
    "'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL", "'d", "'D",
    "'\u017f", "'\u212a", "'x", "'", "’s",
    "0", "12", "123", "4567", "1234567890", "١٢٣", "²³", "Ⅻ", "٣", "९८",
    " ", "  ", "   ", "\n", "\n\n", "\r\n", "\r", "\t", "\u000b", "\u000c", "\u00a0", "\u3000", "\u2028",
    "\u0085", "\u180e", "\u200b", "\u2009",
    "hello", "Hello", "WORLD", "don", "ÜBER", "naïve", "e\u0301", "İstanbul", "ǅ", "ß", "ﬁ", "x",
    "日本語", "中文", "ひらがな", "カタカナ", "한국어", "Ελληνικά", "русский", "عربى", "हिन्दी",
    "🙂", "🚀", "👍🏽", "👨‍👩‍👧", "🇩🇪", "∑∫", "≤",
    "!", "!!", "...", "?", "-", "--", "_", "#", "$", "\"", "(", ")", "{", "}", "<", ">", "/", "\\", "@", "—",
]
FIXED = [
    "", " ", "a", "Hello, world!", "hello world", " leading space", "trailing space ", "  two  spaces  ",
    "\ttab\tseparated", "line one\nline two\r\nline three", "\n\n\n", "  \n  \n", "x  \n", "3.14159 2.71828",
    "-42 +17 1e-9 0x1F 1,000,000", "1234567890123", "Version 0.22.1 (2026-10-01)",
    "don't won't I'll we've they're it's O'Neil", "DON'T WON'T I'LL WE'VE THEY'RE IT'S", "I'M HE'D",
    "ALL CAPS SHOUTING", "camelCaseIdentifier snake_case_name kebab-case-name",
    "def f(x):\n    return x ** 2  # square", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body class=\"x\">Hi &amp; bye</body></html>", "https://example.com/path?q=1&r=two#frag",
    "naïve café résumé Übermaß", "日本語のテキスト", "中文分词测试123", "한국어 문장", "Ελληνικά κείμενο",
    "русский текст", "emoji 🙂🚀👍🏽 family 👨‍👩‍👧", "math ∑∫√∞ ≤ ≥ ≠", "tabs\tand\u00a0nbsp",
    "zero\u200bwidth", "mixed123abc456", "....!!!???", "—–-", "«quotes» “curly” ‘single’", "x" * 300,
    "ab " * 100, "  \u3000 x\u2028y\u0085z", "a\u180eb", "[gMASK]<sop><|user|>\nWhat is 2+2?<|assistant|>",
    "<think>reasoning</think>answer<|endoftext|>", "no<|user|>space", "<|user", "'S's'", "x'll'LL",
]


def texts(n_random=2500, seed=1234):
    rng = random.Random(seed)
    out = list(FIXED)
    for _ in range(n_random):
        out.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))))
    return out


def _pre(kind):
    bl = lambda use_regex: pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=use_regex)
    split = lambda p: pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
    if kind == "glm4":
        return pre_tokenizers.Sequence([split(GLM4), bl(False)])
    if kind == "gpt2":
        return bl(True)
    if kind == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl(True)])
    if kind == "chain":
        return pre_tokenizers.Sequence([split(r"\p{N}{1,3}"), split(CJK), split(LLAMA3), bl(False)])
    if kind == "qwen2":
        return pre_tokenizers.Sequence([split(QWEN2), bl(False)])
    if kind == "digits":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                        pre_tokenizers.Split("--", behavior="isolated"), bl(True)])
    raise ValueError(kind)


KINDS = ["glm4", "gpt2", "smollm", "chain", "qwen2", "digits"]


def build(kind, vocab_size=1200):
    """A trained byte-level BPE with `kind`'s pre-tokenizer; GLM's special tokens."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = _pre(kind)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=GLM_SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = texts(3000, seed=99) + FIXED * 5  # fixed seeds: the same tokenizer every run
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in GLM_ADDED])
    return tok


def write_dir(tok, out, pad=16):
    """tokenizer.json, tokenizer_config.json and config.json (GLM-style ids) into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
        "chat_template": "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"},
        indent=1))
    eog = [tok.token_to_id(t) for t in ["<|endoftext|>", "<|user|>", "<|observation|>"]]
    (out / "config.json").write_text(json.dumps({"vocab_size": tok.get_vocab_size() + pad, "eos_token_id": eog}))
    return eog


def main():
    out = Path(sys.argv[1])
    tok = build("glm4", vocab_size=800)
    eog = write_dir(tok, out)
    cases = texts(400, seed=7)
    ids = [tok.encode(t, add_special_tokens=False).ids for t in cases]
    import tokenizers
    (out / "cases.json").write_text(json.dumps({
        "about": "ids from Hugging Face tokenizers " + tokenizers.__version__ +
                 " for tokenizer.json here (tests/tokenizer/hf_tokenizers_ref.py)",
        "eog": eog, "cases": [{"text": t, "ids": i} for t, i in zip(cases, ids)]}, ensure_ascii=False, indent=0))


if __name__ == "__main__":
    main()
