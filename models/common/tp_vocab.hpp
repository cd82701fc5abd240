#pragma once
// The vocabulary-parallel LM head's gather: each rank computed the logits of its run of
// vocabulary columns (split_evenly over the group); every rank gets whole rows back.
//
//   vocab_gather g;                                    // keeps its buffers between steps
//   g.gather(tp, local_logits, rows, vocab, out);      // out: f32 [rows, vocab], host memory
#include <cstdint>
#include <vector>

#include "tp_shard.hpp"

namespace tandem {

class vocab_gather {
 public:
  // local: f32 [rows, this rank's vocabulary part] in host memory; out: f32 [rows, vocab].
  // A collective: every rank of tp calls it with the same rows.
  void gather(const tp_group& tp, const float* local, int64_t rows, int64_t vocab, float* out);

 private:
  std::vector<float> mine_, all_;
};

}  // namespace tandem
