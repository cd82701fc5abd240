#pragma once
// The tiny GLM-5-family model as the glm tests drive it: a weight plugin opened on a
// directory, a backend, the model, and a small paged KV pool (4-token pages, so every prompt
// spans several); step() runs one forward over several sequences and returns the logits.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "registry.hpp"
#include "tandem/backend.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::test {

struct glm_stack {
  plugin_host host{plugin_host::default_search_path()};
  std::unique_ptr<weight_format> weights;
  std::unique_ptr<backend> be;
  std::unique_ptr<model> m;
  kv_pool pool{512, 4};

  glm_stack(const std::string& weights_plugin, const std::string& dir, const std::string& backend_name,
            const std::string& model_name) {
    config wc, bc;
    weights = host.create<weight_format>(weights_plugin, wc);
    weights->open(dir);
    if (backend_name == "backend.cpu") bc.set("threads", int64_t{0});
    be = host.create<backend>(backend_name, bc);
    m = create_model(*be, *weights, model_name);
    m->allocate_kv(pool.n_pages(), pool.page_size());
  }
  int64_t vocab() const { return m->info().vocab; }

  // One sequence's part of a step: its pages (grown as needed), first position, tokens.
  struct part {
    std::vector<int32_t>* pages;
    int64_t start;
    std::vector<int32_t> tokens;
  };
  // Every token's logits (all) or each sequence's last.
  std::vector<float> step(const std::vector<part>& parts, bool all) {
    step_plan plan;
    uint64_t id = 1;
    for (const part& p : parts) {
      BOOST_REQUIRE(pool.grow(*p.pages, p.start + static_cast<int64_t>(p.tokens.size())));
      plan.seqs.push_back({id++, p.start, p.tokens, *p.pages, true, {}});
    }
    forward_options o;
    o.all_logits = all;
    m->forward(plan, o);
    return m->logits_to_host();
  }
};

}  // namespace tandem::test
