// bench_exl3_quality: perplexity and mean KL divergence of a quantized EXL3 model against its
// source, both run through tandem itself (weights plugin -> llama_model on a backend, full
// logits of every position), over a held-out English text.
//
//   build/bench/exl3/bench_exl3_quality --source MODEL.gguf --quantized DIR
//       [--text /usr/share/common-licenses/GPL-3] [--ctx 512] [--chunk 0] [--max-tokens 0]
//       [--backend backend.cpu] [--set key=value ...] [--quantized-set key=value ...] [--json]
//
// The text is tokenized with the source model's tokenizer (the quantized directory's
// tokenizer.json must give the same ids: checked, an error otherwise) and cut into windows
// of --ctx tokens (at most the model's context); each window starts fresh, and positions 1..ctx-1 of it are scored
// (non-overlapping windows; no BOS is added). Per scored position:
//   nll   = -log p(next token)          -> perplexity = exp(mean nll), for each model
//   KL    = sum_v p_src(v) (log p_src(v) - log p_q(v))   -> mean KL (nats)
//   top-1 = argmax p_src == argmax p_q  -> agreement
// Both models sit on the same backend (--backend, default backend.cpu with exact float
// linears; --set sets that backend's settings for both, --quantized-set for the quantized
// model's only, e.g. to measure backend.cuda's int8-activation EXL3 GEMV against an exact
// source). Exit 1 with a message on any bad input.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "llama_hparams.hpp"
#include "llama_model.hpp"
#include "tandem/backend.hpp"
#include "tandem/error.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem/weight_format.hpp"

namespace po = boost::program_options;
using namespace tandem;

namespace {

config defaults_of(plugin_host& host, const std::string& name) {
  config cfg;
  for (const config_key& k : host.find(name).keys())
    if (k.default_value) cfg.set(k.key, *parse_config_value(k.type, k.default_value));
  return cfg;
}

struct loaded {
  std::unique_ptr<weight_format> weights;
  std::unique_ptr<backend> be;
  std::unique_ptr<llama_model> model;
  std::unique_ptr<kv_pool> pool;
  std::unique_ptr<tokenizer> tok;
  llama_hparams hp;
};

loaded load(plugin_host& host, const std::string& weights_plugin, const std::string& path,
            const std::string& backend_name, const config& bcfg, int ctx) {
  loaded l;
  l.weights = host.create<weight_format>(weights_plugin, defaults_of(host, weights_plugin));
  l.weights->open(path);
  l.hp = llama_hparams::from_metadata(l.weights->meta(), path);
  l.tok = std::make_unique<tokenizer>(tokenizer::from_metadata(l.weights->meta(), path));
  l.be = host.create<backend>(backend_name, bcfg);
  const int page = 16;
  l.pool = std::make_unique<kv_pool>((ctx + page - 1) / page + 1, page);
  l.model = std::make_unique<llama_model>(*l.be, *l.weights, l.hp, l.pool->n_pages(), page);
  return l;
}

// Log-softmax of every row of `logits` [rows, vocab], in double.
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

// The window in steps of `chunk` tokens (0: one step) on the KV cache, all logits kept: with
// chunk <= 16 every linear runs as a decode / verification GEMV instead of the prefill GEMM.
std::vector<double> window_logprobs(loaded& l, const std::vector<int32_t>& ids, int chunk) {
  std::vector<int32_t> pages;
  if (!l.pool->grow(pages, static_cast<int64_t>(ids.size()))) throw error("KV pool too small for a window");
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : ids.size();
  std::vector<float> logits;
  for (size_t p0 = 0; p0 < ids.size(); p0 += step) {
    step_plan plan;
    const size_t p1 = std::min(ids.size(), p0 + step);
    plan.seqs.push_back({1, static_cast<int64_t>(p0), std::vector<int32_t>(ids.begin() + p0, ids.begin() + p1), pages,
                         true, {}});
    l.model->forward(plan, /*all_logits=*/true);
    const std::vector<float> part = l.model->logits_to_host();
    logits.insert(logits.end(), part.begin(), part.end());
  }
  l.pool->release(pages);
  return log_softmax(logits, static_cast<int64_t>(ids.size()), static_cast<int>(l.hp.vocab));
}

}  // namespace

int main(int argc, char** argv) {
  std::string source, quantized, text = "/usr/share/common-licenses/GPL-3", backend_name = "backend.cpu";
  int ctx = 512, chunk = 0;
  int64_t max_tokens = 0;
  std::vector<std::string> sets, qsets;
  po::options_description desc("bench_exl3_quality --source MODEL.gguf --quantized DIR [options]");
  desc.add_options()("help,h", "this help")
      ("source", po::value(&source)->required(), "the source GGUF (weights.gguf)")
      ("quantized", po::value(&quantized)->required(), "the EXL3 directory (weights.exl3)")
      ("text", po::value(&text)->default_value(text), "held-out text file")
      ("ctx", po::value(&ctx)->default_value(ctx), "tokens per window (>= 2)")
      ("chunk", po::value(&chunk)->default_value(0),
       "tokens per forward step within a window (0 = the whole window; <= 16: the decode GEMV path)")
      ("max-tokens", po::value(&max_tokens)->default_value(0), "use at most this many text tokens (0 = all)")
      ("backend", po::value(&backend_name)->default_value(backend_name), "backend plugin for both models")
      ("set", po::value(&sets)->composing(), "backend setting key=value (backend.cpu default here: linear=float)")
      ("quantized-set", po::value(&qsets)->composing(), "backend setting key=value for the quantized model only")
      ("json", "one JSON line instead of the table");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (ctx < 2) throw po::error("--ctx must be at least 2");
    if (max_tokens < 0) throw po::error("--max-tokens must be >= 0");
    if (chunk < 0) throw po::error("--chunk must be >= 0");
  } catch (const po::error& e) {
    std::cerr << "bench_exl3_quality: " << e.what() << "\n\n" << desc << "\n";
    return 2;
  }
  try {
    std::ifstream in(text, std::ios::binary);
    if (!in) throw error("cannot read the text file '" + text + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    plugin_host host(plugin_host::default_search_path());
    config bcfg = defaults_of(host, backend_name);
    if (backend_name == "backend.cpu") bcfg.set("linear", std::string("float"));
    auto apply = [&](config& cfg, const std::vector<std::string>& list, const char* opt) {
      for (const std::string& s : list) {
        const auto eq = s.find('=');
        if (eq == std::string::npos) throw error(std::string(opt) + " '" + s + "': expected key=value");
        const std::string key = s.substr(0, eq);
        const config_key* k = nullptr;
        for (const config_key& c : host.find(backend_name).keys())
          if (key == c.key) k = &c;
        if (!k) throw error(std::string(opt) + ": " + backend_name + " has no setting '" + key + "'");
        const auto v = parse_config_value(k->type, s.substr(eq + 1));
        if (!v) throw error(std::string(opt) + " " + s + ": not a valid value");
        cfg.set(key, *v);
      }
    };
    apply(bcfg, sets, "--set");
    config qcfg = bcfg;
    apply(qcfg, qsets, "--quantized-set");
    const auto t0 = std::chrono::steady_clock::now();
    loaded src = load(host, "weights.gguf", source, backend_name, bcfg, ctx);
    loaded q = load(host, "weights.exl3", quantized, backend_name, qcfg, ctx);
    if (src.hp.vocab != q.hp.vocab || src.hp.n_layers != q.hp.n_layers || src.hp.hidden != q.hp.hidden)
      throw error("the quantized model's shape (vocab, layers, hidden) differs from the source's");
    if (ctx > src.hp.context) {
      std::fprintf(stderr, "bench_exl3_quality: --ctx %d is beyond the model's context; using %lld\n", ctx,
                   static_cast<long long>(src.hp.context));
      ctx = static_cast<int>(src.hp.context);
    }
    std::vector<int32_t> ids = src.tok->encode(ss.str());
    if (q.tok->encode(ss.str()) != ids)
      throw error("the quantized directory's tokenizer tokenizes the text differently from the source's");
    if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
    if (ids.size() < 2) throw error("the text has fewer than 2 tokens");
    const int vocab = static_cast<int>(src.hp.vocab);
    double nll_src = 0, nll_q = 0, kl = 0;
    int64_t n = 0, agree = 0;
    for (size_t w0 = 0; w0 + 1 < ids.size(); w0 += static_cast<size_t>(ctx)) {
      std::vector<int32_t> win(ids.begin() + static_cast<int64_t>(w0),
                               ids.begin() + static_cast<int64_t>(std::min(ids.size(), w0 + ctx)));
      if (win.size() < 2) break;
      const std::vector<double> ls = window_logprobs(src, win, chunk), lq = window_logprobs(q, win, chunk);
      for (size_t p = 0; p + 1 < win.size(); ++p) {
        const double* a = ls.data() + p * vocab;
        const double* b = lq.data() + p * vocab;
        const int32_t next = win[p + 1];
        nll_src -= a[next];
        nll_q -= b[next];
        double k = 0;
        for (int v = 0; v < vocab; ++v) k += std::exp(a[v]) * (a[v] - b[v]);
        kl += k;
        agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
        ++n;
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ppl_s = std::exp(nll_src / n), ppl_q = std::exp(nll_q / n);
    if (vm.count("json")) {
      std::printf("{\"tokens\": %lld, \"ctx\": %d, \"ppl_source\": %.6f, \"ppl_quantized\": %.6f, "
                  "\"mean_kl\": %.6g, \"top1_agreement\": %.6f, \"seconds\": %.1f}\n",
                  static_cast<long long>(n), ctx, ppl_s, ppl_q, kl / n, static_cast<double>(agree) / n, secs);
    } else {
      std::printf("text: %s (%zu tokens; %lld scored in windows of %d)\n", text.c_str(), ids.size(),
                  static_cast<long long>(n), ctx);
      std::printf("perplexity source %.4f, quantized %.4f; mean KL %.6f nats; top-1 agreement %.2f%%  (%.1f s)\n",
                  ppl_s, ppl_q, kl / n, 100.0 * agree / n, secs);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_exl3_quality: error: " << e.what() << "\n";
    return 1;
  }
}
