// bench_logprobs: the engine's host-side logprobs (fill_logprobs: the log-softmax of a row and
// its top tokens) on rows of the default model's vocabulary (49,152 random logits), the work
// done on the engine's one thread for every row of a request that asks for logprobs. Prints
// microseconds per row for a few top counts, the median of 5 passes over 64 rows.
//
//   build/bench/engine/bench_logprobs
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "logit_processing.hpp"

using namespace tandem;

int main() {
  const int vocab = 49152, rows = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> logits(static_cast<size_t>(vocab) * rows);
  for (float& v : logits) v = nd(rng);
  std::printf("%-28s %12s\n", "top logprobs", "us per row");
  for (int top : {0, 1, 5, 20}) {
    std::vector<double> us;
    for (int pass = 0; pass < 5; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      float sink = 0;
      for (int r = 0; r < rows; ++r) {
        token_event ev;
        fill_logprobs(logits.data() + static_cast<size_t>(r) * vocab, vocab, r, top, ev);
        sink += ev.logprob;
      }
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / rows);
      if (sink == 1.0f) std::printf(" ");  // keeps the work observable
    }
    std::sort(us.begin(), us.end());
    std::printf("%-28d %12.1f\n", top, us[us.size() / 2]);
    std::printf("{\"bench\":\"logprobs\",\"vocab\":%d,\"top\":%d,\"us_per_row\":%.2f}\n", vocab, top, us[us.size() / 2]);
  }
  return 0;
}
