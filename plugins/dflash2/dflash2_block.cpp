// The block forward (ARCHITECTURE.md, "Block forward") of several sequences in one pass.
// Their blocks' rows are stacked, [S * block_size, d], so each product reads its weights
// once for all of them: on a CPU the block is bound by those reads (about 60 MB of f32
// weights for the default drafter), on a GPU by the launches. Only what mixes rows within a
// block runs per sequence: dynconv (each block's first row has no row before it) and the
// attention over the sequence's own window and block. The candidates of every sequence come
// back in one copy and one wait.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "dflash2_forward.hpp"
#include "dflash2_selector.hpp"
#include "tandem/error.hpp"

namespace tandem::dflash2 {

block_output forward_pass::block(sequence_context& seq, int32_t anchor, int64_t anchor_pos, int slots, bool logits) {
  const block_request r{.seq = &seq, .anchor = anchor, .anchor_pos = anchor_pos, .slots = slots};
  return std::move(blocks(std::span<const block_request>(&r, 1), logits)[0]);
}

std::vector<block_output> forward_pass::blocks(std::span<const block_request> reqs, bool logits) {
  const dflash2_config& c = m_.cfg;
  const int64_t B = c.block_size, d = c.hidden_size, G2 = 2 * c.groups(), F = c.intermediate_size;
  const int64_t qw = c.q_width(), kv = c.kv_width(), V = c.target.vocab_size, R = c.selector_rank;
  const auto S = static_cast<int64_t>(reqs.size());
  if (S == 0) return {};
  const int64_t n = S * B;  // the stacked block rows: sequence s has rows s * B .. s * B + B - 1

  // Each sequence's window, and where its block's keys and values go (after the window, so
  // that one attention reads both as one run of rows).
  std::vector<sequence_context::rows> windows(reqs.size());
  std::vector<int64_t> block_at(reqs.size());
  std::vector<int64_t> first_head(reqs.size() + 1, 0);  // sequence s's head rows: first_head[s] ..
  std::set<const sequence_context*> seen;
  for (size_t s = 0; s < reqs.size(); ++s) {
    const block_request& r = reqs[s];
    if (r.slots < 1 || r.slots > B - 1)
      throw error("drafter.dflash2: a block drafts 1.." + std::to_string(B - 1) + " tokens, not " +
                  std::to_string(r.slots));
    if (!seen.insert(r.seq).second) throw error("drafter.dflash2: one pass drafts a sequence's block once");
    windows[s] = r.seq->window(r.anchor_pos);
    if (windows[s].first + windows[s].n != r.seq->end())
      throw error("drafter.dflash2: a block at position " + std::to_string(r.anchor_pos) +
                  " with context held past it (newest " + std::to_string(r.seq->newest()) + ")");
    block_at[s] = r.seq->end();
    first_head[s + 1] = first_head[s] + r.slots;
  }
  const int64_t heads_n = first_head.back();  // rows through the head: the slots asked for

  // Every index the pass gathers by, in one copy: the anchors, the rows' positions, which
  // embedding each row starts from (its anchor's, or the mask embedding after them), the
  // rows that go through the head, and 0 .. B-1 (copies a block's keys into its sequence).
  const int64_t at_pos = S, at_start = at_pos + n, at_head = at_start + n, at_iota = at_head + heads_n;
  std::vector<int32_t> ids(static_cast<size_t>(at_iota + B));
  for (int64_t s = 0; s < S; ++s) {
    const block_request& r = reqs[static_cast<size_t>(s)];
    ids[static_cast<size_t>(s)] = r.anchor;
    for (int64_t k = 0; k < B; ++k) {
      ids[static_cast<size_t>(at_pos + s * B + k)] = static_cast<int32_t>(r.anchor_pos + k);
      ids[static_cast<size_t>(at_start + s * B + k)] = static_cast<int32_t>(k == 0 ? s : S);
    }
    for (int k = 1; k <= r.slots; ++k)
      ids[static_cast<size_t>(at_head + first_head[static_cast<size_t>(s)] + k - 1)] = static_cast<int32_t>(s * B + k);
  }
  for (int64_t k = 0; k < B; ++k) ids[static_cast<size_t>(at_iota + k)] = static_cast<int32_t>(k);
  auto* idp = reinterpret_cast<int32_t*>(scratch(s_ids, static_cast<int64_t>(ids.size())));
  be_.copy_to_device(idp, ids.data(), ids.size() * sizeof(int32_t));
  const auto index = [&](int64_t at, int64_t count) {
    return tensor_view::contiguous(idp + at, dtype::i32, {count}, be_.dev());
  };
  const tensor_view pv = index(at_pos, n);
  const auto vec = [&](const std::unique_ptr<device_buffer>& b) {
    return tensor_view::contiguous(b->data(), dtype::f32, {d}, be_.dev());
  };

  // h_0 = the target's embedding of the anchor; h_k = mask_embedding.
  float* emb = scratch(s_emb, (S + 1) * d);  // the S anchors' embeddings, then the mask embedding
  be_.embed(*m_.embedding, index(0, S), rows(emb, S, d));
  be_.gather_rows(rows(static_cast<float*>(m_.mask_embedding->data()), 1, d),
                  tensor_view::contiguous(zeros_->data(), dtype::i32, {1}, be_.dev()), rows(emb + S * d, 1, d));
  float* h = scratch(s_h, n * d);
  be_.gather_rows(rows(emb, S + 1, d), index(at_start, n), rows(h, n, d));

  float* x = scratch(s_x, n * d);
  float* u = scratch(s_u, n * d);
  float* taps = scratch(s_taps, n * G2);
  float* q = scratch(s_q, n * qw);
  float* kb = scratch(s_kb, n * kv);
  float* vb = scratch(s_vb, n * kv);
  float* attn = scratch(s_attn, n * qw);
  const tensor_view hv = rows(h, n, d), xv = rows(x, n, d), uv = rows(u, n, d), tv = rows(taps, n, G2);
  const tensor_view qv = rows(q, n, qw), kbv = rows(kb, n, kv), vbv = rows(vb, n, kv), av = rows(attn, n, qw);
  const tensor_view gv = rows(scratch(s_gate, n * F), n, F), upv = rows(scratch(s_up, n * F), n, F);
  const auto heads = [&](float* p, int64_t count, int nh) {
    return tensor_view::contiguous(p, dtype::f32, {count, nh, c.head_dim}, be_.dev());
  };
  // u = dynconv(rms_norm(h, norm), base, proj); the convolution per block.
  const auto norm_conv = [&](const std::unique_ptr<device_buffer>& norm, const linear_weight& proj,
                             const std::unique_ptr<device_buffer>& base) {
    be_.rms_norm(hv, vec(norm), c.rms_norm_eps, xv);
    be_.linear(proj, xv, tv);
    const tensor_view bv = tensor_view::contiguous(base->data(), dtype::f32, {c.groups(), 2}, be_.dev());
    for (int64_t s = 0; s < S; ++s)
      be_.dynamic_conv(rows(x + s * B * d, B, d), rows(taps + s * B * G2, B, G2), bv, rows(u + s * B * d, B, d));
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int l = 0; l < c.num_layers; ++l) {
    const dflash2_layer& lw = m_.layers[static_cast<size_t>(l)];
    norm_conv(lw.input_norm, *lw.conv_attn_proj, lw.conv_attn_base);
    be_.linear(*lw.q_proj, uv, qv);
    be_.linear(*lw.k_proj, uv, kbv);
    be_.linear(*lw.v_proj, uv, vbv);
    be_.rope(heads(q, n, c.num_heads), pv, rope_of(c));
    be_.rope(heads(kb, n, c.num_kv_heads), pv, rope_of(c));
    for (int64_t s = 0; s < S; ++s) {
      const sequence_context& seq = *reqs[static_cast<size_t>(s)].seq;
      const auto i = static_cast<size_t>(s);
      be_.gather_rows(rows(kb + s * B * kv, B, kv), index(at_iota, B), rows(seq.k(l, block_at[i]), B, kv));
      be_.gather_rows(rows(vb + s * B * kv, B, kv), index(at_iota, B), rows(seq.v(l, block_at[i]), B, kv));
      // Every block query over the window and the whole block: one run of rows.
      const int64_t m = windows[i].n + B;
      be_.attention_full(heads(q + s * B * qw, B, c.num_heads), heads(seq.k(l, windows[i].first), m, c.num_kv_heads),
                         heads(seq.v(l, windows[i].first), m, c.num_kv_heads), scale,
                         heads(attn + s * B * qw, B, c.num_heads));
    }
    be_.linear_fused(*lw.o_proj, av, {}, hv, /*accumulate=*/true);

    norm_conv(lw.post_norm, *lw.conv_mlp_proj, lw.conv_mlp_base);
    be_.linear(*lw.gate_proj, uv, gv);
    be_.linear(*lw.up_proj, uv, upv);
    linear_prologue gate{.k = linear_prologue::kind::silu_mul, .norm_weight = {}, .eps = 0.0f, .up = upv};
    be_.linear_fused(*lw.down_proj, gv, gate, hv, /*accumulate=*/true);
  }

  // Only the slots asked for go through the head: it is the block's largest product.
  const int K = static_cast<int>(std::min<int64_t>(c.selector_top_k, V));
  const tensor_view hz = rows(scratch(s_head, heads_n * d), heads_n, d);
  const tensor_view zv = rows(scratch(s_z, heads_n * d), heads_n, d), lv = rows(scratch(s_logits, heads_n * V), heads_n, V);
  const tensor_view g = rows(scratch(s_g, heads_n * R), heads_n, R);
  float* top = scratch(s_top, 2 * heads_n * K);  // ids (as i32), then values
  be_.gather_rows(hv, index(at_head, heads_n), hz);
  be_.rms_norm(hz, vec(m_.norm), c.rms_norm_eps, zv);
  be_.linear(*m_.lm_head, zv, lv);
  be_.linear(*m_.selector_proj, zv, g);
  be_.top_k(lv, K, tensor_view::contiguous(top, dtype::i32, {heads_n, K}, be_.dev()),
            tensor_view::contiguous(top + heads_n * K, dtype::f32, {heads_n, K}, be_.dev()));

  std::vector<int32_t> cand(static_cast<size_t>(heads_n * K));
  std::vector<float> cand_logits(cand.size()), gh(static_cast<size_t>(heads_n * R));
  be_.copy_to_host(cand.data(), top, cand.size() * sizeof(int32_t));
  be_.copy_to_host(cand_logits.data(), top + heads_n * K, cand_logits.size() * sizeof(float));
  be_.copy_to_host(gh.data(), g.data, gh.size() * sizeof(float));
  std::vector<float> all_logits(logits ? static_cast<size_t>(heads_n * V) : 0);
  if (logits) be_.copy_to_host(all_logits.data(), lv.data, all_logits.size() * sizeof(float));
  be_.synchronize();  // the one wait of the pass

  std::vector<block_output> out(reqs.size());
  for (size_t s = 0; s < reqs.size(); ++s) {
    const int64_t first = first_head[s];
    const int slots = reqs[s].slots;
    out[s].draft = select_draft({cand.data() + first * K, cand_logits.data() + first * K, K, gh.data() + first * R,
                                 m_.codebook.data(), c.selector_rank, slots},
                                reqs[s].anchor);
    if (logits)
      out[s].logits.assign(all_logits.begin() + first * V, all_logits.begin() + (first + slots) * V);
  }
  return out;
}

}  // namespace tandem::dflash2
