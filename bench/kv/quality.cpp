// bench_kv_quality: what the KV cache's element type costs in quality. One model, one
// backend, one llama_model per type (engine.kv_dtype's f32, bf16, fp8_e4m3), each scored on a
// held-out English text with full logits of every position; every later type is compared
// with every earlier one (perplexity of both, mean KL divergence, top-1 agreement), so the
// default `--types f32,bf16,fp8_e4m3` gives bf16 against f32, fp8 against f32 and fp8
// against bf16.
//
//   build/bench/kv/bench_kv_quality --model MODEL.gguf [--backend backend.cuda]
//       [--types f32,bf16,fp8_e4m3] [--text /usr/share/common-licenses/GPL-3] [--ctx 512]
//       [--chunk 0] [--max-tokens 0] [--set key=value ...] [--json]
//
// Windows as bench_exl3_quality's (non-overlapping, --ctx tokens, no BOS). --chunk 0 feeds a
// window in one prefill step (the tensor-core prefill attention reads the pool); --chunk 1
// feeds it a token at a time (the decode attention kernel reads it). A type the backend
// cannot keep is an error (backend.cpu: f32 only). Exit 1 with a message on any bad input.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "llama_hparams.hpp"
#include "llama_model.hpp"
#include "lm_score.hpp"
#include "tandem/backend.hpp"
#include "tandem/error.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem/weight_format.hpp"

namespace po = boost::program_options;
using namespace tandem;

namespace {

dtype kv_type_named(const std::string& s) {
  for (dtype t : {dtype::f32, dtype::bf16, dtype::fp8_e4m3})
    if (name(t) == s) return t;
  throw error("--types: '" + s + "' is not a KV element type (f32, bf16, fp8_e4m3)");
}

std::vector<dtype> parse_types(const std::string& list) {
  std::vector<dtype> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    const dtype t = kv_type_named(item);
    if (std::find(out.begin(), out.end(), t) != out.end()) throw error("--types: '" + item + "' given twice");
    out.push_back(t);
  }
  if (out.size() < 2) throw error("--types: name at least two types to compare");
  return out;
}

config backend_config(plugin_host& host, const std::string& backend_name, const std::vector<std::string>& sets) {
  config cfg;
  const auto& keys = host.find(backend_name).keys();
  for (const config_key& k : keys)
    if (k.default_value) cfg.set(k.key, *parse_config_value(k.type, k.default_value));
  for (const std::string& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos) throw error("--set '" + s + "': expected key=value");
    const auto k = std::find_if(keys.begin(), keys.end(), [&](const config_key& c) { return s.substr(0, eq) == c.key; });
    if (k == keys.end()) throw error("--set: " + backend_name + " has no setting '" + s.substr(0, eq) + "'");
    const auto v = parse_config_value(k->type, s.substr(eq + 1));
    if (!v) throw error("--set " + s + ": not a valid value");
    cfg.set(k->key, *v);
  }
  return cfg;
}

struct typed_model {
  dtype type;
  std::unique_ptr<llama_model> model;
  std::unique_ptr<kv_pool> pool;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, backend_name = "backend.cuda", types_list = "f32,bf16,fp8_e4m3";
  bench::text_windows tw;
  std::vector<std::string> sets;
  po::options_description desc("bench_kv_quality --model MODEL.gguf [options]");
  desc.add_options()("help,h", "this help")
      ("model", po::value(&model_path)->required(), "a llama GGUF (weights.gguf)")
      ("types", po::value(&types_list)->default_value(types_list), "KV element types, the reference(s) first")
      ("backend", po::value(&backend_name)->default_value(backend_name), "backend plugin")
      ("set", po::value(&sets)->composing(), "backend setting key=value")
      ("json", "JSON lines instead of the table");
  po::variables_map vm;
  if (const auto rc = bench::parse_command_line("bench_kv_quality", argc, argv, desc, tw, vm)) return *rc;
  try {
    const std::vector<dtype> types = parse_types(types_list);
    const std::string text = tw.read();
    plugin_host host(plugin_host::default_search_path());
    config wc;
    wc.set("mmap", true);
    std::unique_ptr<weight_format> weights = host.create<weight_format>("weights.gguf", wc);
    weights->open(model_path);
    const llama_hparams hp = llama_hparams::from_metadata(weights->meta(), model_path);
    std::unique_ptr<backend> be = host.create<backend>(backend_name, backend_config(host, backend_name, sets));
    if (tw.ctx > hp.context) {
      std::fprintf(stderr, "bench_kv_quality: --ctx %d is beyond the model's context; using %lld\n", tw.ctx,
                   static_cast<long long>(hp.context));
      tw.ctx = static_cast<int>(hp.context);
    }
    const int page = 16;
    std::vector<typed_model> models;
    for (dtype t : types) {
      typed_model m{t, std::make_unique<llama_model>(*be, *weights, hp),
                    std::make_unique<kv_pool>((tw.ctx + page - 1) / page + 1, page)};
      m.model->set_kv_type(t);
      m.model->allocate_kv(m.pool->n_pages(), page);
      models.push_back(std::move(m));
    }
    const std::vector<std::vector<int32_t>> windows =
        tw.cut(tokenizer::from_metadata(weights->meta(), model_path).encode(text));
    const int vocab = static_cast<int>(hp.vocab);
    const auto t0 = std::chrono::steady_clock::now();
    // pairs[i][j], i < j: type j scored against type i.
    std::vector<std::vector<bench::divergence>> pairs(types.size(), std::vector<bench::divergence>(types.size()));
    for (const std::vector<int32_t>& win : windows) {
      std::vector<std::vector<double>> lp;
      for (typed_model& m : models) lp.push_back(bench::window_logprobs(*m.model, *m.pool, vocab, win, tw.chunk));
      for (size_t i = 0; i < types.size(); ++i)
        for (size_t j = i + 1; j < types.size(); ++j) pairs[i][j].add_window(lp[i], lp[j], win, vocab);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!vm.count("json"))
      std::printf("%s on %s; text %s (%zu windows of up to %d tokens, chunk %d)\n", model_path.c_str(),
                  be->describe().c_str(), tw.text.c_str(), windows.size(), tw.ctx, tw.chunk);
    for (size_t i = 0; i < types.size(); ++i) {
      for (size_t j = i + 1; j < types.size(); ++j) {
        const bench::divergence& d = pairs[i][j];
        const std::string ref(name(types[i])), cand(name(types[j]));
        if (vm.count("json")) {
          std::printf("{\"bench\": \"kv_quality\", \"reference\": \"%s\", \"candidate\": \"%s\", \"tokens\": %lld, "
                      "\"ctx\": %d, \"chunk\": %d, \"ppl_reference\": %.6f, \"ppl_candidate\": %.6f, "
                      "\"mean_kl\": %.6g, \"top1_agreement\": %.6f, \"seconds\": %.1f}\n",
                      ref.c_str(), cand.c_str(), static_cast<long long>(d.n), tw.ctx, tw.chunk, d.ppl_reference(),
                      d.ppl_candidate(), d.mean_kl(), d.top1(), secs);
        } else {
          std::printf("%-8s against %-8s perplexity %.4f vs %.4f; mean KL %.3g nats; top-1 agreement %.2f%% "
                      "(%lld positions)\n",
                      cand.c_str(), ref.c_str(), d.ppl_candidate(), d.ppl_reference(), d.mean_kl(), 100.0 * d.top1(),
                      static_cast<long long>(d.n));
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_kv_quality: error: " << e.what() << "\n";
    return 1;
  }
}
