#define BOOST_TEST_MODULE glm_exl3_backends
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

// The tiny GLM-5-family model quantized to EXL3, end to end on backend.cuda (issue 15): the
// test quantizes tests/fixtures/glm_moe_dsa/tiny with `tandem quantize --to exl3 --bits 4`
// (the quantizer and weights.exl3's CPU path are checked against an independent numpy decoder
// and the source model by tests/e2e/glm_exl3_e2e.py), loads the result through weights.exl3
// on backend.cpu and on backend.cuda, and compares:
//  - the full-vocabulary logits at every position of each reference prompt (prompts longer
//    than index_topk take DSA's sparse path; the routed experts run the EXL3 fat-expert
//    kernel, the MLA and indexer projections the EXL3 GEMM/GEMV);
//  - greedy decoding one token a step over the paged latent and indexer caches, up to the
//    CPU's first near-tie (margin below twice the tolerance);
//  - a mixed batch (one prefill, one decode) against each sequence alone on backend.cuda.
// backend.cuda decodes the trellis to f16 and runs f16 tensor-core GEMMs (prefill) and
// GEMVs with 8-bit activations (decode), backend.cpu everything in f32: the tolerance is
// $TANDEM_GLM_EXL3_TOL (default 2e-2).
//
// Environment: TANDEM_EXE (the tandem CLI), TANDEM_FIXTURES, TANDEM_PLUGIN_PATH;
// TANDEM_GLM_EXL3_DIR names an already quantized directory (skips quantizing). Exits 77
// when the tested backend cannot be made here.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

#include "registry.hpp"
#include "tandem/backend.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/weight_format.hpp"

using namespace tandem;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// The backend under test: backend.cuda ($TANDEM_GLM_EXL3_BACKEND names another, e.g.
// backend.cpu against itself to check the test's own logic on a machine without a GPU).
std::string tested() {
  const char* b = std::getenv("TANDEM_GLM_EXL3_BACKEND");
  return b ? b : "backend.cuda";
}

const float tol = std::getenv("TANDEM_GLM_EXL3_TOL") ? std::stof(std::getenv("TANDEM_GLM_EXL3_TOL")) : 2e-2f;

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  BOOST_REQUIRE_MESSAGE(v, name << " is not set");
  return v;
}

// The directory this run quantized into (removed after a passing run), empty until then.
std::string made_here;

// The quantized model, made once per run (the tile coder on the GPU when there is one).
const std::string& exl3_dir() {
  static const std::string dir = [] {
    if (const char* d = std::getenv("TANDEM_GLM_EXL3_DIR")) return std::string(d);
    const fs::path out = fs::temp_directory_path() / ("tandem_glm_exl3_" + std::to_string(::getpid()));
    fs::remove_all(out);
    const std::string cmd = env_or_fail("TANDEM_EXE") + " quantize --to exl3 --bits 4 --device auto --no-progress --out " +
                            out.string() + " " + env_or_fail("TANDEM_FIXTURES") + "/glm_moe_dsa/tiny > " + out.string() +
                            ".log 2>&1";
    const int rc = std::system(cmd.c_str());
    BOOST_REQUIRE_MESSAGE(rc == 0, "tandem quantize failed (" << rc << "), see " << out.string() << ".log");
    made_here = out.string();
    return made_here;
  }();
  return dir;
}

std::vector<std::vector<int32_t>> reference_prompts() {
  std::ifstream in(env_or_fail("TANDEM_FIXTURES") + "/glm_moe_dsa/tiny_reference.json");
  BOOST_REQUIRE(in);
  const json::value ref = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  std::vector<std::vector<int32_t>> r;
  for (const json::value& p : ref.at("prompts").as_array()) {
    std::vector<int32_t> ids;
    for (const auto& x : p.at("token_ids").as_array()) ids.push_back(static_cast<int32_t>(x.to_number<int64_t>()));
    r.push_back(std::move(ids));
  }
  return r;
}

struct stack {
  plugin_host host{plugin_host::default_search_path()};
  std::unique_ptr<weight_format> weights;
  std::unique_ptr<backend> be;
  std::unique_ptr<model> m;
  kv_pool pool{512, 4};  // small pages: every prompt spans several

  explicit stack(const std::string& backend_name) {
    config wc, bc;
    weights = host.create<weight_format>("weights.exl3", wc);
    weights->open(exl3_dir());
    if (backend_name == "backend.cpu") bc.set("threads", int64_t{0});
    be = host.create<backend>(backend_name, bc);
    m = create_model(*be, *weights, "tiny-exl3");
    m->allocate_kv(pool.n_pages(), pool.page_size());
  }
  int64_t vocab() const { return m->info().vocab; }

  struct part {
    std::vector<int32_t>* pages;
    int64_t start;
    std::vector<int32_t> tokens;
  };
  // One step over several sequences; every token's logits (all) or each sequence's last.
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

float max_diff(const float* a, const float* b, int64_t n) {
  float d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

float scale(const float* a, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s = std::max(s, std::fabs(a[i]));
  return s;
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// The gap between the best and the second-best logit.
float margin(const float* row, int64_t n) {
  std::vector<float> v(row, row + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

}  // namespace

BOOST_AUTO_TEST_CASE(cuda_matches_cpu_on_the_exl3_model) {
  stack cpu("backend.cpu"), gpu(tested());
  const int64_t V = cpu.vocab();
  BOOST_REQUIRE_EQUAL(gpu.vocab(), V);
  int sparse = 0, agreed = 0;
  for (const std::vector<int32_t>& ids : reference_prompts()) {
    if (ids.size() > 8) ++sparse;
    std::vector<int32_t> pc, pg;
    const std::vector<float> want = cpu.step({{&pc, 0, ids}}, true);
    const std::vector<float> got = gpu.step({{&pg, 0, ids}}, true);
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    const float worst = max_diff(got.data(), want.data(), static_cast<int64_t>(want.size()));
    BOOST_TEST_MESSAGE(ids.size() << " tokens: logits max |diff| " << worst << " (logit scale "
                                  << scale(want.data(), static_cast<int64_t>(want.size())) << ")");
    BOOST_CHECK_MESSAGE(worst < tol, ids.size() << "-token prompt: logits differ by " << worst);

    // Greedy over the caches, 24 tokens, up to the CPU's first near-tie.
    int64_t len = static_cast<int64_t>(ids.size());
    const float* last = want.data() + (len - 1) * V;
    int32_t next_c = argmax(last, V), next_g = argmax(got.data() + (len - 1) * V, V);
    float m = margin(last, V);
    int agree = 0;
    for (int t = 0; t < 24 && m >= 2 * tol; ++t) {
      BOOST_CHECK_MESSAGE(next_g == next_c, "greedy token " << t << " is " << next_g << " on cuda, " << next_c << " on cpu");
      if (next_g != next_c) break;
      ++agree;
      const std::vector<float> rc = cpu.step({{&pc, len, {next_c}}}, false);
      const std::vector<float> rg = gpu.step({{&pg, len, {next_g}}}, false);
      ++len;
      BOOST_CHECK_MESSAGE(max_diff(rc.data(), rg.data(), V) < tol, "decode step " << t << ": logits differ by "
                                                                                  << max_diff(rc.data(), rg.data(), V));
      next_c = argmax(rc.data(), V);
      next_g = argmax(rg.data(), V);
      m = margin(rc.data(), V);
    }
    BOOST_TEST_MESSAGE(ids.size() << " tokens: greedy agrees for " << agree << " tokens");
    agreed += agree;
    cpu.pool.release(pc);
    gpu.pool.release(pg);
  }
  BOOST_TEST(sparse >= 3);
  // Random weights put near-ties everywhere (logits span ~3): the prompts stop early at
  // different points, but together they must have compared a fair number of tokens (42 with
  // backend.cpu against itself at 2e-2).
  BOOST_TEST(agreed >= 16);
}

BOOST_AUTO_TEST_CASE(a_mixed_batch_on_cuda_equals_each_sequence_alone) {
  const std::vector<std::vector<int32_t>> prompts = reference_prompts();
  const std::vector<int32_t>& a = prompts.back();
  const std::vector<int32_t>& b = prompts[prompts.size() / 2];
  stack s(tested());
  const int64_t V = s.vocab();
  std::vector<int32_t> pa;
  const std::vector<float> a_last = s.step({{&pa, 0, a}}, false);
  const int32_t next = argmax(a_last.data(), V);
  std::vector<int32_t> pb;
  const std::vector<float> b_alone = s.step({{&pb, 0, b}}, false);
  s.pool.release(pb);
  const std::vector<float> a_next_alone = s.step({{&pa, static_cast<int64_t>(a.size()), {next}}}, false);
  // Again in one step, a's decode token on fresh pages holding the same prefix.
  std::vector<int32_t> pa2, pb2;
  s.step({{&pa2, 0, a}}, false);
  const std::vector<float> mixed = s.step({{&pb2, 0, b}, {&pa2, static_cast<int64_t>(a.size()), {next}}}, false);
  // A prefill row and a decode row may take different linear kernels (GEMM vs GEMV) for the
  // same row in and out of a batch: within the cross-backend tolerance, not bit-equal.
  BOOST_TEST(max_diff(mixed.data(), b_alone.data(), V) < tol);
  BOOST_TEST(max_diff(mixed.data() + V, a_next_alone.data(), V) < tol);
}

int main(int argc, char* argv[]) {
  try {
    plugin_host host{plugin_host::default_search_path()};
    host.create<backend>(tested(), config{});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s cannot run here (%s): skipped\n", tested().c_str(), e.what());
    return 77;
  }
  const int rc = ::boost::unit_test::unit_test_main([] { return true; }, argc, argv);
  if (rc == 0 && !made_here.empty()) {
    fs::remove_all(made_here);
    fs::remove(made_here + ".log");
  }
  return rc;
}
