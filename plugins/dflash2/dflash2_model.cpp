#include "dflash2_model.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "dflash2_weights.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem {

namespace {

// A tensor as f32 on the host, converted by the backend (f16 / bf16 -> f32).
std::vector<float> host_f32(backend& be, const tensor_info& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  const std::unique_ptr<device_buffer> buf = be.load_tensor(t, dtype::f32);
  be.synchronize();
  be.copy_to_host(out.data(), buf->data(), out.size() * sizeof(float));
  be.synchronize();
  return out;
}

// A {out, in} f32 matrix as a linear of the backend: f32, or Q8_0 blocks when asked and
// the width allows. The bytes stay in `keep` (the backend may read them in place).
std::unique_ptr<linear_weight> load_matrix(backend& be, const std::string& name, const std::vector<float>& f,
                                           int64_t out, int64_t in, bool q8_0, std::vector<std::vector<uint8_t>>& keep) {
  tensor_info t;
  t.name = name;
  t.shape = {out, in};
  std::vector<uint8_t> bytes;
  if (q8_0 && in % 32 == 0) {
    t.type = dtype::q8_0;
    const int64_t row = in / 32 * static_cast<int64_t>(sizeof(block_q8_0));
    bytes.resize(static_cast<size_t>(out * row));
    for (int64_t r = 0; r < out; ++r) quantize_row_q8_0(f.data() + r * in, bytes.data() + r * row, in);
  } else {
    t.type = dtype::f32;
    bytes.resize(f.size() * sizeof(float));
    std::memcpy(bytes.data(), f.data(), bytes.size());
  }
  keep.push_back(std::move(bytes));
  t.data = keep.back().data();
  t.nbytes = keep.back().size();
  return be.load_linear(t);
}

}  // namespace

std::unique_ptr<dflash2_model> dflash2_model::load(const dflash2_weights& w, backend& be,
                                                   const linear_weight& embedding, const linear_weight& lm_head,
                                                   bool q8_0) {
  auto m = std::make_unique<dflash2_model>();
  m->cfg = w.config();
  m->embedding = &embedding;
  m->lm_head = &lm_head;
  const auto lin = [&](const std::string& n) {
    if (!q8_0) return be.load_linear(w.tensor(n));
    const tensor_info& t = w.tensor(n);
    return load_matrix(be, n, host_f32(be, t), t.shape.at(0), t.shape.at(1), true, m->host_tensors);
  };
  const auto vec = [&](const std::string& n) { return be.load_tensor(w.tensor(n), dtype::f32); };

  const int64_t d = m->cfg.hidden_size, taps = m->cfg.taps();
  const std::vector<float> fc = host_f32(be, w.tensor("fc.weight"));  // {d, taps * d}
  for (int64_t i = 0; i < taps; ++i) {
    std::vector<float> part(static_cast<size_t>(d * d));
    for (int64_t r = 0; r < d; ++r)
      std::copy_n(fc.begin() + r * taps * d + i * d, d, part.begin() + r * d);
    const std::string name = "fc.weight[:, " + std::to_string(i * d) + ":" + std::to_string((i + 1) * d) + "]";
    m->fc.push_back(load_matrix(be, name, part, d, d, q8_0, m->host_tensors));
  }
  m->selector_proj = lin("selector.proj.weight");
  m->hidden_norm = vec("hidden_norm.weight");
  m->mask_embedding = vec("mask_embedding");
  m->norm = vec("norm.weight");
  m->codebook = host_f32(be, w.tensor("selector.codebook"));
  for (int i = 0; i < m->cfg.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    dflash2_layer l;
    l.input_norm = vec(p + "input_norm.weight");
    l.conv_attn_base = vec(p + "conv_attn.base");
    l.post_norm = vec(p + "post_norm.weight");
    l.conv_mlp_base = vec(p + "conv_mlp.base");
    l.conv_attn_proj = lin(p + "conv_attn.proj.weight");
    l.q_proj = lin(p + "q_proj.weight");
    l.k_proj = lin(p + "k_proj.weight");
    l.v_proj = lin(p + "v_proj.weight");
    l.o_proj = lin(p + "o_proj.weight");
    l.conv_mlp_proj = lin(p + "conv_mlp.proj.weight");
    l.gate_proj = lin(p + "gate_proj.weight");
    l.up_proj = lin(p + "up_proj.weight");
    l.down_proj = lin(p + "down_proj.weight");
    m->layers.push_back(std::move(l));
  }
  be.synchronize();  // load_tensor's copies are done before the first use
  return m;
}

}  // namespace tandem
