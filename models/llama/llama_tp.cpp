// llama across the ranks of a tp_group (Megatron-LM's split, as vLLM's LlamaForCausalLM
// does it): every rank keeps the whole embedding table and the norms, and
//   q/k/v   column-parallel by KV head: a rank holds a run of KV heads and their query heads
//           (uneven when the heads do not divide: SmolLM2's 3 KV heads over 2 ranks are 2 + 1);
//   o_proj  row-parallel over the same heads, then an all-reduce of the partial sums;
//   gate/up column-parallel, down row-parallel over the FFN (in whole quantization blocks),
//           then an all-reduce;
//   LM head vocabulary-parallel: a rank computes its run of vocabulary columns, and an
//           all-gather gives every rank (rank 0 samples) the whole rows.
// The collectives take the backend's memory: host memory over transport.gloo (backend.cpu),
// CUDA memory over transport.nccl (backend.cuda, ordered on its stream; one rank for now).
#include <algorithm>
#include <cstring>

#include "llama_model.hpp"
#include "tandem/error.hpp"

namespace tandem {

void llama_model::load_split_weights() {
  if (!tp_.comm || tp_.comm->world_size() != tp_.size)
    throw error("llama_model: a tensor-parallel group needs its transport (world of " + std::to_string(tp_.size) + ")");
  const int64_t hd = hp_.head_dim;
  const int64_t group = hp_full_.n_heads / hp_full_.n_kv_heads;
  const part kv = split_evenly(hp_full_.n_kv_heads, tp_.rank, tp_.size, "KV heads");
  const part q{kv.begin * group, kv.count * group};
  hp_.n_kv_heads = static_cast<int>(kv.count);
  hp_.n_heads = static_cast<int>(q.count);

  auto checked = [&](const std::string& name, int64_t out, int64_t in) -> const tensor_info& {
    const tensor_info& t = tensor(name);
    if (t.shape != std::vector<int64_t>{out, in})
      throw model_error("model", "tensor " + name + " has wrong shape for [" + std::to_string(out) + ", " +
                                     std::to_string(in) + "]");
    return t;
  };
  auto blk = [](int l, const char* what) { return "blk." + std::to_string(l) + "." + what + ".weight"; };

  // The FFN is split in whole blocks of down's type, so its columns cut cleanly.
  const int64_t ffn_block = traits(checked(blk(0, "ffn_down"), hp_.hidden, hp_full_.ffn).type).block_elems;
  if (hp_full_.ffn % ffn_block != 0)
    throw model_error("model", "FFN " + std::to_string(hp_full_.ffn) + " is not whole blocks of " +
                                   std::to_string(ffn_block));
  const part ffn_blocks = split_evenly(hp_full_.ffn / ffn_block, tp_.rank, tp_.size, "FFN blocks");
  const part ffn{ffn_blocks.begin * ffn_block, ffn_blocks.count * ffn_block};
  hp_.ffn = static_cast<int>(ffn.count);

  const int64_t qdim = int64_t(hp_full_.n_heads) * hd, kvdim = int64_t(hp_full_.n_kv_heads) * hd;
  tok_embd_ = be_.load_linear(checked("token_embd.weight", hp_.vocab, hp_.hidden));
  const tensor_info& head = weights_.find("output.weight") ? checked("output.weight", hp_.vocab, hp_.hidden)
                                                           : checked("token_embd.weight", hp_.vocab, hp_.hidden);
  vocab_part_ = split_evenly(hp_.vocab, tp_.rank, tp_.size, "vocabulary");
  lm_head_ = be_.load_linear(shards_.rows(head, vocab_part_.begin, vocab_part_.count));
  output_norm_ = norm("output_norm.weight");
  layers_.resize(hp_.n_layers);
  for (int l = 0; l < hp_.n_layers; ++l) {
    layer& L = layers_[l];
    L.attn_norm = norm(blk(l, "attn_norm"));
    L.ffn_norm = norm(blk(l, "ffn_norm"));
    const tensor_info* qkv[] = {&shards_.rows(checked(blk(l, "attn_q"), qdim, hp_.hidden), q.begin * hd, q.count * hd),
                                &shards_.rows(checked(blk(l, "attn_k"), kvdim, hp_.hidden), kv.begin * hd, kv.count * hd),
                                &shards_.rows(checked(blk(l, "attn_v"), kvdim, hp_.hidden), kv.begin * hd, kv.count * hd)};
    L.wqkv = be_.load_linear_group(qkv);
    L.wo = be_.load_linear(shards_.cols(checked(blk(l, "attn_output"), hp_.hidden, qdim), q.begin * hd, q.count * hd));
    const tensor_info* gate_up[] = {
        &shards_.rows(checked(blk(l, "ffn_gate"), hp_full_.ffn, hp_.hidden), ffn.begin, ffn.count),
        &shards_.rows(checked(blk(l, "ffn_up"), hp_full_.ffn, hp_.hidden), ffn.begin, ffn.count)};
    L.gate_up = be_.load_linear_group(gate_up);
    L.down = be_.load_linear(shards_.cols(checked(blk(l, "ffn_down"), hp_.hidden, hp_full_.ffn), ffn.begin, ffn.count));
  }
  info_.detail += ", tensor parallel rank " + std::to_string(tp_.rank) + " of " + std::to_string(tp_.size) + ": " +
                  std::to_string(q.count) + "/" + std::to_string(kv.count) + " heads, FFN " +
                  std::to_string(ffn.count) + ", vocabulary " + std::to_string(vocab_part_.begin) + "-" +
                  std::to_string(vocab_part_.begin + vocab_part_.count - 1);
}

void llama_model::reduce_partial(tensor_view partial) {
  // A backend with a stream orders the collective after the kernels that wrote `partial`
  // (the transport is bound to it); backend.cpu's partial sum must be complete first.
  if (!be_.native_stream()) be_.synchronize();
  tp_.comm->all_reduce_sum(partial);
}

void llama_model::lm_head_split(int64_t rows) {
  const size_t local_bytes = static_cast<size_t>(rows * vocab_part_.count) * 4;
  if (!tp_local_logits_ || tp_local_logits_->size() < local_bytes) tp_local_logits_ = be_.alloc(local_bytes);
  const tensor_view local = tensor_view::contiguous(tp_local_logits_->data(), dtype::f32, {rows, vocab_part_.count}, be_.dev());
  be_.linear(*lm_head_, ws_.rows_h(rows), local);
  be_.synchronize();
  vocab_.gather(tp_, be_, static_cast<const float*>(local.data), rows, hp_.vocab,
                static_cast<float*>(ws_.logits(rows).data));
}

}  // namespace tandem
