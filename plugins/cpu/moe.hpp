#pragma once
// backend.cpu's mixture of experts: the routed experts' weights and the sigmoid router
// (see moe_routing in backend.hpp). moe_experts itself is in cpu_ops_families.cpp: it runs
// each expert's linears on the rows routed to it through cpu_backend::linear.
#include <cstdint>
#include <memory>
#include <vector>

#include "tandem/backend.hpp"
#include "thread_pool.hpp"
#include "views.hpp"

namespace tandem::cpu {

class cpu_experts final : public expert_weights {
 public:
  struct expert {
    std::unique_ptr<linear_weight> gate, up, down;  // {ffn, hidden}, {ffn, hidden}, {hidden, ffn}
  };
  cpu_experts(std::vector<expert> experts, int64_t hidden, int64_t ffn);

  int n_experts() const override { return static_cast<int>(experts_.size()); }
  int64_t hidden() const override { return hidden_; }
  int64_t ffn() const override { return ffn_; }
  const expert& at(int e) const { return experts_[e]; }

 private:
  std::vector<expert> experts_;
  int64_t hidden_, ffn_;
};

// Throws tandem::error ("backend.cpu moe_route: ...") unless r is a valid routing.
void check_routing(const moe_routing& r);

// One token: logits [n_experts], bias [n_experts] or nullptr (no correction) -> ids and
// weights [top_k], the best choice score first. Ties prefer the lower group / expert index.
void route_row(const float* logits, const float* bias, const moe_routing& r, int32_t* ids, float* weights);

void run_moe_route(thread_pool& pool, const rows_view& logits, const float* bias, const moe_routing& r,
                   const i32_rows_view& ids, const rows_view& weights);

}  // namespace tandem::cpu
