#include "dflash2_forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "tandem/error.hpp"

namespace tandem::dflash2 {

tensor_view stacked_taps(std::span<const tensor_view> taps) {
  if (taps.empty()) return {};
  const tensor_view& t0 = taps.front();
  const int64_t run = t0.numel();
  const auto addr = [](const tensor_view& v) { return reinterpret_cast<std::uintptr_t>(v.data); };
  // Tap 1 from the end of tap 0 on (neither overlapping nor below it), every tap in step.
  if (taps.size() > 1 && addr(taps[1]) < addr(t0) + run * sizeof(float)) return {};
  const std::uintptr_t step = taps.size() > 1 ? addr(taps[1]) - addr(t0) : run * sizeof(float);
  if (step % sizeof(float) != 0) return {};
  for (size_t i = 0; i < taps.size(); ++i)
    if (taps[i].type != dtype::f32 || !taps[i].is_contiguous() || taps[i].numel() != run || taps[i].dev != t0.dev ||
        addr(taps[i]) != addr(t0) + i * step)
      return {};
  tensor_view v = tensor_view::contiguous(t0.data, dtype::f32, {static_cast<int64_t>(taps.size()), run}, t0.dev);
  v.strides[0] = static_cast<int64_t>(step / sizeof(float));
  return v;
}

forward_pass::forward_pass(const dflash2_model& m, backend& be) : m_(m), be_(be), scratch_(s_count) {
  zeros_ = be.alloc(sizeof(int32_t));
  const int32_t zero = 0;
  be.copy_to_device(zeros_->data(), &zero, sizeof zero);
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

tensor_view forward_pass::rows(float* p, int64_t n, int64_t cols, int64_t stride) const {
  tensor_view v = rows(p, n, cols);
  v.strides[0] = stride;
  return v;
}

// Rows more than context_window before the newest can never be attended to again: the
// index of the first pending or new position still in reach.
size_t forward_pass::first_in_reach(std::span<const int64_t> positions) const {
  return static_cast<size_t>(std::lower_bound(positions.begin(), positions.end(), positions.back() - m_.cfg.context_window) -
                             positions.begin());
}

tensor_view forward_pass::positions_on_device(std::span<const int64_t> positions) {
  // First, while the stream is idle: a copy from pageable memory waits for the stream. The
  // source may be reused once copy_to_device returns (as the models' step inputs are).
  const auto n = static_cast<int64_t>(positions.size());
  auto* pos = reinterpret_cast<int32_t*>(scratch(s_pos, n));
  const std::vector<int32_t> host_pos(positions.begin(), positions.end());
  be_.copy_to_device(pos, host_pos.data(), host_pos.size() * sizeof(int32_t));
  return tensor_view::contiguous(pos, dtype::i32, {n}, be_.dev());
}

tensor_view forward_pass::fuse_taps(std::span<const tensor_view> taps, int64_t n) {
  // c_j = rms_norm(fc · concat(taps_j)) = rms_norm(sum_i fc_i · tap_i).
  const int64_t d = m_.cfg.hidden_size;
  const tensor_view ctx = rows(scratch(s_ctx, n * d), n, d);
  for (size_t i = 0; i < taps.size(); ++i)
    be_.linear_fused(*m_.fc[i], taps[i], {}, ctx, /*accumulate=*/i > 0);
  be_.rms_norm(ctx, tensor_view::contiguous(m_.hidden_norm->data(), dtype::f32, {d}, be_.dev()), m_.cfg.rms_norm_eps, ctx);
  return ctx;
}

void forward_pass::project_kv(int layer, const tensor_view& ctx, const tensor_view& pv, float* k, float* v) {
  const dflash2_config& c = m_.cfg;
  const dflash2_layer& w = m_.layers[static_cast<size_t>(layer)];
  const int64_t n = ctx.shape[0], kv = c.kv_width();
  be_.linear(*w.k_proj, ctx, rows(k, n, kv));
  be_.linear(*w.v_proj, ctx, rows(v, n, kv));
  be_.rope(tensor_view::contiguous(k, dtype::f32, {n, c.num_kv_heads, c.head_dim}, be_.dev()), pv, rope_of(c));
}

void forward_pass::context(sequence_context& seq, std::span<const tensor_view> all_taps,
                           std::span<const int64_t> all_positions) {
  if (all_positions.empty()) return;
  const size_t skip = first_in_reach(all_positions);
  const std::span<const int64_t> positions = all_positions.subspan(skip);
  std::vector<tensor_view> taps(all_taps.begin(), all_taps.end());
  for (tensor_view& v : taps) {
    v.data = static_cast<float*>(v.data) + static_cast<int64_t>(skip) * v.strides[0];
    v.shape[0] -= static_cast<int64_t>(skip);
  }
  const auto n = static_cast<int64_t>(positions.size());
  const int64_t at = seq.reserve(n, positions.back());
  const tensor_view pv = positions_on_device(positions);
  const tensor_view ctx = fuse_taps(taps, n);
  for (int l = 0; l < m_.cfg.num_layers; ++l) project_kv(l, ctx, pv, seq.k(l, at), seq.v(l, at));
  seq.commit(positions);
}

tensor_view forward_pass::in_order(int64_t n, int64_t at_least) {
  if (iota_n_ < n) {
    iota_n_ = std::max(n, at_least);
    std::vector<int32_t> iota(static_cast<size_t>(iota_n_));
    for (int64_t i = 0; i < iota_n_; ++i) iota[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    if (iota_) be_.synchronize();  // earlier gathers may still read the old one
    iota_ = be_.alloc(iota.size() * sizeof(int32_t));
    be_.copy_to_device(iota_->data(), iota.data(), iota.size() * sizeof(int32_t));
  }
  return tensor_view::contiguous(iota_->data(), dtype::i32, {n}, be_.dev());
}

void forward_pass::stage(sequence_context& seq, std::span<const tensor_view> taps, std::span<const int64_t> positions) {
  const auto n = static_cast<int64_t>(positions.size());
  if (n == 0) return;
  if (seq.pending() + n > seq.pending_capacity()) throw error("drafter.dflash2: staged taps overflow the pending buffer");
  const int64_t d = m_.cfg.hidden_size, at = seq.pending();
  const auto T = static_cast<int64_t>(taps.size());
  // Tap i's new rows are row i of a [T, n * d] view of the pending buffer: taps that lie at
  // one stride go over in one gather (one launch a step, not one a tap).
  if (const tensor_view all = stacked_taps(taps); all.data) {
    const tensor_view pending = rows(seq.pending_row(0, at), T, n * d, seq.pending_stride());
    be_.gather_rows(all, in_order(T, seq.pending_capacity()), pending);
  } else {
    const tensor_view order = in_order(n, seq.pending_capacity());
    for (size_t i = 0; i < taps.size(); ++i)
      be_.gather_rows(taps[i], order, rows(seq.pending_row(static_cast<int>(i), at), n, d));
  }
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

void forward_pass::flush(std::span<sequence_context* const> seqs) {
  const dflash2_config& c = m_.cfg;
  std::vector<sequence_context*> with_rows;
  for (sequence_context* seq : seqs)
    if (seq->pending() > 0) with_rows.push_back(seq);
  if (with_rows.size() <= 1) {  // nothing to share
    for (sequence_context* seq : with_rows) flush(*seq);
    return;
  }
  const int64_t d = c.hidden_size, kv = c.kv_width();
  const int T = c.taps();
  // Each sequence's rows, as context() takes them: those past the window's reach skipped.
  struct part {
    sequence_context* seq;
    int64_t skip, n, first, at;  // pending rows skip.., n of them, at rows first.. of the stack
  };
  std::vector<part> parts;
  std::vector<int64_t> positions;
  int64_t most = 0;
  for (sequence_context* seq : with_rows) {
    const std::span<const int64_t> pending = seq->pending_positions();
    const auto skip = static_cast<int64_t>(first_in_reach(pending));
    const auto n = static_cast<int64_t>(pending.size()) - skip;
    parts.push_back({seq, skip, n, static_cast<int64_t>(positions.size()), seq->reserve(n, pending.back())});
    positions.insert(positions.end(), pending.begin() + skip, pending.end());
    most = std::max(most, n);
  }
  const auto n = static_cast<int64_t>(positions.size());
  const tensor_view pv = positions_on_device(positions);
  const tensor_view order = in_order(std::max<int64_t>(most, T), parts.front().seq->pending_capacity());
  const auto first = [&](int64_t count) { return tensor_view::contiguous(order.data, dtype::i32, {count}, be_.dev()); };

  // The taps stacked (T blocks of [n, d]): one product per tap over every sequence's rows.
  // A sequence's rows of every tap ([T, rows * d] of its pending buffer) go over in one gather.
  float* all = scratch(s_ctx_taps, T * n * d);
  for (const part& p : parts)
    be_.gather_rows(rows(p.seq->pending_row(0, p.skip), T, p.n * d, p.seq->pending_stride()), first(T),
                    rows(all + p.first * d, T, p.n * d, n * d));
  std::vector<tensor_view> taps;
  for (int i = 0; i < T; ++i) taps.push_back(rows(all + i * n * d, n, d));
  const tensor_view ctx = fuse_taps(taps, n);

  float* k = scratch(s_ctx_k, n * kv);
  float* v = scratch(s_ctx_v, n * kv);
  for (int l = 0; l < c.num_layers; ++l) {
    project_kv(l, ctx, pv, k, v);
    for (const part& p : parts) {
      be_.gather_rows(rows(k + p.first * kv, p.n, kv), first(p.n), rows(p.seq->k(l, p.at), p.n, kv));
      be_.gather_rows(rows(v + p.first * kv, p.n, kv), first(p.n), rows(p.seq->v(l, p.at), p.n, kv));
    }
  }
  for (const part& p : parts) {
    const std::vector<int64_t> held(p.seq->pending_positions().begin() + p.skip, p.seq->pending_positions().end());
    p.seq->clear_pending();
    p.seq->commit(held);
  }
}

}  // namespace tandem::dflash2
