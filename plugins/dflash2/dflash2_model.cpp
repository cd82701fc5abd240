#include "dflash2_model.hpp"

#include <algorithm>
#include <string>

#include "dflash2_weights.hpp"

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

}  // namespace

std::unique_ptr<dflash2_model> dflash2_model::load(const dflash2_weights& w, backend& be,
                                                   const linear_weight& embedding, const linear_weight& lm_head) {
  auto m = std::make_unique<dflash2_model>();
  m->cfg = w.config();
  m->embedding = &embedding;
  m->lm_head = &lm_head;
  const auto lin = [&](const std::string& n) { return be.load_linear(w.tensor(n)); };
  const auto vec = [&](const std::string& n) { return be.load_tensor(w.tensor(n), dtype::f32); };

  const int64_t d = m->cfg.hidden_size, taps = m->cfg.taps();
  const std::vector<float> fc = host_f32(be, w.tensor("fc.weight"));  // {d, taps * d}
  for (int64_t i = 0; i < taps; ++i) {
    std::vector<float> part(static_cast<size_t>(d * d));
    for (int64_t r = 0; r < d; ++r)
      std::copy_n(fc.begin() + r * taps * d + i * d, d, part.begin() + r * d);
    m->fc_host.push_back(std::move(part));
    tensor_info t;
    t.name = "fc.weight[:, " + std::to_string(i * d) + ":" + std::to_string((i + 1) * d) + "]";
    t.type = dtype::f32;
    t.shape = {d, d};
    t.data = m->fc_host.back().data();
    t.nbytes = m->fc_host.back().size() * sizeof(float);
    m->fc.push_back(be.load_linear(t));
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
