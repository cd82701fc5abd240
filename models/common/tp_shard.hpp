#pragma once
// Tensor parallel: which part of a layer a rank holds, and the weight slices it loads.
//
//   tp_group tp{.rank = 1, .size = 2, .comm = &transport};
//   part kv = split_evenly(n_kv_heads, tp.rank, tp.size);        // this rank's KV heads
//   shard_store shards;                                           // owns sliced copies
//   be.load_linear(shards.rows(wq, kv.begin * group * hd, kv.count * group * hd));  // column-parallel
//   be.load_linear(shards.cols(wo, ...));                                          // row-parallel
//
// Column-parallel linears (q/k/v, gate/up, the LM head) keep a slice of the output features:
// rows of the {out, in} weight. Row-parallel linears (o_proj, down) keep a slice of the input
// features: columns, cut at block boundaries of a quantized type; their outputs are partial
// sums that an all-reduce completes (Megatron-LM's split, as vLLM and SGLang do it).
#include <cstdint>
#include <deque>
#include <vector>

#include "part.hpp"
#include "pp_stage.hpp"
#include "tandem/transport.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

struct tp_group {
  int rank = 0;
  int size = 1;
  transport* comm = nullptr;  // null: no tensor split
  // Ranks of the group that split a MoE layer's routed experts by expert id (the rest of
  // the layer stays tensor parallel); 1: every rank holds a slice of every expert. Today
  // either 1 or size (topology.expert_parallel).
  int expert_parallel = 1;
  // This rank's pipeline stage (pp_stage.hpp): the run of layers it holds. Today a model is
  // split either by tensor (size > 1) or by pipeline stage (pp.stages > 1), not both.
  pp_stage pp;

  // The model runs the split path (its shares, its collectives on comm): several ranks, or
  // one rank over a transport that runs its collectives (transport.nccl on one GPU).
  bool split() const { return size > 1 || comm != nullptr; }
};

// Host copies of weight slices. Every tensor_info it returns (and the memory behind it)
// lives as long as the store, so a backend that keeps pointers into host weights may use it.
class shard_store {
 public:
  // Rows [begin, begin + count) of a 2-D {out, in} tensor (output features).
  const tensor_info& rows(const tensor_info& t, int64_t begin, int64_t count);
  // Columns [begin, begin + count) of a 2-D {out, in} tensor (input features); model_error
  // when the cut does not fall on a block boundary of a quantized type.
  const tensor_info& cols(const tensor_info& t, int64_t begin, int64_t count);

 private:
  const tensor_info& keep(const tensor_info& t, std::vector<int64_t> shape, std::vector<uint8_t> bytes,
                          const char* how, int64_t begin, int64_t count);
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<tensor_info> infos_;
};

}  // namespace tandem
