#include "dflash2_forward.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "dflash2_selector.hpp"
#include "tandem/error.hpp"

namespace tandem::dflash2 {

namespace {

// The scratch buffers' slots.
enum slot : size_t { s_h, s_x, s_u, s_taps, s_q, s_attn, s_gate, s_up, s_z, s_logits, s_g, s_top, s_ctx, s_pos, s_count };

rope_params rope_of(const dflash2_config& c) { return {.theta = c.rope_theta, .rotary_dims = 0, .neox = true}; }

}  // namespace

forward_pass::forward_pass(const dflash2_model& m, backend& be) : m_(m), be_(be), scratch_(s_count) {
  const int64_t B = m.cfg.block_size;
  zeros_ = be.alloc(static_cast<size_t>(B) * sizeof(int32_t));
  const std::vector<int32_t> zeros(static_cast<size_t>(B), 0);
  be.copy_to_device(zeros_->data(), zeros.data(), zeros.size() * sizeof(int32_t));
  ids_ = be.alloc(static_cast<size_t>(B + 1) * sizeof(int32_t));
  be.synchronize();
}

float* forward_pass::scratch(size_t i, int64_t floats) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float);
  std::unique_ptr<device_buffer>& b = scratch_[i];
  if (!b || b->size() < bytes) {
    if (b) be_.synchronize();  // work queued on the old buffer finishes first
    b = be_.alloc(bytes + bytes / 2);
  }
  return static_cast<float*>(b->data());
}

tensor_view forward_pass::rows(float* p, int64_t n, int64_t cols) const {
  return tensor_view::contiguous(p, dtype::f32, {n, cols}, be_.dev());
}

void forward_pass::context(sequence_context& seq, std::span<const tensor_view> all_taps,
                           std::span<const int64_t> all_positions) {
  const dflash2_config& c = m_.cfg;
  if (all_positions.empty()) return;
  // Rows more than context_window before the newest can never be attended to again.
  const auto skip = std::lower_bound(all_positions.begin(), all_positions.end(),
                                     all_positions.back() - c.context_window) - all_positions.begin();
  const std::span<const int64_t> positions = all_positions.subspan(static_cast<size_t>(skip));
  std::vector<tensor_view> taps(all_taps.begin(), all_taps.end());
  for (tensor_view& v : taps) {
    v.data = static_cast<float*>(v.data) + skip * v.strides[0];
    v.shape[0] -= skip;
  }
  const auto n = static_cast<int64_t>(positions.size());
  const int64_t d = c.hidden_size, kv = c.kv_width();
  const int64_t at = seq.reserve(n, positions.back());
  // First, while the stream is idle: a copy from pageable memory waits for the stream. The
  // source may be reused once copy_to_device returns (as the models' step inputs are).
  auto* pos = reinterpret_cast<int32_t*>(scratch(s_pos, n));
  const std::vector<int32_t> host_pos(positions.begin(), positions.end());
  be_.copy_to_device(pos, host_pos.data(), host_pos.size() * sizeof(int32_t));
  const tensor_view pv = tensor_view::contiguous(pos, dtype::i32, {n}, be_.dev());

  // c_j = rms_norm(fc · concat(taps_j)) = rms_norm(sum_i fc_i · tap_i).
  const tensor_view ctx = rows(scratch(s_ctx, n * d), n, d);
  for (size_t i = 0; i < taps.size(); ++i)
    be_.linear_fused(*m_.fc[i], taps[i], {}, ctx, /*accumulate=*/i > 0);
  be_.rms_norm(ctx, tensor_view::contiguous(m_.hidden_norm->data(), dtype::f32, {d}, be_.dev()), c.rms_norm_eps, ctx);

  for (int l = 0; l < c.num_layers; ++l) {
    const dflash2_layer& w = m_.layers[static_cast<size_t>(l)];
    be_.linear(*w.k_proj, ctx, rows(seq.k(l, at), n, kv));
    be_.linear(*w.v_proj, ctx, rows(seq.v(l, at), n, kv));
    be_.rope(tensor_view::contiguous(seq.k(l, at), dtype::f32, {n, c.num_kv_heads, c.head_dim}, be_.dev()), pv,
             rope_of(c));
  }
  seq.commit(positions);
}

void forward_pass::stage(sequence_context& seq, std::span<const tensor_view> taps, std::span<const int64_t> positions) {
  const auto n = static_cast<int64_t>(positions.size());
  if (n == 0) return;
  if (seq.pending() + n > seq.pending_capacity()) throw error("drafter.dflash2: staged taps overflow the pending buffer");
  if (iota_n_ < n) {
    iota_n_ = std::max(n, seq.pending_capacity());
    std::vector<int32_t> iota(static_cast<size_t>(iota_n_));
    for (int64_t i = 0; i < iota_n_; ++i) iota[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    if (iota_) be_.synchronize();  // earlier gathers may still read the old one
    iota_ = be_.alloc(iota.size() * sizeof(int32_t));
    be_.copy_to_device(iota_->data(), iota.data(), iota.size() * sizeof(int32_t));
  }
  const int64_t d = m_.cfg.hidden_size, at = seq.pending();
  const tensor_view order = tensor_view::contiguous(iota_->data(), dtype::i32, {n}, be_.dev());
  for (size_t i = 0; i < taps.size(); ++i)
    be_.gather_rows(taps[i], order, rows(seq.pending_row(static_cast<int>(i), at), n, d));
  seq.add_pending(positions);
}

void forward_pass::flush(sequence_context& seq) {
  const int64_t n = seq.pending();
  if (n == 0) return;
  std::vector<tensor_view> taps;
  for (int i = 0; i < m_.cfg.taps(); ++i) taps.push_back(rows(seq.pending_row(i, 0), n, m_.cfg.hidden_size));
  const std::vector<int64_t> positions(seq.pending_positions().begin(), seq.pending_positions().end());
  seq.clear_pending();  // context() appends them as held rows
  context(seq, taps, positions);
}

block_output forward_pass::block(sequence_context& seq, int32_t anchor, int64_t anchor_pos, int slots, bool logits) {
  const dflash2_config& c = m_.cfg;
  const int64_t B = c.block_size, d = c.hidden_size, G2 = 2 * c.groups(), F = c.intermediate_size;
  const int64_t qw = c.q_width(), kv = c.kv_width(), V = c.target.vocab_size, R = c.selector_rank;
  if (slots < 1 || slots > B - 1)
    throw error("drafter.dflash2: a block drafts 1.." + std::to_string(B - 1) + " tokens, not " + std::to_string(slots));
  const sequence_context::rows w = seq.window(anchor_pos);
  if (w.first + w.n != seq.end())
    throw error("drafter.dflash2: a block at position " + std::to_string(anchor_pos) +
                " with context held past it (newest " + std::to_string(seq.newest()) + ")");
  const int64_t at = seq.end(), m = w.n + B;  // the block's rows follow the window's

  // The anchor and the block's positions, in one copy.
  std::vector<int32_t> ids(static_cast<size_t>(B + 1));
  ids[0] = anchor;
  for (int64_t k = 0; k < B; ++k) ids[static_cast<size_t>(k + 1)] = static_cast<int32_t>(anchor_pos + k);
  be_.copy_to_device(ids_->data(), ids.data(), ids.size() * sizeof(int32_t));
  auto* idp = static_cast<int32_t*>(ids_->data());
  const tensor_view pv = tensor_view::contiguous(idp + 1, dtype::i32, {B}, be_.dev());
  const auto vec = [&](const std::unique_ptr<device_buffer>& b) {
    return tensor_view::contiguous(b->data(), dtype::f32, {d}, be_.dev());
  };

  // h_0 = the target's embedding of the anchor; h_k = mask_embedding.
  float* h = scratch(s_h, B * d);
  be_.embed(*m_.embedding, tensor_view::contiguous(idp, dtype::i32, {1}, be_.dev()), rows(h, 1, d));
  be_.gather_rows(rows(static_cast<float*>(m_.mask_embedding->data()), 1, d),
                  tensor_view::contiguous(zeros_->data(), dtype::i32, {B - 1}, be_.dev()), rows(h + d, B - 1, d));

  const tensor_view hv = rows(h, B, d), xv = rows(scratch(s_x, B * d), B, d), uv = rows(scratch(s_u, B * d), B, d);
  const tensor_view tv = rows(scratch(s_taps, B * G2), B, G2);
  const tensor_view qv = rows(scratch(s_q, B * qw), B, qw), av = rows(scratch(s_attn, B * qw), B, qw);
  const tensor_view gv = rows(scratch(s_gate, B * F), B, F), upv = rows(scratch(s_up, B * F), B, F);
  const auto heads = [&](const tensor_view& v, int64_t n, int nh) {
    return tensor_view::contiguous(v.data, dtype::f32, {n, nh, c.head_dim}, be_.dev());
  };
  // u = dynconv(rms_norm(h, norm), base, proj)
  const auto norm_conv = [&](const std::unique_ptr<device_buffer>& norm, const linear_weight& proj,
                             const std::unique_ptr<device_buffer>& base) {
    be_.rms_norm(hv, vec(norm), c.rms_norm_eps, xv);
    be_.linear(proj, xv, tv);
    be_.dynamic_conv(xv, tv, tensor_view::contiguous(base->data(), dtype::f32, {c.groups(), 2}, be_.dev()), uv);
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int l = 0; l < c.num_layers; ++l) {
    const dflash2_layer& lw = m_.layers[static_cast<size_t>(l)];
    norm_conv(lw.input_norm, *lw.conv_attn_proj, lw.conv_attn_base);
    const tensor_view kb = rows(seq.k(l, at), B, kv), vb = rows(seq.v(l, at), B, kv);
    be_.linear(*lw.q_proj, uv, qv);
    be_.linear(*lw.k_proj, uv, kb);
    be_.linear(*lw.v_proj, uv, vb);
    be_.rope(heads(qv, B, c.num_heads), pv, rope_of(c));
    be_.rope(heads(kb, B, c.num_kv_heads), pv, rope_of(c));
    // Every block query over the window and the whole block: one run of rows.
    be_.attention_full(heads(qv, B, c.num_heads),
                       tensor_view::contiguous(seq.k(l, w.first), dtype::f32, {m, c.num_kv_heads, c.head_dim}, be_.dev()),
                       tensor_view::contiguous(seq.v(l, w.first), dtype::f32, {m, c.num_kv_heads, c.head_dim}, be_.dev()),
                       scale, heads(av, B, c.num_heads));
    be_.linear_fused(*lw.o_proj, av, {}, hv, /*accumulate=*/true);

    norm_conv(lw.post_norm, *lw.conv_mlp_proj, lw.conv_mlp_base);
    be_.linear(*lw.gate_proj, uv, gv);
    be_.linear(*lw.up_proj, uv, upv);
    linear_prologue gate{.k = linear_prologue::kind::silu_mul, .norm_weight = {}, .eps = 0.0f, .up = upv};
    be_.linear_fused(*lw.down_proj, gv, gate, hv, /*accumulate=*/true);
  }

  // Only the slots asked for go through the head: it is the block's largest product.
  const int K = static_cast<int>(std::min<int64_t>(c.selector_top_k, V));
  const tensor_view zv = rows(scratch(s_z, slots * d), slots, d), lv = rows(scratch(s_logits, slots * V), slots, V);
  const tensor_view g = rows(scratch(s_g, slots * R), slots, R);
  float* top = scratch(s_top, 2 * slots * K);  // ids (as i32), then values
  be_.rms_norm(rows(h + d, slots, d), vec(m_.norm), c.rms_norm_eps, zv);
  be_.linear(*m_.lm_head, zv, lv);
  be_.linear(*m_.selector_proj, zv, g);
  be_.top_k(lv, K, tensor_view::contiguous(top, dtype::i32, {slots, K}, be_.dev()),
            tensor_view::contiguous(top + slots * K, dtype::f32, {slots, K}, be_.dev()));

  std::vector<int32_t> cand(static_cast<size_t>(slots * K));
  std::vector<float> cand_logits(cand.size()), gh(static_cast<size_t>(slots * R));
  be_.copy_to_host(cand.data(), top, cand.size() * sizeof(int32_t));
  be_.copy_to_host(cand_logits.data(), top + slots * K, cand_logits.size() * sizeof(float));
  be_.copy_to_host(gh.data(), g.data, gh.size() * sizeof(float));
  block_output out;
  if (logits) {
    out.logits.resize(static_cast<size_t>(slots * V));
    be_.copy_to_host(out.logits.data(), lv.data, out.logits.size() * sizeof(float));
  }
  be_.synchronize();  // the one wait of a block
  out.draft = select_draft({cand.data(), cand_logits.data(), K, gh.data(), m_.codebook.data(), c.selector_rank, slots},
                           anchor);
  return out;
}

}  // namespace tandem::dflash2
