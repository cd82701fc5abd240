// backend.record_check (tests only): backend.cpu behind a backend that says it is a GPU, so
// that models take the path they take on backend.cuda (steps padded and run through
// run_recorded), and that checks what makes a recorded step replayable. The first run of a
// key records the step's trace: every op with every argument the host passes (buffer
// addresses, shapes, strides, scalars, the batch's host fields), never the data. Each later
// run of that key must issue exactly the same trace; a recorded body must not allocate,
// copy, wait or sample (a CUDA graph cannot hold them). Any difference is an error naming
// the key and the first differing op. With TANDEM_RECORD_CHECK_LOG set, one line per
// run_recorded goes to that file ("record KEY OPS" / "replay KEY OPS") for the test to count.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "tandem/config.hpp"
#include "tandem/error.hpp"
#include "tandem/plugin_abi.hpp"

namespace tandem {
namespace {

class record_check final : public backend {
 public:
  explicit record_check(const cpu::cpu_options& opt) : in_(opt) {}

  bool supports(backend_op op) const override { return in_.supports(op); }
  device dev() const override { return {device_kind::cuda, 0}; }
  std::string describe() const override { return "record check over " + in_.describe(); }
  dtype activation_type() const override { return in_.activation_type(); }
  size_t memory_budget() const override { return in_.memory_budget(); }
  std::vector<dtype> kv_types() const override { return in_.kv_types(); }

  std::unique_ptr<device_buffer> alloc(size_t bytes) override {
    outside("alloc");
    return in_.alloc(bytes);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    outside("copy_to_device");
    in_.copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    outside("copy_to_host");
    in_.copy_to_host(dst, src, bytes);
  }
  void synchronize() override {
    outside("synchronize");
    in_.synchronize();
  }

  std::unique_ptr<linear_weight> load_linear(const tensor_info& w) override {
    outside("load_linear");
    return in_.load_linear(w);
  }
  std::unique_ptr<device_buffer> load_tensor(const tensor_info& t, dtype as) override {
    outside("load_tensor");
    return in_.load_tensor(t, as);
  }
  std::unique_ptr<kv_storage> alloc_kv(const kv_layout& layout) override {
    outside("alloc_kv");
    return in_.alloc_kv(layout);
  }
  std::unique_ptr<linear_weight> load_linear_group(std::span<const tensor_info* const> parts) override {
    outside("load_linear_group");
    return in_.load_linear_group(parts);
  }

  void embed(const linear_weight& table, tensor_view ids, tensor_view out) override {
    note("embed", &table, ids, out);
    in_.embed(table, h(ids), h(out));
  }
  void rms_norm(tensor_view x, tensor_view w, float eps, tensor_view out) override {
    note("rms_norm", x, w, eps, out);
    in_.rms_norm(h(x), h(w), eps, h(out));
  }
  void add_rms_norm(tensor_view r, tensor_view x, tensor_view w, float eps, tensor_view out) override {
    note("add_rms_norm", r, x, w, eps, out);
    in_.add_rms_norm(h(r), h(x), h(w), eps, h(out));
  }
  void add_rms_norm_keep(tensor_view r, tensor_view x, tensor_view w, float eps, tensor_view out,
                         tensor_view kept) override {
    note("add_rms_norm_keep", r, x, w, eps, out, kept);
    in_.add_rms_norm_keep(h(r), h(x), h(w), eps, h(out), h(kept));
  }
  void linear(const linear_weight& w, tensor_view x, tensor_view y) override {
    note("linear", &w, x, y);
    in_.linear(w, h(x), h(y));
  }
  void linear_fused(const linear_weight& w, tensor_view x, const linear_prologue& pro, tensor_view y,
                    bool accumulate) override {
    note("linear_fused", &w, x, static_cast<int>(pro.k), pro.norm_weight, pro.eps, pro.up, y, accumulate);
    linear_prologue p = pro;
    p.norm_weight = h(p.norm_weight);
    p.up = h(p.up);
    in_.linear_fused(w, h(x), p, h(y), accumulate);
  }
  void linear_add_rms_norm(const linear_weight& w, tensor_view x, tensor_view product, tensor_view r, tensor_view nw,
                           float eps, tensor_view out, tensor_view kept) override {
    note("linear_add_rms_norm", &w, x, product, r, nw, eps, out, kept);
    in_.linear_add_rms_norm(w, h(x), h(product), h(r), h(nw), eps, h(out), h(kept));
  }
  void rope(tensor_view x, tensor_view positions, const rope_params& p) override {
    note("rope", x, positions, p.theta, p.rotary_dims, p.neox);
    in_.rope(h(x), h(positions), p);
  }
  void attention(tensor_view q, tensor_view k, tensor_view v, kv_storage& kv, int layer, const attention_batch& b,
                 float scale, tensor_view out) override {
    note("attention", q, k, v, &kv, layer, batch(b), scale, out);
    in_.attention(h(q), h(k), h(v), kv, layer, host_batch(b), scale, h(out));
  }
  void silu_mul(tensor_view g, tensor_view u, tensor_view out) override {
    note("silu_mul", g, u, out);
    in_.silu_mul(h(g), h(u), h(out));
  }
  void add(tensor_view a, tensor_view b, tensor_view out) override {
    note("add", a, b, out);
    in_.add(h(a), h(b), h(out));
  }
  void gather_rows(tensor_view x, tensor_view rows, tensor_view out) override {
    note("gather_rows", x, rows, out);
    in_.gather_rows(h(x), h(rows), h(out));
  }
  void sample(tensor_view logits, std::span<const sampling_params> params, tensor_view ids) override {
    outside("sample");  // its parameters are host data of each step
    in_.sample(h(logits), params, h(ids));
  }
  void layer_norm(tensor_view x, tensor_view w, tensor_view b, float eps, tensor_view out) override {
    note("layer_norm", x, w, b, eps, out);
    in_.layer_norm(h(x), h(w), h(b), eps, h(out));
  }
  std::unique_ptr<mla_weight> load_mla(const tensor_info& kv_b, int heads, int nope, int v) override {
    outside("load_mla");
    return in_.load_mla(kv_b, heads, nope, v);
  }
  void mla_attention(tensor_view q, tensor_view kv_a, const mla_weight& w, kv_storage& kv, int layer,
                     const attention_batch& b, const mla_params& p, tensor_view topk, tensor_view out) override {
    note("mla_attention", q, kv_a, &w, &kv, layer, batch(b), p.rope_dims, p.rope_theta, p.scale, topk, out);
    in_.mla_attention(h(q), h(kv_a), w, kv, layer, host_batch(b), p, h(topk), h(out));
  }
  void dsa_indexer(tensor_view q, tensor_view k, tensor_view w, kv_storage& kv, int layer, const attention_batch& b,
                   int rope_dims, float rope_theta, int top_k, tensor_view topk) override {
    note("dsa_indexer", q, k, w, &kv, layer, batch(b), rope_dims, rope_theta, top_k, topk);
    in_.dsa_indexer(h(q), h(k), h(w), kv, layer, host_batch(b), rope_dims, rope_theta, top_k, h(topk));
  }
  std::unique_ptr<expert_weights> load_experts(std::span<const tensor_info* const> gate,
                                               std::span<const tensor_info* const> up,
                                               std::span<const tensor_info* const> down) override {
    outside("load_experts");
    return in_.load_experts(gate, up, down);
  }
  void moe_route(tensor_view logits, tensor_view bias, const moe_routing& r, tensor_view ids,
                 tensor_view weights) override {
    note("moe_route", logits, bias, r.n_experts, r.top_k, r.n_group, r.topk_group, r.norm_topk_prob,
         r.routed_scaling_factor, ids, weights);
    in_.moe_route(h(logits), h(bias), r, h(ids), h(weights));
  }
  void moe_experts(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                   tensor_view out) override {
    note("moe_experts", &w, x, ids, weights, out);
    in_.moe_experts(w, h(x), h(ids), h(weights), h(out));
  }
  // The small ops' host defaults copy and wait: run backend.cpu's (plain memcpy) outside any
  // recording only, as backend.cuda's defaults would not record either.
  void attention_full(tensor_view q, tensor_view k, tensor_view v, float scale, tensor_view out) override {
    outside("attention_full");
    in_.attention_full(h(q), h(k), h(v), scale, h(out));
  }
  void dynamic_conv(tensor_view x, tensor_view taps, tensor_view base, tensor_view out) override {
    outside("dynamic_conv");
    in_.dynamic_conv(h(x), h(taps), h(base), h(out));
  }
  void top_k(tensor_view x, int k, tensor_view ids, tensor_view values) override {
    outside("top_k");
    in_.top_k(h(x), k, h(ids), h(values));
  }

  void run_recorded(uint64_t owner, uint64_t key, const std::function<void()>& body) override {
    (void)owner;
    if (recording_) throw error("backend.record_check: run_recorded inside a recorded step");
    trace_.clear();
    recording_ = true;
    try {
      body();
    } catch (...) {
      recording_ = false;
      throw;
    }
    recording_ = false;
    auto it = traces_.find(key);
    const bool first = it == traces_.end();
    if (first) {
      traces_.emplace(key, trace_);
    } else if (trace_ != it->second) {
      size_t i = 0;
      while (i < trace_.size() && i < it->second.size() && trace_[i] == it->second[i]) ++i;
      throw error("backend.record_check: step " + std::to_string(key) + " replayed with a different trace at op " +
                  std::to_string(i) + ": recorded '" + (i < it->second.size() ? it->second[i] : "(end)") +
                  "', now '" + (i < trace_.size() ? trace_[i] : "(end)") + "'");
    }
    if (const char* path = std::getenv("TANDEM_RECORD_CHECK_LOG"))
      if (FILE* f = std::fopen(path, "a")) {
        std::fprintf(f, "%s %llu %zu\n", first ? "record" : "replay", static_cast<unsigned long long>(key),
                     trace_.size());
        std::fclose(f);
      }
  }

 private:
  static tensor_view h(tensor_view v) {
    v.dev = cpu_device;
    return v;
  }
  static attention_batch host_batch(attention_batch b) {
    for (tensor_view* v : {&b.query_start, &b.seq_lens, &b.page_table, &b.slot_mapping, &b.positions}) *v = h(*v);
    return b;
  }

  struct batch {
    const attention_batch& b;
  };
  static void put(std::ostringstream& o, const tensor_view& v) {
    o << v.data << ':' << static_cast<int>(v.type) << ':' << v.ndim << '[';
    for (int d = 0; d < v.ndim; ++d) o << v.shape[d] << '/' << v.strides[d] << ',';
    o << ']';
  }
  static void put(std::ostringstream& o, const batch& x) {
    const attention_batch& b = x.b;
    o << "batch{" << b.n_seqs << ',' << b.n_tokens << ',' << b.max_pages_per_seq << ',';
    for (const tensor_view* v : {&b.query_start, &b.seq_lens, &b.page_table, &b.slot_mapping, &b.positions}) put(o, *v);
    if (b.rope) o << ",rope{" << b.rope->theta << ',' << b.rope->rotary_dims << ',' << b.rope->neox << '}';
    o << '}';
  }
  template <class T>
  static void put(std::ostringstream& o, const T& x) {
    o << x;
  }

  template <class... A>
  void note(const char* op, const A&... args) {
    if (!recording_) return;
    std::ostringstream o;
    o << op;
    ((o << ' ', put(o, args)), ...);
    trace_.push_back(o.str());
  }
  void outside(const char* op) const {
    if (recording_) throw error(std::string("backend.record_check: ") + op + " inside a recorded step");
  }

  cpu::cpu_backend in_;
  bool recording_ = false;
  std::vector<std::string> trace_;
  std::map<uint64_t, std::vector<std::string>> traces_;
};

const config_key keys[] = {
    {"threads", config_type::integer, "0", "backend.cpu's worker threads; 0 = every core", 0, 256},
};

plugin_object* create(const plugin_context& ctx) {
  cpu::cpu_options opt;
  if (ctx.cfg != nullptr && ctx.cfg->has("threads")) opt.threads = static_cast<int>(ctx.cfg->get_int("threads"));
  return new record_check(opt);
}

// Never chosen by `plugin: auto`: a pipeline must name it.
probe_result probe() { return {0, "tests only: name backend.record_check explicitly"}; }

const plugin_descriptor descriptor{plugin_api_version,
                                   "backend.record_check",
                                   plugin_interface::backend,
                                   "tests only: backend.cpu posing as a GPU, checking that recorded steps replay",
                                   keys,
                                   std::size(keys),
                                   &probe,
                                   &create};

}  // namespace
}  // namespace tandem

TANDEM_PLUGIN(tandem::descriptor)
