#include "lm_score.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tandem/error.hpp"

namespace tandem::bench {

void text_windows::add_options(boost::program_options::options_description& desc) {
  namespace po = boost::program_options;
  desc.add_options()("text", po::value(&text)->default_value(text), "held-out text file")
      ("ctx", po::value(&ctx)->default_value(ctx), "tokens per window (>= 2)")
      ("chunk", po::value(&chunk)->default_value(chunk),
       "tokens per forward step within a window (0 = the whole window; <= 16: the decode GEMV path; 1: the "
       "decode attention kernel)")
      ("max-tokens", po::value(&max_tokens)->default_value(max_tokens), "use at most this many text tokens (0 = all)");
}

void text_windows::check() const {
  namespace po = boost::program_options;
  if (ctx < 2) throw po::error("--ctx must be at least 2");
  if (max_tokens < 0) throw po::error("--max-tokens must be >= 0");
  if (chunk < 0) throw po::error("--chunk must be >= 0");
}

std::string text_windows::read() const {
  std::ifstream in(text, std::ios::binary);
  if (!in) throw error("cannot read the text file '" + text + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::vector<int32_t>> text_windows::cut(std::vector<int32_t> ids) const {
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  if (ids.size() < 2) throw error("the text has fewer than 2 tokens");
  std::vector<std::vector<int32_t>> out;
  for (size_t w0 = 0; w0 + 1 < ids.size(); w0 += static_cast<size_t>(ctx))
    out.emplace_back(ids.begin() + static_cast<int64_t>(w0),
                     ids.begin() + static_cast<int64_t>(std::min(ids.size(), w0 + static_cast<size_t>(ctx))));
  return out;
}

std::optional<int> parse_command_line(const char* prog, int argc, char** argv,
                                      boost::program_options::options_description& desc, text_windows& tw,
                                      boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  tw.add_options(desc);
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    tw.check();
  } catch (const po::error& e) {
    std::cerr << prog << ": " << e.what() << "\n\n" << desc << "\n";
    return 2;
  }
  return std::nullopt;
}

std::vector<double> log_softmax(const std::vector<float>& logits, int64_t rows, int vocab) {
  std::vector<double> out(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits.data() + r * vocab;
    double mx = -INFINITY;
    for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(z[i]));
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(z[i] - mx);
    const double lz = mx + std::log(sum);
    for (int i = 0; i < vocab; ++i) out[r * vocab + i] = z[i] - lz;
  }
  return out;
}

std::vector<double> window_logprobs(llama_model& model, kv_pool& pool, int vocab, const std::vector<int32_t>& ids,
                                    int chunk) {
  std::vector<int32_t> pages;
  if (!pool.grow(pages, static_cast<int64_t>(ids.size()))) throw error("KV pool too small for a window");
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : ids.size();
  std::vector<float> logits;
  for (size_t p0 = 0; p0 < ids.size(); p0 += step) {
    step_plan plan;
    const size_t p1 = std::min(ids.size(), p0 + step);
    plan.seqs.push_back({1, static_cast<int64_t>(p0), std::vector<int32_t>(ids.begin() + p0, ids.begin() + p1), pages,
                         true, {}});
    model.forward(plan, /*all_logits=*/true);
    const std::vector<float> part = model.logits_to_host();
    logits.insert(logits.end(), part.begin(), part.end());
  }
  pool.release(pages);
  return log_softmax(logits, static_cast<int64_t>(ids.size()), vocab);
}

void divergence::add_window(const std::vector<double>& ref, const std::vector<double>& cand,
                            const std::vector<int32_t>& ids, int vocab) {
  for (size_t p = 0; p + 1 < ids.size(); ++p) {
    const double* a = ref.data() + p * vocab;
    const double* b = cand.data() + p * vocab;
    const int32_t next = ids[p + 1];
    nll_ref -= a[next];
    nll_cand -= b[next];
    double k = 0;
    for (int v = 0; v < vocab; ++v) k += std::exp(a[v]) * (a[v] - b[v]);
    kl += k;
    agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    ++n;
  }
}

double divergence::ppl_reference() const { return std::exp(nll_ref / static_cast<double>(n)); }
double divergence::ppl_candidate() const { return std::exp(nll_cand / static_cast<double>(n)); }

}  // namespace tandem::bench
