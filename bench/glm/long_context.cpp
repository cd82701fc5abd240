// bench_glm_long_context: a small random glm_moe_dsa at GLM-5's attention shapes (64 heads,
// q_lora 2048, latent 512 + 64 rope, nope 192, v 256; indexer 32 heads x 128, top-2048) on a
// backend: chunked-prefill throughput up to --prefill-max tokens, and the batch-1 decode step
// at each context length, with DSA and with the same model's dense MLA (indexer off). The
// decode steps at contexts beyond the prefilled ones read a zeroed cache: their cost does not
// depend on the cached values (only the top-k's content, not its size, would change).
//
//   bench_glm_long_context [--backend backend.cuda] [--contexts 8192,131072,524288,1048576]
//                          [--prefill-max 32768] [--layers 2] [--tiny]
//
// Prints the KV pool (tokens, bytes per token, concurrency at the longest context), a table,
// and one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "glm_moe_dsa/glm_model.hpp"
#include "random_glm.hpp"
#include "tandem/backend.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"

using namespace tandem;
using clk = std::chrono::steady_clock;

namespace {

std::string config_json(int layers, bool tiny) {
  // Layer 0 dense, the rest MoE (16 experts: the attention is what this bench measures).
  if (tiny)
    return fmt::format(R"({{"model_type": "glm_moe_dsa", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
      "moe_intermediate_size": 32, "num_hidden_layers": {}, "num_attention_heads": 4, "q_lora_rank": 32,
      "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8,
      "n_shared_experts": 1, "num_experts_per_tok": 2, "index_n_heads": 8, "index_head_dim": 16, "index_topk": 64,
      "max_position_embeddings": 2097152, "first_k_dense_replace": 1, "rope_parameters": {{"rope_theta": 10000.0}}}})",
                       layers);
  return fmt::format(R"({{"model_type": "glm_moe_dsa", "vocab_size": 154880, "hidden_size": 6144,
    "intermediate_size": 12288, "moe_intermediate_size": 2048, "num_hidden_layers": {}, "num_attention_heads": 64,
    "num_key_value_heads": 64, "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64, "v_head_dim": 256, "n_routed_experts": 16, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "routed_scaling_factor": 2.5, "index_n_heads": 32, "index_head_dim": 128,
    "index_topk": 2048, "max_position_embeddings": 2097152, "first_k_dense_replace": 1,
    "rope_parameters": {{"rope_type": "default", "rope_theta": 1000000.0}}}})",
                     layers);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> r;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) r.push_back(std::stoll(item));
  return r;
}

struct runner {
  backend& be;
  model& m;
  kv_pool& pool;
  std::vector<int32_t> pages;

  void ensure(int64_t tokens) {
    if (static_cast<int64_t>(pages.size()) * pool.page_size() < tokens && !pool.grow(pages, tokens))
      throw std::runtime_error("KV pool too small");
  }
  double step(int64_t start, int64_t n) {  // seconds for one forward + sample
    ensure(start + n);
    step_plan plan;
    plan.seqs.push_back({1, start, std::vector<int32_t>(n, 7), pages, true, {}});
    const auto t0 = clk::now();
    m.forward(plan);
    m.sample({sampling_params{}});
    return std::chrono::duration<double>(clk::now() - t0).count();
  }
  double decode_ms(int64_t ctx) {
    step(ctx, 1);
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) t.push_back(step(ctx, 1));
    std::sort(t.begin(), t.end());
    return 1e3 * t[t.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string be_name = "backend.cuda";
  std::vector<int64_t> contexts{8192, 131072, 524288, 1048576};
  int64_t prefill_max = 32768, chunk = 8192;
  int layers = 2;
  bool tiny = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--backend") be_name = val();
    else if (a == "--contexts") contexts = parse_list(val());
    else if (a == "--prefill-max") prefill_max = std::stoll(val());
    else if (a == "--chunk") chunk = std::stoll(val());
    else if (a == "--layers") layers = std::stoi(val());
    else if (a == "--tiny") tiny = true;
    else {
      std::fprintf(stderr, "bench_glm_long_context: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    plugin_host host{plugin_host::default_search_path()};
    config bc;
    auto be = host.create<backend>(be_name, bc);
    bench::random_glm weights(config_json(layers, tiny));
    const int page = 64;
    const int64_t max_ctx = *std::max_element(contexts.begin(), contexts.end()) + chunk;
    glm::glm_model dsa(*be, weights, weights.config(), true);
    glm::glm_model dense(*be, weights, weights.config(), false);
    const int64_t pages = (max_ctx + page - 1) / page;
    for (glm::glm_model* m : {&dsa, &dense}) {
      m->allocate_kv(pages, page);
      const kv_spec kv = m->kv_needs();
      std::printf("%s: %s\n  KV pool %lld tokens, %lld bytes/token (%s), %.1f GiB\n", be->describe().c_str(),
                  m->info().detail.c_str(), static_cast<long long>(pages * page),
                  static_cast<long long>(kv.bytes_per_token()), kv.describe().c_str(),
                  static_cast<double>(kv.bytes_per_token()) * pages * page / (1 << 30));
    }
    std::printf("\n| context | prefill tok/s (DSA) | prefill tok/s (dense) | decode ms (DSA) | decode ms (dense) |\n"
                "| --- | --- | --- | --- | --- |\n");
    std::string js = "{\"bench\": \"glm_long_context\", \"backend\": \"" + be_name + "\", \"rows\": [";
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      const int64_t T = contexts[ci];
      double pre[2] = {-1, -1}, dec[2];
      int k = 0;
      for (glm::glm_model* m : {&dsa, &dense}) {
        kv_pool pool(pages, page);
        runner r{*be, *m, pool, {}};
        if (T <= prefill_max) {
          double s = 0;
          for (int64_t p = 0; p < T; p += chunk) s += r.step(p, std::min(chunk, T - p));
          pre[k] = static_cast<double>(T) / s;
        }
        dec[k] = r.decode_ms(T);
        ++k;
      }
      auto fmt_rate = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.0f}", v); };
      std::printf("| %lld | %s | %s | %.3f | %.3f |\n", static_cast<long long>(T), fmt_rate(pre[0]).c_str(),
                  fmt_rate(pre[1]).c_str(), dec[0], dec[1]);
      js += fmt::format("{}{{\"context\": {}, \"prefill_tok_s_dsa\": {:.1f}, \"prefill_tok_s_dense\": {:.1f}, "
                        "\"decode_ms_dsa\": {:.4f}, \"decode_ms_dense\": {:.4f}}}",
                        ci ? ", " : "", T, pre[0], pre[1], dec[0], dec[1]);
    }
    std::printf("%s]}\n", js.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_glm_long_context: %s\n", e.what());
    return 1;
  }
  return 0;
}
