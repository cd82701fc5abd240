// bench_grammar: what structured output costs. Per generated token, the grammar's share
// (fill the allowed-token mask, apply it to a logits row, accept the token) at batch 1 and
// 64, next to the decode step of the same pipeline's model measured in the same run, and
// structured vs unconstrained decode throughput through the engine.
//
//   build/bench/grammar/bench_grammar --pipeline pipelines/default.yaml
//
// The mask figures walk real outputs: documents of a schema encoded with the model's own
// tokenizer, so the matcher sees the token boundaries a model would produce.
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../../serving/engine/grammar_sampling.hpp"
#include "../../server/grammar_vocabulary.hpp"
#include "tandem/grammar.hpp"
#include "tandem/runtime.hpp"

namespace po = boost::program_options;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

const char* schema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"}},"address":{"type":"object","properties":{"city":{"type":"string"},
  "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city","zip"]}},"required":["name","age","tags","address"]})";

std::string document(int i) {
  return "{\"name\":\"Person number " + std::to_string(i) + " of the benchmark\",\"age\":" + std::to_string(20 + i % 60) +
         ",\"tags\":[\"alpha\",\"beta gamma\",\"delta-" + std::to_string(i) + "\"],\"address\":{\"city\":\"Lyon " +
         std::to_string(i) + "\",\"zip\":\"690" + std::to_string(10 + i % 90) + "\"}}";
}

// Microseconds per token of fill + apply + accept, over `batch` sequences stepping together.
double mask_us_per_token(const tandem::grammar_compiler& gc, const tandem::tokenizer& tok, int batch, int vocab) {
  auto g = gc.compile(tandem::grammar_spec::json_schema(schema));
  std::vector<std::vector<int32_t>> docs;
  std::vector<tandem::grammar_matcher> ms;
  for (int b = 0; b < batch; ++b) {
    docs.push_back(tok.encode(document(b), false));
    ms.emplace_back(g);
  }
  std::vector<float> row(static_cast<size_t>(vocab), 0.5f);
  std::vector<uint32_t> words(tandem::grammar_matcher::mask_words(vocab));
  size_t steps = 0;
  for (const auto& d : docs) steps = std::max(steps, d.size());
  int64_t tokens = 0;
  const auto t0 = clock_type::now();
  for (size_t s = 0; s < steps; ++s)
    for (int b = 0; b < batch; ++b) {
      if (s >= docs[b].size()) continue;
      ms[b].fill_mask(words);
      tandem::apply_grammar_mask(row.data(), vocab, words);
      if (!ms[b].accept(docs[b][s])) throw std::runtime_error("the benchmark document left the grammar");
      ++tokens;
    }
  return seconds_since(t0) * 1e6 / static_cast<double>(tokens);
}

struct decode_figure {
  double us_per_step = 0;
  double tokens_per_step = 0;  // constrained sequences end with their grammar: the batch shrinks
};

// Decode microseconds per step with `streams` sequences, constrained or not.
decode_figure decode_us_per_step(tandem::runtime& rt, int streams, int gen, std::shared_ptr<const tandem::compiled_grammar> g) {
  int64_t tokens = 0;
  for (int s = 0; s < streams; ++s) {
    tandem::generation_request q;
    q.prompt = rt.tok().encode("Describe person " + std::to_string(s) + " as JSON:", false);
    q.max_new_tokens = gen;
    q.ignore_eos = g == nullptr;
    q.grammar = g;
    q.on_event = [&tokens](const tandem::token_event& ev) { tokens += ev.token >= 0; };
    rt.eng().submit(std::move(q));
  }
  // Prefill first (one step usually), then time decode steps only.
  rt.eng().step();
  const int64_t decode_from = static_cast<int64_t>(rt.eng().stats().steps);
  const int64_t tokens_from = tokens;
  const auto t0 = clock_type::now();
  while (rt.eng().has_work()) rt.eng().step();
  const double dt = seconds_since(t0);
  const int64_t steps = static_cast<int64_t>(rt.eng().stats().steps) - decode_from;
  if (steps <= 0) return {};
  return {dt * 1e6 / static_cast<double>(steps), static_cast<double>(tokens - tokens_from) / static_cast<double>(steps)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string pipeline = "pipelines/default.yaml";
  int gen = 64;
  std::vector<std::string> sets;
  po::options_description d("bench_grammar [options]");
  d.add_options()("help,h", "this help")("pipeline", po::value(&pipeline)->default_value(pipeline), "pipeline file")(
      "gen", po::value(&gen)->default_value(gen), "tokens generated per stream in the decode figures")(
      "set", po::value(&sets)->composing(), "pipeline override section.key=value");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, d), vm);
    if (vm.count("help")) {
      std::cout << d << "\n";
      return 0;
    }
    po::notify(vm);
    sets.push_back("scheduler.max_batch=64");
    auto rt = tandem::runtime::open(pipeline, {.overrides = sets});
    const tandem::grammar_vocabulary v = tandem::grammar_vocabulary_of(rt->tok());
    auto t0 = clock_type::now();
    const tandem::grammar_compiler gc(v);
    const double vocab_s = seconds_since(t0);
    t0 = clock_type::now();
    auto g = gc.compile(tandem::grammar_spec::json_schema(schema));
    const double compile_s = seconds_since(t0);
    std::printf("vocabulary %d tokens: compiler %.1f ms, schema compile %.1f ms\n", v.vocab_size, vocab_s * 1e3,
                compile_s * 1e3);
    for (int batch : {1, 64}) {
      const double mask = mask_us_per_token(gc, rt->tok(), batch, v.vocab_size);
      const decode_figure plain = decode_us_per_step(*rt, batch, gen, nullptr);
      const decode_figure constrained = decode_us_per_step(*rt, batch, gen, g);
      // A decode step at batch B makes B tokens; the grammar works per token, serially.
      const double share = mask * batch / plain.us_per_step * 100;
      std::printf("batch %2d: mask %.1f us/token (%.1f us/step), decode step %.0f us -> %.2f%% of a step; "
                  "end to end %.0f tok/s unconstrained, %.0f tok/s constrained (mean %.1f sequences per step)\n",
                  batch, mask, mask * batch, plain.us_per_step, share, plain.tokens_per_step * 1e6 / plain.us_per_step,
                  constrained.tokens_per_step * 1e6 / constrained.us_per_step, constrained.tokens_per_step);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_grammar: " << e.what() << "\n";
    return 1;
  }
}
