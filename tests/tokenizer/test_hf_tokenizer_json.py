"""tokenizer.json pre-tokenizers as tandem maps them (hf_common) against Hugging Face
`tokenizers` (pytest, suite 'unit'; skips without tokenizers in the venv).

    TANDEM_HF_ENCODE=build/tests/tokenizer/tokenizer_hf_encode python -m pytest tests/tokenizer/test_hf_tokenizer_json.py

For each pre-tokenizer family in hf_tokenizers_ref.KINDS a byte-level BPE is trained here;
then ~2,500 random strings of tricky pieces (contractions in every case, digit runs in
several scripts, every kind of space and line break, CJK, emoji sequences, special and
added tokens) and the fixed corpus are encoded by `tokenizers` and by tandem
(tokenizer_hf_encode: hf_common's reader + tandem::tokenizer). Ids must be identical and
tandem's decode must give the text back. Unsupported tokenizer.json features must be
rejected with an error naming tokenizer.json. tests/fixtures/glm_moe_dsa/tiny's tokenizer.json
is compared the same way when that fixture exists.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_tokenizers_ref as ref  # noqa: E402

TOOL = os.environ.get("TANDEM_HF_ENCODE", "build/tests/tokenizer/tokenizer_hf_encode")


def tandem(dir_, texts):
    r = subprocess.run([TOOL, str(dir_)], input=json.dumps({"texts": texts}), capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return json.loads(r.stdout)


@pytest.mark.parametrize("kind", ref.KINDS)
def test_ids_match_tokenizers(kind, tmp_path):
    tok = ref.build(kind)
    eog = ref.write_dir(tok, tmp_path)
    texts = ref.texts()
    got = tandem(tmp_path, texts)
    want_pre = {"glm4": "glm4", "gpt2": "gpt2", "smollm": "smollm"}.get(kind, "hf")
    assert got["pre"] == want_pre
    assert set(eog) <= set(got["eog"])
    mismatches = []
    n_tokens = 0
    for text, ids, dec in zip(texts, got["ids"], got["decoded"]):
        want = tok.encode(text, add_special_tokens=False).ids
        n_tokens += len(want)
        if ids != want:
            mismatches.append(f"{text!r}: tandem {ids[:24]} hf {want[:24]}")
        if dec != text:
            mismatches.append(f"{text!r}: tandem decodes to {dec!r}")
        elif tok.decode(want, skip_special_tokens=False) != text:
            mismatches.append(f"{text!r}: hf decodes to {tok.decode(want, skip_special_tokens=False)!r}")
    print(f"{kind}: {len(texts)} strings, {n_tokens} tokens, tokenizers {tokenizers.__version__}")
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:20])


def _mutations():
    """(name, change to the tokenizer.json dict, text the error must contain)."""
    def model(**kw):
        return lambda j: j["model"].update(kw)

    def pre(p):
        return lambda j: j.__setitem__("pre_tokenizer", p)

    split = lambda **kw: {"type": "Split", "pattern": {"Regex": ref.GLM4}, "behavior": "Isolated", "invert": False, **kw}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return [
        ("unigram", lambda j: j.__setitem__("model", {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0]]}),
         'model.type is not "BPE"'),
        ("wordpiece", lambda j: j.__setitem__("model", {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}),
         'model.type is not "BPE"'),
        ("nfc", lambda j: j.__setitem__("normalizer", {"type": "NFC"}), "normalizer"),
        ("lowercase", lambda j: j.__setitem__("normalizer", {"type": "Lowercase"}), "normalizer"),
        ("removed", pre({"type": "Sequence", "pretokenizers": [split(behavior="Removed"), bl]}), "behavior"),
        ("invert", pre({"type": "Sequence", "pretokenizers": [split(invert=True), bl]}), "invert"),
        ("metaspace", pre({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}),
         "not supported"),
        ("whitespace", pre({"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, bl]}), "not supported"),
        ("no byte level", pre({"type": "Sequence", "pretokenizers": [split()]}), "no ByteLevel"),
        ("split after byte level", pre({"type": "Sequence", "pretokenizers": [bl, split()]}), "after ByteLevel"),
        ("prefix space", pre(dict(bl, add_prefix_space=True)), "add_prefix_space"),
        ("ignore merges", model(ignore_merges=True), "ignore_merges"),
        ("byte fallback", model(byte_fallback=True), "byte_fallback"),
        ("dropout", model(dropout=0.1), "dropout"),
        ("suffix", model(end_of_word_suffix="</w>"), "end_of_word_suffix"),
        ("lstrip", lambda j: j["added_tokens"][0].update(lstrip=True), "lstrip"),
        ("decoder", lambda j: j.__setitem__("decoder", {"type": "WordPiece", "prefix": "##", "cleanup": True}),
         "decoder"),
    ]


@pytest.mark.parametrize("name,change,expect", _mutations(), ids=[m[0] for m in _mutations()])
def test_unsupported_is_an_error(name, change, expect, tmp_path):
    tok = ref.build("glm4", vocab_size=400)
    ref.write_dir(tok, tmp_path)
    j = json.loads((tmp_path / "tokenizer.json").read_text())
    change(j)
    (tmp_path / "tokenizer.json").write_text(json.dumps(j))
    with pytest.raises(RuntimeError) as e:
        tandem(tmp_path, ["x"])
    msg = str(e.value)
    assert "tokenizer.json" in msg and expect in msg, msg


def test_glm_fixture():
    """tests/fixtures/glm_moe_dsa/tiny's own tokenizer.json (GLM's pre-tokenizer), when present."""
    d = Path(os.environ.get("TANDEM_FIXTURES", "tests/fixtures")) / "glm_moe_dsa" / "tiny"
    if not (d / "tokenizer.json").exists():
        pytest.skip(f"{d} does not exist")
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = ref.texts()
    got = tandem(d, texts)
    assert got["pre"] == "glm4"
    bad = [f"{t!r}: tandem {i[:24]} hf {tok.encode(t, add_special_tokens=False).ids[:24]}"
           for t, i in zip(texts, got["ids"]) if i != tok.encode(t, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad[:20])
    assert got["decoded"] == texts
