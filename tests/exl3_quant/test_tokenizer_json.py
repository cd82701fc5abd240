"""The tokenizer.json that `tandem quantize --to exl3` writes tokenizes like tandem (pytest, suite 'e2e').

    TANDEM_BIN=build/cli/tandem python -m pytest tests/exl3_quant/test_tokenizer_json.py

A tiny llama GGUF with the default model's vocabulary ($TANDEM_TEST_MODEL; a byte-level
vocabulary with a few merges when that file is absent) is quantized with
tools/fixtures/make_tiny_llama.py + `tandem quantize`. Then, for a few hundred strings
(license lines and paragraphs, README paragraphs, code, numbers, Unicode, whitespace runs, contractions and
the vocabulary's special tokens inside text), Hugging Face `tokenizers` loading the written
tokenizer.json must give exactly the ids of tandem's tokenizer on the source GGUF (POST
/tokenize of `tandem serve` with weights.gguf), and of tandem reading the written directory
(weights.exl3). Needs tokenizers (pinned in tools/requirements-exl3-quant.txt).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
TANDEM = os.environ.get("TANDEM_BIN", str(ROOT / "build/cli/tandem"))


def corpus(special):
    texts = []
    for f in [Path("/usr/share/common-licenses/Apache-2.0"), ROOT / "LICENSE", ROOT / "README.md"]:
        if f.exists():
            paras = [p for p in re.split(r"\n\s*\n", f.read_text(errors="replace")) if p.strip()]
            texts += paras[:90]
    gpl = Path("/usr/share/common-licenses/GPL-3")
    if gpl.exists():  # single lines: leading indentation, short fragments
        texts += [l for l in gpl.read_text().splitlines() if l.strip()][:150]
    texts += [
        "Hello, world!", "hello world", " leading space", "trailing space ", "  two  spaces  ", "\ttab\tseparated",
        "line one\nline two\r\nline three", "\n\n\n", " ", "", "a", "Z", "123", "1234567890", "3.14159 2.71828",
        "-42 +17 1e-9 0x1F 1,000,000", "Version 0.22.1 (2026-10-01)", "don't won't I'll we've they're it's O'Neil",
        "ALL CAPS SHOUTING", "camelCaseIdentifier snake_case_name kebab-case-name",
        "def f(x):\n    return x ** 2  # square", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "<html><body class=\"x\">Hi &amp; bye</body></html>", "https://example.com/path?q=1&r=two#frag",
        "naïve café résumé Übermaß", "日本語のテキスト", "中文分词测试", "한국어 문장", "Ελληνικά κείμενο",
        "русский текст", "عربى", "emoji 🙂🚀👍🏽 family 👨‍👩‍👧", "math ∑∫√∞ ≤ ≥ ≠", "tabs\tand\u00a0nbsp",
        "zero\u200bwidth", "mixed123abc456", "....!!!???", "—–-", "«quotes» “curly” ‘single’",
        "The quick brown fox jumps over the lazy dog.", "What is 2+2?", "x" * 300, "ab " * 100,
    ]
    for s in special[:12]:
        texts += [f"{s}", f"before {s} after", f"{s}user\nWhat is 2+2?{s}\n", f"no{s}space"]
    return texts


def serve(args):
    p = subprocess.Popen([TANDEM, "serve", "--port", "0", "--set", "backend.plugin=backend.cpu", *args], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"serving on (http://\S+)", line)
    if not m:
        p.kill()
        raise RuntimeError("tandem serve did not start: " + line + p.communicate()[1][-3000:])
    return p, m.group(1)


def tokenize(url, text):
    req = urllib.request.Request(url + "/tokenize", data=json.dumps({"prompt": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["tokens"]


@pytest.fixture(scope="module")
def quantized():
    tmp = tempfile.mkdtemp(prefix="tandem_tokjson_")
    gguf_path = os.path.join(tmp, "tiny.gguf")
    cmd = [sys.executable, str(ROOT / "tools/fixtures/make_tiny_llama.py"), gguf_path, "--layers", "1", "--ffn", "128"]
    model = os.environ.get("TANDEM_TEST_MODEL", "")
    if model and os.path.exists(model):
        cmd += ["--vocab-from", model]
    subprocess.run(cmd, check=True)
    out = os.path.join(tmp, "q")
    r = subprocess.run([TANDEM, "quantize", "--to", "exl3", "--bits", "2", "--head-bits", "16", "--no-progress",
                        "--out", out, gguf_path], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return gguf_path, out


def test_hf_tokenizers_match_tandem(quantized):
    gguf_path, out = quantized
    hf = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    tj = json.loads(Path(out, "tokenizer.json").read_text())
    special = [t["content"] for t in tj["added_tokens"] if t["special"]]
    texts = corpus(special)
    assert len(texts) >= 200
    add_bos = json.loads(Path(out, "tokenizer_config.json").read_text()).get("add_bos_token", False)
    bos = hf.token_to_id(json.loads(Path(out, "tokenizer_config.json").read_text()).get("bos_token", "")) \
        if add_bos else None
    servers = []
    try:
        servers.append(serve(["--pipeline", "pipelines/cpu.yaml", "--model", gguf_path]))
        servers.append(serve(["--model", out]))
        mismatches = []
        for text in texts:
            want = hf.encode(text, add_special_tokens=False).ids
            for (_, url), what in zip(servers, ["tandem on the GGUF", "tandem on the EXL3 directory"]):
                got = tokenize(url, text)
                if bos is not None and got[:1] == [bos]:
                    got = got[1:]
                if got != want:
                    mismatches.append(f"{what}: {text[:60]!r}: tandem {got[:20]} hf {want[:20]}")
        print(f"{len(texts)} strings, {sum(len(hf.encode(t, add_special_tokens=False).ids) for t in texts)} tokens, "
              f"{len(special)} special tokens, tokenizers {tokenizers.__version__}")
        assert not mismatches, "\n".join(mismatches[:20])
        # Round trip through HF's decoder, for text without special tokens.
        for text in texts:
            if not any(s in text for s in special):
                assert hf.decode(hf.encode(text, add_special_tokens=False).ids) == text
    finally:
        for p, _ in servers:
            p.terminate()
            p.communicate(timeout=60)
