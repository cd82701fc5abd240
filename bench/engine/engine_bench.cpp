// bench_engine: prefill and decode throughput of a pipeline's model in process (no HTTP),
// as curves — prefill at each prompt length, decode at each number of concurrent streams —
// next to the memory-bandwidth bound of decoding on the device the model runs on.
//
//   build/bench/engine/bench_engine --pipeline pipelines/default.yaml --streams 1,8 --prompt 512
//   bench_engine --set backend.plugin=backend.cuda --set scheduler.max_batch=128 \
//       --streams 1,2,4,8,16,32,64,128 --prompt 128,512,2048,8192,32768
//
// The figures are measured as llama.cpp's llama-bench / llama-batched-bench measure theirs,
// so bench/peers can put them side by side: prefill = prompt tokens / time to the first
// token of one cold request (nothing cached: every prompt is new); decode at B streams =
// tokens generated after every stream has its first token / that time (prompts of
// --decode-prompt tokens, --gen tokens each).
//
// Decode of one stream reads every weight once per token, so its ceiling is (bandwidth of
// the model's device, measured in this run) / (bytes of weights per token): the all-core
// read rate of host memory on the CPU, the device-to-device copy rate on a GPU.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "device_bandwidth.hpp"
#include "tandem/runtime.hpp"

namespace po = boost::program_options;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

std::vector<int> parse_list(const std::string& s, const char* what) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v <= 0) throw std::runtime_error(std::string("--") + what + ": '" + item + "' is not a positive integer");
    out.push_back(v);
  }
  if (out.empty()) throw std::runtime_error(std::string("--") + what + ": empty list");
  return out;
}

struct result {
  double seconds = 0;          // submit to last token
  double first_token_s = 0;    // submit to the first token of any stream
  double all_first_s = 0;      // submit to the moment every stream has its first token
  int64_t tokens = 0;          // all generated tokens
  int64_t tokens_after_all_first = 0;
};

// Runs `streams` requests of `prompt_len` tokens generating `gen` tokens each, together.
// `salt` makes the prompts new to the prefix cache.
result run(tandem::runtime& rt, int streams, int prompt_len, int gen, int salt) {
  result r;
  const auto t0 = clock_type::now();
  int started = 0;
  // Ids past the first 100 (control tokens) and inside the vocabulary (a tiny model's too).
  const int span = std::max(1, std::min(20000, rt.tok().vocab_size() - 100));
  for (int s = 0; s < streams; ++s) {
    tandem::generation_request q;
    for (int i = 0; i < prompt_len; ++i) q.prompt.push_back(100 + (i * 37 + s * 11 + salt * 7919) % span);
    q.max_new_tokens = gen;
    q.ignore_eos = true;
    q.on_event = [&, first = true](const tandem::token_event& ev) mutable {
      if (ev.token < 0) return;
      ++r.tokens;
      if (started == streams) ++r.tokens_after_all_first;
      if (!first) return;
      first = false;
      if (started++ == 0) r.first_token_s = seconds_since(t0);
      if (started == streams) r.all_first_s = seconds_since(t0);
    };
    rt.eng().submit(std::move(q));
  }
  while (rt.eng().has_work()) rt.eng().step();
  r.seconds = seconds_since(t0);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  std::string pipeline = "pipelines/default.yaml", streams_list = "1,8", prompt_list = "512";
  int gen = 128, decode_prompt = 128, repeats = 3;
  std::vector<std::string> sets;
  po::options_description d("bench_engine [options]");
  d.add_options()("help,h", "this help")
      ("pipeline", po::value(&pipeline)->default_value(pipeline), "pipeline file")
      ("streams", po::value(&streams_list)->default_value(streams_list), "concurrent decode streams, a list: 1,2,4,8")
      ("prompt", po::value(&prompt_list)->default_value(prompt_list), "prompt lengths for the prefill figure, a list")
      ("gen", po::value(&gen)->default_value(gen), "tokens generated per decode stream")
      ("decode-prompt", po::value(&decode_prompt)->default_value(decode_prompt), "prompt tokens of each decode stream")
      ("repeats", po::value(&repeats)->default_value(repeats), "runs per figure (the median is reported)")
      ("set", po::value(&sets)->composing(), "pipeline override section.key=value");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, d), vm);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return 0;
  }
  po::notify(vm);
  const std::vector<int> streams = parse_list(streams_list, "streams");
  const std::vector<int> prompts = parse_list(prompt_list, "prompt");
  if (gen < 2 || decode_prompt < 1 || repeats < 1) throw std::runtime_error("--gen must be >= 2, --decode-prompt and --repeats >= 1");

  tandem::runtime_options opt;
  opt.overrides = sets;
  auto rt = tandem::runtime::open(pipeline, opt);
  for (const auto& l : rt->summary()) std::fprintf(stderr, "%s\n", l.c_str());
  const tandem::device dev = rt->model_device();
  const bench::bandwidth bw = bench::measure_bandwidth(dev);
  const double weight_bytes = static_cast<double>(rt->weight_bytes_per_token());
  const double bound = bw.gbs * 1e9 / weight_bytes;

  const auto t_engine = std::chrono::steady_clock::now();  // every step from here, for shares (bench/ranks)
  int salt = 1;
  run(*rt, 1, 16, 8, salt++);  // warm-up: page in the weights, start threads, record graphs
  std::printf("%-44s %14s\n", "figure", "value");
  for (int p : prompts) {
    if (p + 1 > rt->max_model_len()) {
      std::printf("%-44s %14s\n", ("prefill tok/s, " + std::to_string(p) + "-token prompt").c_str(), "over max len");
      continue;
    }
    std::vector<double> tps;
    for (int i = 0; i < repeats; ++i) tps.push_back(p / run(*rt, 1, p, 1, salt++).first_token_s);
    const double m = median(tps);
    std::printf("%-44s %14.1f\n", ("prefill tok/s, " + std::to_string(p) + "-token prompt").c_str(), m);
    std::printf("{\"bench\":\"engine\",\"figure\":\"prefill\",\"prompt\":%d,\"tps\":%.1f}\n", p, m);
  }
  for (int b : streams) {
    run(*rt, b, decode_prompt, 4, salt++);  // this batch shape once before timing it
    std::vector<double> tps;
    for (int i = 0; i < repeats; ++i) {
      const result r = run(*rt, b, decode_prompt, gen, salt++);
      tps.push_back(r.tokens_after_all_first / (r.seconds - r.all_first_s));
    }
    const double m = median(tps);
    std::printf("%-44s %14.1f   (%.3f ms per step)\n", ("decode tok/s, " + std::to_string(b) + (b == 1 ? " stream" : " streams")).c_str(), m,
                1e3 * b / m);
    std::printf("{\"bench\":\"engine\",\"figure\":\"decode\",\"streams\":%d,\"tps\":%.1f,\"step_ms\":%.4f}\n", b, m,
                1e3 * b / m);
  }
  std::printf("%-44s %14.2f\n", (bw.what + " GB/s (measured)").c_str(), bw.gbs);
  std::printf("%-44s %14.1f\n", "weight MB read per decode step", weight_bytes / 1e6);
  std::printf("%-44s %14.1f\n", "1-stream decode bound tok/s", bound);
  const double engine_s = seconds_since(t_engine);
  std::printf("{\"bench\":\"engine\",\"figure\":\"engine_time\",\"engine_s\":%.3f}\n", engine_s);
  std::printf("{\"bench\":\"engine\",\"figure\":\"ceiling\",\"device\":\"%s\",\"bandwidth_gbs\":%.2f,"
              "\"weight_bytes\":%.0f,\"bound_tps_1\":%.1f}\n",
              bw.what.c_str(), bw.gbs, weight_bytes, bound);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_engine: %s\n", e.what());
  return 1;
}
