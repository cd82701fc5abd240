// tandem run: one prompt through a pipeline, streamed to stdout.
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>

#include "commands.hpp"
#include "model_option.hpp"
#include "parse_args.hpp"
#include "tandem/runtime.hpp"
#include "tandem/stream_decoder.hpp"

namespace po = boost::program_options;

namespace tandem::cli {
namespace {

struct run_options {
  std::string pipeline = "pipelines/default.yaml";
  std::string prompt, system, model, logprobs_out;
  bool raw = false, quiet = false, ignore_eos = false;
  int64_t max_tokens = 256;
  sampling_params sampling;
  std::vector<std::string> sets;
};

po::options_description describe(run_options& o) {
  po::options_description d("tandem run [options]");
  d.add_options()
      ("help,h", "this help")
      ("pipeline,p", po::value(&o.pipeline)->default_value(o.pipeline), "pipeline file")
      ("model,m", po::value(&o.model), "the model (same as --set model=M); a directory (EXL3) "
       "without --pipeline uses pipelines/exl3.yaml")
      ("prompt", po::value(&o.prompt)->required(), "the user message (or raw text with --raw)")
      ("system", po::value(&o.system), "a system message")
      ("raw", po::bool_switch(&o.raw), "send the prompt as is, without the chat template")
      ("max-tokens,n", po::value(&o.max_tokens)->default_value(o.max_tokens), "most tokens to generate")
      ("temperature,t", po::value(&o.sampling.temperature)->default_value(0.0f), "0 = greedy")
      ("top-k", po::value(&o.sampling.top_k)->default_value(0), "0 = off")
      ("top-p", po::value(&o.sampling.top_p)->default_value(1.0f), "1 = off")
      ("min-p", po::value(&o.sampling.min_p)->default_value(0.0f), "0 = off")
      ("seed", po::value(&o.sampling.seed)->default_value(0), "seed of the random draws")
      ("ignore-eos", po::bool_switch(&o.ignore_eos), "keep generating past end-of-generation tokens")
      ("set", po::value(&o.sets)->composing(), "override a pipeline setting: section.key=value")
      ("quiet,q", po::bool_switch(&o.quiet), "no start-up or speed lines on stderr")
      ("logprobs-out", po::value(&o.logprobs_out),
       "debug: write the prompt ids, the generated ids and each generated token's full "
       "log-softmax distribution (vocab floats, id order) as JSON to this file");
  return d;
}

void check(const run_options& o) {
  if (o.max_tokens < 1) throw po::error("--max-tokens must be at least 1");
  if (o.sampling.temperature < 0) throw po::error("--temperature must be >= 0");
  if (o.sampling.top_k < 0) throw po::error("--top-k must be >= 0");
  if (!(o.sampling.top_p > 0 && o.sampling.top_p <= 1)) throw po::error("--top-p must be in (0, 1]");
  if (!(o.sampling.min_p >= 0 && o.sampling.min_p <= 1)) throw po::error("--min-p must be in [0, 1]");
}

}  // namespace

int run_run(const args& a) {
  run_options o;
  po::options_description desc = describe(o);
  po::variables_map vm;
  if (auto rc = parse_args("run", a, desc, vm, nullptr, [&] { check(o); })) return *rc;
  apply_model_option(o.model, vm, o.pipeline, o.sets);
  std::ofstream logprobs_file;
  if (!o.logprobs_out.empty()) {
    logprobs_file.open(o.logprobs_out, std::ios::trunc);
    if (!logprobs_file) {
      std::cerr << "tandem run: error: cannot create --logprobs-out file '" << o.logprobs_out << "'\n";
      return 1;
    }
  }

  runtime_options ro;
  ro.overrides = o.sets;
  if (!o.quiet) ro.progress = [](std::string_view s) { std::cerr << s << "\n"; };
  auto rt = runtime::open(o.pipeline, ro);
  if (!o.quiet)
    for (const auto& line : rt->summary()) std::cerr << line << "\n";

  std::vector<int32_t> prompt;
  if (o.raw) {
    prompt = rt->tok().encode(o.prompt);
  } else {
    std::vector<chat_message> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system, {}, {}});
    msgs.push_back({"user", o.prompt, {}, {}});
    prompt = rt->tokens_for_chat(msgs);
  }

  stream_decoder out(rt->tok(), /*skip_special=*/true);
  finish_reason why = finish_reason::none;
  std::string err;
  int64_t generated = 0;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  clock::time_point t_first{};

  generation_request req;
  req.prompt = prompt;
  req.sampling = o.sampling;
  req.max_new_tokens = o.max_tokens;
  req.ignore_eos = o.ignore_eos;
  // --logprobs-out: every token's log-probability, put back in id order.
  const int vocab = rt->tok().vocab_size();
  std::vector<int32_t> out_ids;
  std::vector<std::vector<float>> out_lps;
  if (logprobs_file.is_open()) req.logprobs = std::numeric_limits<int32_t>::max();
  req.on_event = [&](const token_event& ev) {
    if (ev.token >= 0 && logprobs_file.is_open()) {
      std::vector<float> row(static_cast<size_t>(vocab), -INFINITY);
      for (const auto& [id, lp] : ev.top_logprobs)
        if (id >= 0 && id < vocab) row[static_cast<size_t>(id)] = lp;
      out_ids.push_back(ev.token);
      out_lps.push_back(std::move(row));
    }
    if (ev.token >= 0) {
      if (generated++ == 0) t_first = clock::now();
      if (ev.finished != finish_reason::stop || o.ignore_eos) std::cout << out.push(ev.token) << std::flush;
    }
    if (ev.finished != finish_reason::none) {
      why = ev.finished;
      err = ev.error;
    }
  };
  rt->eng().submit(std::move(req));
  while (rt->eng().has_work()) rt->eng().step();
  std::cout << out.flush() << std::endl;
  if (logprobs_file.is_open()) {
    // {"prompt": [ids], "tokens": [ids], "logprobs": [[vocab floats]...]}; -inf as null.
    auto ids = [&](const std::vector<int32_t>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
      return s + "]";
    };
    logprobs_file << "{\"prompt\": " << ids(prompt) << ",\n \"tokens\": " << ids(out_ids)
                  << ",\n \"logprobs\": [";
    char buf[32];
    for (size_t t = 0; t < out_lps.size(); ++t) {
      logprobs_file << (t ? ",\n  [" : "\n  [");
      for (size_t i = 0; i < out_lps[t].size(); ++i) {
        const float v = out_lps[t][i];
        if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%s%.9g", i ? "," : "", v);
        else std::snprintf(buf, sizeof buf, "%snull", i ? "," : "");
        logprobs_file << buf;
      }
      logprobs_file << "]";
    }
    logprobs_file << "]}\n";
    if (!logprobs_file) {
      std::cerr << "tandem run: error: writing '" << o.logprobs_out << "' failed\n";
      return 1;
    }
  }

  if (why == finish_reason::error) {
    std::cerr << "error: " << err << "\n";
    return 1;
  }
  if (!o.quiet) {
    const auto t1 = clock::now();
    const double prefill_s = std::chrono::duration<double>(t_first - t0).count();
    const double decode_s = std::chrono::duration<double>(t1 - t_first).count();
    std::fprintf(stderr, "prompt: %zu tokens, %.1f tok/s (time to first token %.3f s); "
                 "generated: %lld tokens, %.1f tok/s; finish: %s\n",
                 prompt.size(), prompt.size() / std::max(prefill_s, 1e-9), prefill_s,
                 static_cast<long long>(generated),
                 generated > 1 ? (generated - 1) / std::max(decode_s, 1e-9) : 0.0,
                 std::string(name(why)).c_str());
  }
  return 0;
}

}  // namespace tandem::cli
