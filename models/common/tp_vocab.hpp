#pragma once
// The vocabulary-parallel LM head's gather: each rank computed the logits of its run of
// vocabulary columns (split_evenly over the group); every rank gets whole rows back.
//
//   vocab_gather g;                                       // keeps its buffers between steps
//   g.gather(tp, be, local_logits, rows, vocab, logits);  // logits: f32 [rows, vocab] on be
#include <cstdint>
#include <memory>
#include <vector>

#include "tandem/backend.hpp"
#include "tp_shard.hpp"

namespace tandem {

class vocab_gather {
 public:
  // local: f32 [rows, this rank's vocabulary part] in `be`'s memory, complete (the caller
  // synchronized); out: f32 [rows, vocab] in `be`'s memory. A collective: every rank of tp
  // calls it with the same rows. On a device backend the all-gather runs on device buffers
  // (the transport takes that memory) and the columns are put in order on the host.
  void gather(const tp_group& tp, backend& be, const float* local, int64_t rows, int64_t vocab, float* out);

 private:
  std::vector<float> local_host_, mine_, all_, out_host_;
  std::unique_ptr<device_buffer> mine_dev_, all_dev_;
};

}  // namespace tandem
