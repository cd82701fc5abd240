"""Self-test of the DFlash2 reference (not in the meson suite: it needs torch, which
tools/requirements-dev.txt does not install). Run:

    .venv/bin/python -m pytest -q tools/train_dflash2/test_dflash2.py
"""
from __future__ import annotations

import hashlib
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash2 import Config, DFlash2, DynConv, load_config, training_loss  # noqa: E402
from make_fixture import CONFIG, rand_weights  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "spec", "fixtures", "dflash2_tiny")
torch.set_num_threads(2)


def tiny(seed=1):
    g = torch.Generator().manual_seed(seed)
    m = DFlash2(Config.from_dict(CONFIG))
    rand_weights(m, g)
    V, d = m.cfg.vocab_size, m.cfg.hidden_size
    return m, torch.randn(V, d, generator=g), 0.3 * torch.randn(V, d, generator=g), g


def test_dynconv_identity_at_init():
    conv = DynConv(64, 16)
    u = torch.randn(3, 6, 64)
    assert torch.equal(conv(u), u)


def test_selector_argmax_at_init():
    m = DFlash2(Config.from_dict(CONFIG))  # selector.proj starts at zero
    logits = torch.randn(5, m.cfg.vocab_size)
    z = torch.randn(5, m.cfg.hidden_size)
    assert torch.equal(m.select(logits, z, 3), logits.argmax(-1))


def test_selector_tie_takes_lower_id():
    m = DFlash2(Config.from_dict(CONFIG))
    logits = torch.zeros(1, m.cfg.vocab_size)
    logits[0, [40, 9, 200]] = 1.0
    assert m.select(logits, torch.zeros(1, m.cfg.hidden_size), 0).tolist() == [9]


def test_training_mask_equals_inference_path():
    m, emb, head, g = tiny()
    n = 40  # longer than context_window (24): the window matters for the late anchors
    taps = torch.randn(1, n, 3 * 64, generator=g)
    tokens = torch.randint(0, m.cfg.vocab_size, (1, n), generator=g)
    anchors = torch.tensor([[0, 5, 17, 30, 39]])
    pos = torch.arange(n)[None]
    with torch.no_grad():
        kv = m.context_kv(m.context(taps), pos)
        z = m.block_z(emb[tokens.gather(1, anchors)], anchors, kv, pos, torch.ones(1, n, dtype=torch.bool))
    for a, P in enumerate(anchors[0].tolist()):
        want, _ = m.draft(emb, head, taps[0], pos[0], int(tokens[0, P]), P)
        got = z[0, a, 1:] @ head.T
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_training_loss_backward():
    m, emb, head, g = tiny()
    n = 30
    taps = torch.randn(2, n, 3 * 64, generator=g)
    tokens = torch.randint(0, m.cfg.vocab_size, (2, n), generator=g)
    tokens[1, 25:] = -1  # padding
    valid = tokens >= 0
    anchors = torch.tensor([[3, 20, 28], [1, 10, 22]])
    loss, st = training_loss(m, emb, head, taps, tokens, valid, anchors, chunk=7)
    loss.backward()
    assert torch.isfinite(loss) and int(st["pairs"]) == 5 + 5 + 1 + 5 + 5 + 2
    for name in ("selector.proj.weight", "selector.codebook", "layers.0.conv_attn.proj.weight", "fc.weight"):
        assert m.get_parameter(name).grad.abs().sum() > 0, name


def test_fixture_reproduces():
    for line in open(os.path.join(FIXTURE, "MANIFEST.sha256")):
        digest, name = line.split()
        with open(os.path.join(FIXTURE, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name
    m = DFlash2(load_config(os.path.join(FIXTURE, "config.json")))
    m.load_state_dict(load_file(os.path.join(FIXTURE, "model.safetensors")))
    for case in ("case.safetensors", "case2.safetensors"):
        t = load_file(os.path.join(FIXTURE, case))
        taps = torch.cat([t[f"tap_{i}"] for i in range(len(m.cfg.target_layers))], dim=-1)
        logits, draft = m.draft(t["target_embedding"], t["target_head"], taps, t["context_positions"].long(),
                                int(t["anchor"][0]), int(t["anchor_pos"][0]))
        torch.testing.assert_close(logits, t["expected_logits"], rtol=0, atol=1e-5)
        assert draft.tolist() == t["expected_draft"].tolist()
        assert draft.tolist() != t["expected_argmax"].tolist()


def test_select_batch_matches_select():
    m, emb, head, g = tiny()
    with torch.no_grad():
        m.selector.proj.weight.normal_(std=0.5, generator=g)
    A, k = 6, m.cfg.block_size - 1
    z = torch.randn(A, k, m.cfg.hidden_size, generator=g)
    logits = z @ head.T
    logits[2, 3, :] = 0.0  # a row tied at the top-K boundary: select()'s stable order
    anchor = torch.randint(0, m.cfg.vocab_size, (A,), generator=g)
    got = m.select_batch(logits, z, anchor)
    for a in range(A):
        assert got[a].tolist() == m.select(logits[a], z[a], int(anchor[a])).tolist(), a
