#pragma once
// Minimal objects for the host's test plugins: they exist so that create<I>() and the
// dynamic_cast across the library boundary can be checked. Operations the tests never
// call throw tandem::error.
#include <memory>
#include <string>

#include "tandem/backend.hpp"
#include "tandem/drafter.hpp"
#include "tandem/error.hpp"
#include "tandem/scheduler.hpp"
#include "tandem/transport.hpp"
#include "tandem/weight_format.hpp"

namespace tandem_test {

using namespace tandem;

[[noreturn]] inline void unused(const char* op) {
  throw error(std::string("test plugin: ") + op + " is not part of the test double");
}

// Runs every waiting request's whole remainder, up to max_batch requests.
class test_scheduler final : public scheduler {
 public:
  explicit test_scheduler(const config& cfg) : max_batch_(cfg.get_int("max_batch")) {}
  sched_decision schedule(const sched_state& s) override {
    sched_decision d;
    for (const auto* list : {&s.running, &s.waiting})
      for (const sched_request& r : *list)
        if (static_cast<int64_t>(d.items.size()) < max_batch_ && r.remaining() > 0)
          d.items.push_back({r.id, r.remaining()});
    return d;
  }

 private:
  int64_t max_batch_;
};

class test_backend : public backend {  // not final: tests give it other kv_types()
 public:
  device dev() const override { return cpu_device; }
  std::string describe() const override { return "test backend"; }
  dtype activation_type() const override { return dtype::f32; }
  size_t memory_budget() const override { return 0; }
  std::unique_ptr<device_buffer> alloc(size_t) override { unused("alloc"); }
  void copy_to_device(void*, const void*, size_t) override { unused("copy_to_device"); }
  void copy_to_host(void*, const void*, size_t) override { unused("copy_to_host"); }
  void synchronize() override {}
  std::unique_ptr<linear_weight> load_linear(const tensor_info&) override { unused("load_linear"); }
  std::unique_ptr<device_buffer> load_tensor(const tensor_info&, dtype) override {
    unused("load_tensor");
  }
  std::unique_ptr<kv_storage> alloc_kv(const kv_layout&) override { unused("alloc_kv"); }
  void embed(const linear_weight&, tensor_view, tensor_view) override { unused("embed"); }
  void rms_norm(tensor_view, tensor_view, float, tensor_view) override { unused("rms_norm"); }
  void add_rms_norm(tensor_view, tensor_view, tensor_view, float, tensor_view) override {
    unused("add_rms_norm");
  }
  void linear(const linear_weight&, tensor_view, tensor_view) override { unused("linear"); }
  void rope(tensor_view, tensor_view, const rope_params&) override { unused("rope"); }
  void attention(tensor_view, tensor_view, tensor_view, kv_storage&, int, const attention_batch&,
                 float, tensor_view) override {
    unused("attention");
  }
  void silu_mul(tensor_view, tensor_view, tensor_view) override { unused("silu_mul"); }
  void add(tensor_view, tensor_view, tensor_view) override { unused("add"); }
  void gather_rows(tensor_view, tensor_view, tensor_view) override { unused("gather_rows"); }
  void sample(tensor_view, std::span<const sampling_params>, tensor_view) override {
    unused("sample");
  }
};

class test_weights final : public weight_format {
 public:
  void open(const std::filesystem::path& p) override { throw model_error(p.string(), "test double"); }
  const model_metadata& meta() const override { unused("meta"); }
  std::span<const tensor_info> tensors() const override { return {}; }
  const tensor_info* find(std::string_view) const override { return nullptr; }
};

// One rank: every collective is the identity.
class test_transport final : public transport {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void broadcast(std::vector<uint8_t>&, int) override {}
  void all_reduce_sum(tensor_view) override {}
  void all_gather(tensor_view, tensor_view) override { unused("all_gather"); }
  using transport::all_to_all;
  void all_to_all(tensor_view, std::span<const int64_t>, tensor_view, std::span<const int64_t>) override {
    unused("all_to_all");
  }
  void send(tensor_view, int) override { unused("send"); }
  void recv(tensor_view, int) override { unused("recv"); }
  void barrier() override {}
  bool identity() const override { return true; }
};

// Proposes the last token again, k times.
class test_drafter final : public drafter {
 public:
  explicit test_drafter(const config& cfg) : k_(static_cast<int>(cfg.get_int("k"))) {}
  draft_limits limits() const override { return {k_, 0}; }
  std::vector<int32_t> propose(uint64_t, const draft_context& ctx) override {
    if (ctx.tokens.empty()) return {};
    return std::vector<int32_t>(std::min(k_, ctx.max_draft), ctx.tokens.back());
  }

 private:
  int k_;
};

}  // namespace tandem_test
