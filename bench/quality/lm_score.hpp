#pragma once
// Scoring a llama_model on a text, shared by the quality benches (bench_exl3_quality: a
// quantized model against its source; bench_kv_quality: KV element types against each
// other): full log-probabilities of every position of a window, and the perplexity / KL /
// top-1 agreement of one model's rows against another's.
//
//   std::vector<double> ref = window_logprobs(model_a, pool_a, vocab, ids, 0);
//   std::vector<double> cand = window_logprobs(model_b, pool_b, vocab, ids, 0);
//   divergence d;
//   d.add_window(ref, cand, ids, vocab);   // then d.ppl_reference(), d.ppl_candidate(), d.mean_kl()
#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llama_model.hpp"
#include "tandem/kv_pool.hpp"

namespace tandem::bench {

// The text and its windows, as the quality benches take them: --text, --ctx, --chunk,
// --max-tokens. Windows are non-overlapping runs of ctx tokens (no BOS added); each starts
// a fresh sequence and its positions 1..ctx-1 are scored.
struct text_windows {
  std::string text = "/usr/share/common-licenses/GPL-3";
  int ctx = 512;
  int chunk = 0;
  int64_t max_tokens = 0;

  void add_options(boost::program_options::options_description& desc);
  void check() const;                // boost::program_options::error on a bad value
  std::string read() const;          // the text file; tandem::error when unreadable
  // ids (cut to max_tokens) in windows of ctx tokens, each of at least 2; tandem::error for
  // a text of fewer than 2 tokens.
  std::vector<std::vector<int32_t>> cut(std::vector<int32_t> ids) const;
};

// Parses a quality bench's command line into vm (desc with tw's options added, then
// tw.check()): nullopt to go on, or the exit status (0 after --help, 2 after a usage error,
// both printed with the options as `prog: message`).
std::optional<int> parse_command_line(const char* prog, int argc, char** argv,
                                      boost::program_options::options_description& desc, text_windows& tw,
                                      boost::program_options::variables_map& vm);

// Log-softmax of every row of `logits` [rows, vocab], in double.
std::vector<double> log_softmax(const std::vector<float>& logits, int64_t rows, int vocab);

// Log-probabilities [ids.size(), vocab] of a fresh window (positions 0..), fed in steps of
// `chunk` tokens (0: one step) on the KV cache, all logits kept: with chunk <= 16 every
// linear runs as a decode / verification GEMV instead of the prefill GEMM, and chunk 1 runs
// the decode attention kernel. tandem::error when `pool` cannot hold the window.
std::vector<double> window_logprobs(llama_model& model, kv_pool& pool, int vocab, const std::vector<int32_t>& ids,
                                    int chunk);

// Positions 1..n-1 of windows scored under a reference and a candidate model:
//   nll   = -log p(next token)          -> perplexity = exp(mean nll), for each
//   KL    = sum_v p_ref(v) (log p_ref(v) - log p_cand(v))   -> mean KL (nats)
//   top-1 = argmax p_ref == argmax p_cand -> agreement
struct divergence {
  double nll_ref = 0, nll_cand = 0, kl = 0;
  int64_t n = 0, agree = 0;

  void add_window(const std::vector<double>& ref, const std::vector<double>& cand, const std::vector<int32_t>& ids,
                  int vocab);
  double ppl_reference() const;
  double ppl_candidate() const;
  double mean_kl() const { return n > 0 ? kl / static_cast<double>(n) : 0.0; }
  double top1() const { return n > 0 ? static_cast<double>(agree) / static_cast<double>(n) : 0.0; }
};

}  // namespace tandem::bench
