#include "dflash2_forward.hpp"

#include <algorithm>
#include <numeric>

#include "dflash2_math.hpp"
#include "dflash2_selector.hpp"
#include "tandem/error.hpp"

namespace tandem::dflash2 {

namespace {

std::vector<float> rows_of(int64_t n, int64_t width) { return std::vector<float>(static_cast<size_t>(n * width)); }

// u = dynconv(rms_norm(h, norm), base, proj) over the block's rows.
std::vector<float> norm_conv(const dflash2_model& m, device_rows& dev, const std::vector<float>& h, int64_t rows,
                             const std::vector<float>& norm, const linear_weight& proj, const std::vector<float>& base) {
  const int64_t d = m.cfg.hidden_size;
  std::vector<float> x = rows_of(rows, d), pu = rows_of(rows, 2 * m.cfg.groups()), u = rows_of(rows, d);
  rms_norm(h.data(), rows, d, norm.data(), m.cfg.rms_norm_eps, x.data());
  dev.linear(proj, x.data(), rows, pu.data());
  dynconv(x.data(), pu.data(), base.data(), rows, d, m.cfg.conv_group_size, u.data());
  return u;
}

}  // namespace

context_rows compute_context(const dflash2_model& m, device_rows& dev, const float* t, std::span<const int64_t> positions) {
  const dflash2_config& c = m.cfg;
  const auto n = static_cast<int64_t>(positions.size());
  std::vector<float> ctx = rows_of(n, c.hidden_size);
  dev.linear(*m.fc, t, n, ctx.data());
  rms_norm(ctx.data(), n, c.hidden_size, m.hidden_norm.data(), c.rms_norm_eps, ctx.data());
  context_rows out;
  for (const dflash2_layer& l : m.layers) {
    std::vector<float> k = rows_of(n, c.kv_width()), v = rows_of(n, c.kv_width());
    dev.linears({{l.k_proj.get(), k.data()}, {l.v_proj.get(), v.data()}}, ctx.data(), n);
    rope(k.data(), n, c.num_kv_heads, c.head_dim, positions, c.rope_theta);
    out.k.push_back(std::move(k));
    out.v.push_back(std::move(v));
  }
  return out;
}

block_output forward_block(const dflash2_model& m, device_rows& dev, const sequence_context::view& context,
                           int32_t anchor, int64_t anchor_pos, int slots) {
  const dflash2_config& c = m.cfg;
  const int64_t B = c.block_size, d = c.hidden_size;
  if (slots < 1 || slots > B - 1)
    throw error("drafter.dflash2: a block drafts 1.." + std::to_string(B - 1) + " tokens, not " + std::to_string(slots));

  // h_0 = the target's embedding of the anchor; h_k = mask_embedding.
  std::vector<float> h = rows_of(B, d);
  dev.embed(*m.embedding, &anchor, 1, h.data());
  for (int64_t k = 1; k < B; ++k) std::copy(m.mask_embedding.begin(), m.mask_embedding.end(), h.begin() + k * d);
  std::vector<int64_t> positions(static_cast<size_t>(B));
  std::iota(positions.begin(), positions.end(), anchor_pos);

  const attention_shape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  std::vector<float> q = rows_of(B, c.q_width()), kb = rows_of(B, c.kv_width()), vb = rows_of(B, c.kv_width());
  std::vector<float> attn = rows_of(B, c.q_width()), delta = rows_of(B, d);
  std::vector<float> gate = rows_of(B, c.intermediate_size), up = rows_of(B, c.intermediate_size);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const dflash2_layer& l = m.layers[i];
    const std::vector<float> u = norm_conv(m, dev, h, B, l.input_norm, *l.conv_attn_proj, l.conv_attn_base);
    dev.linears({{l.q_proj.get(), q.data()}, {l.k_proj.get(), kb.data()}, {l.v_proj.get(), vb.data()}}, u.data(), B);
    rope(q.data(), B, c.num_heads, c.head_dim, positions, c.rope_theta);
    rope(kb.data(), B, c.num_kv_heads, c.head_dim, positions, c.rope_theta);
    attention(q.data(), B, {context.k[i], context.v[i], context.n}, {kb.data(), vb.data(), B}, shape, attn.data());
    dev.linear(*l.o_proj, attn.data(), B, delta.data());
    add_inplace(h.data(), delta.data(), B * d);

    const std::vector<float> w = norm_conv(m, dev, h, B, l.post_norm, *l.conv_mlp_proj, l.conv_mlp_base);
    dev.linears({{l.gate_proj.get(), gate.data()}, {l.up_proj.get(), up.data()}}, w.data(), B);
    silu_mul(gate.data(), up.data(), B * c.intermediate_size, gate.data());
    dev.linear(*l.down_proj, gate.data(), B, delta.data());
    add_inplace(h.data(), delta.data(), B * d);
  }

  // Only the slots asked for go through the head: it is the block's largest product.
  std::vector<float> z = rows_of(slots, d);
  rms_norm(h.data() + d, slots, d, m.norm.data(), c.rms_norm_eps, z.data());
  block_output out;
  out.logits = rows_of(slots, c.target.vocab_size);
  std::vector<float> g = rows_of(slots, c.selector_rank);
  dev.linears({{m.lm_head, out.logits.data()}, {m.selector_proj.get(), g.data()}}, z.data(), slots);
  out.draft = select_draft({out.logits.data(), g.data(), m.codebook.data(), c.target.vocab_size, c.selector_rank,
                            c.selector_top_k, slots},
                           anchor);
  return out;
}

}  // namespace tandem::dflash2
