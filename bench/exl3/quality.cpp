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
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lm_score.hpp"
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

}  // namespace

int main(int argc, char** argv) {
  std::string source, quantized, backend_name = "backend.cpu";
  bench::text_windows tw;
  std::vector<std::string> sets, qsets;
  po::options_description desc("bench_exl3_quality --source MODEL.gguf --quantized DIR [options]");
  desc.add_options()("help,h", "this help")
      ("source", po::value(&source)->required(), "the source GGUF (weights.gguf)")
      ("quantized", po::value(&quantized)->required(), "the EXL3 directory (weights.exl3)")
      ("backend", po::value(&backend_name)->default_value(backend_name), "backend plugin for both models")
      ("set", po::value(&sets)->composing(), "backend setting key=value (backend.cpu default here: linear=float)")
      ("quantized-set", po::value(&qsets)->composing(), "backend setting key=value for the quantized model only")
      ("json", "one JSON line instead of the table");
  po::variables_map vm;
  if (const auto rc = bench::parse_command_line("bench_exl3_quality", argc, argv, desc, tw, vm)) return *rc;
  try {
    const std::string text = tw.read();
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
    loaded src = load(host, "weights.gguf", source, backend_name, bcfg, tw.ctx);
    loaded q = load(host, "weights.exl3", quantized, backend_name, qcfg, tw.ctx);
    if (src.hp.vocab != q.hp.vocab || src.hp.n_layers != q.hp.n_layers || src.hp.hidden != q.hp.hidden)
      throw error("the quantized model's shape (vocab, layers, hidden) differs from the source's");
    if (tw.ctx > src.hp.context) {
      std::fprintf(stderr, "bench_exl3_quality: --ctx %d is beyond the model's context; using %lld\n", tw.ctx,
                   static_cast<long long>(src.hp.context));
      tw.ctx = static_cast<int>(src.hp.context);
    }
    const std::vector<int32_t> ids = src.tok->encode(text);
    if (q.tok->encode(text) != ids)
      throw error("the quantized directory's tokenizer tokenizes the text differently from the source's");
    const int vocab = static_cast<int>(src.hp.vocab);
    bench::divergence d;
    for (const std::vector<int32_t>& win : tw.cut(ids))
      d.add_window(bench::window_logprobs(*src.model, *src.pool, vocab, win, tw.chunk),
                   bench::window_logprobs(*q.model, *q.pool, vocab, win, tw.chunk), win, vocab);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ppl_s = d.ppl_reference(), ppl_q = d.ppl_candidate();
    const auto n = d.n;
    if (vm.count("json")) {
      std::printf("{\"tokens\": %lld, \"ctx\": %d, \"ppl_source\": %.6f, \"ppl_quantized\": %.6f, "
                  "\"mean_kl\": %.6g, \"top1_agreement\": %.6f, \"seconds\": %.1f}\n",
                  static_cast<long long>(n), tw.ctx, ppl_s, ppl_q, d.mean_kl(), d.top1(), secs);
    } else {
      std::printf("text: %s (%zu tokens; %lld scored in windows of %d)\n", tw.text.c_str(), ids.size(),
                  static_cast<long long>(n), tw.ctx);
      std::printf("perplexity source %.4f, quantized %.4f; mean KL %.6f nats; top-1 agreement %.2f%%  (%.1f s)\n",
                  ppl_s, ppl_q, d.mean_kl(), 100.0 * d.top1(), secs);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_exl3_quality: error: " << e.what() << "\n";
    return 1;
  }
}
