#pragma once
// Per-op GPU time of backend.cuda, for finding where a step's time goes: with
// TANDEM_CUDA_PROFILE=1 every op run outside a graph capture is bracketed by CUDA events
// and waited for, and the backend keeps count, total and share per op name. That
// serialises the host with the GPU, so it measures kernels, not throughput; graphs are
// not recorded while it is on.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace tandem::cuda {

class op_profiler {
 public:
  bool enabled() const { return enabled_; }
  void enable(bool on) { enabled_ = on; }
  void reset() { ops_.clear(); }

  // Brackets one op on `stream`; a no-op when disabled.
  class scope {
   public:
    scope(op_profiler& p, const char* op, cudaStream_t stream) : p_(p.enabled_ ? &p : nullptr), op_(op), s_(stream) {
      if (!p_) return;
      cudaEventCreate(&a_);
      cudaEventCreate(&b_);
      cudaEventRecord(a_, s_);
    }
    ~scope() {
      if (!p_) return;
      cudaEventRecord(b_, s_);
      cudaEventSynchronize(b_);
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, a_, b_) == cudaSuccess) {
        auto& e = p_->ops_[op_];
        e.count += 1;
        e.ms += ms;
      }
      cudaEventDestroy(a_);
      cudaEventDestroy(b_);
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    op_profiler* p_;
    const char* op_;
    cudaStream_t s_;
    cudaEvent_t a_ = nullptr, b_ = nullptr;
  };

  // "op  calls  total us  us/call  share", largest first.
  std::string report() const {
    std::vector<std::pair<std::string, entry>> v(ops_.begin(), ops_.end());
    std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second.ms > y.second.ms; });
    double total = 0.0;
    for (const auto& [k, e] : v) total += e.ms;
    std::string out;
    char line[160];
    std::snprintf(line, sizeof line, "%-26s %8s %12s %10s %7s\n", "op", "calls", "total us", "us/call", "share");
    out += line;
    for (const auto& [k, e] : v) {
      std::snprintf(line, sizeof line, "%-26s %8ld %12.1f %10.2f %6.1f%%\n", k.c_str(), e.count, e.ms * 1e3,
                    e.ms * 1e3 / static_cast<double>(e.count), total > 0 ? 100.0 * e.ms / total : 0.0);
      out += line;
    }
    return out;
  }

 private:
  struct entry {
    long count = 0;
    double ms = 0.0;
  };
  bool enabled_ = false;
  std::map<std::string, entry> ops_;
};

}  // namespace tandem::cuda
