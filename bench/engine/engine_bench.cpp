// bench_engine: prefill and decode throughput of a pipeline's model, single stream and
// several streams, next to the memory-bandwidth bound of decoding.
//
//   build/bench/engine/bench_engine --pipeline pipelines/default.yaml --streams 8
//
// Decode of one stream reads every weight once per token, so its ceiling is
// (bandwidth of a large read measured in this run) / (bytes of weights per token).
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <numeric>
#include <thread>
#include <vector>

#include "tandem/runtime.hpp"

namespace po = boost::program_options;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Best of a few passes of summing a buffer far larger than the caches, one slice per
// hardware thread (the decode uses every core, so its ceiling is the all-core read rate).
double read_bandwidth_gbs() {
  std::vector<uint64_t> buf(256 << 20 >> 3, 1);
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    std::vector<uint64_t> sums(n);
    std::vector<std::thread> workers;
    auto t = clock_type::now();
    for (unsigned i = 0; i < n; ++i)
      workers.emplace_back([&, i] {
        const size_t per = buf.size() / n;
        sums[i] = std::accumulate(buf.begin() + i * per, buf.begin() + (i + 1) * per, uint64_t{0});
      });
    for (auto& w : workers) w.join();
    double dt = seconds_since(t);
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == 42) std::puts("");  // keeps the sums alive
    best = std::max(best, buf.size() * 8.0 / dt / 1e9);
  }
  return best;
}

struct result {
  double seconds = 0;
  int64_t tokens = 0;
  double first_token_s = 0;
};

// Runs `streams` requests of `prompt_len` tokens generating `gen` tokens each, together.
result run(tandem::runtime& rt, int streams, int prompt_len, int gen) {
  result r;
  auto t0 = clock_type::now();
  bool first = true;
  // Ids past the first 100 (control tokens) and inside the vocabulary (a tiny model's too).
  const int span = std::max(1, std::min(20000, rt.tok().vocab_size() - 100));
  for (int s = 0; s < streams; ++s) {
    tandem::generation_request q;
    for (int i = 0; i < prompt_len; ++i) q.prompt.push_back(100 + (i * 37 + s * 11) % span);
    q.max_new_tokens = gen;
    q.ignore_eos = true;
    q.on_event = [&](const tandem::token_event& ev) {
      if (ev.token < 0) return;
      ++r.tokens;
      if (first) r.first_token_s = seconds_since(t0), first = false;
    };
    rt.eng().submit(std::move(q));
  }
  while (rt.eng().has_work()) rt.eng().step();
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pipeline = "pipelines/default.yaml";
  int streams = 8, prompt_len = 512, gen = 128;
  std::vector<std::string> sets;
  po::options_description d("bench_engine [options]");
  d.add_options()("help,h", "this help")
      ("pipeline", po::value(&pipeline)->default_value(pipeline), "pipeline file")
      ("streams", po::value(&streams)->default_value(streams), "concurrent streams for the batch figure")
      ("prompt", po::value(&prompt_len)->default_value(prompt_len), "prompt tokens for the prefill figure")
      ("gen", po::value(&gen)->default_value(gen), "tokens generated per stream")
      ("set", po::value(&sets)->composing(), "pipeline override section.key=value");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, d), vm);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return 0;
  }
  po::notify(vm);

  tandem::runtime_options opt;
  opt.overrides = sets;
  auto rt = tandem::runtime::open(pipeline, opt);
  for (const auto& l : rt->summary()) std::fprintf(stderr, "%s\n", l.c_str());
  const double bw = read_bandwidth_gbs();
  const double weight_bytes = static_cast<double>(rt->weight_bytes_per_token());

  result warm = run(*rt, 1, 16, 8);  // warm-up: page in the weights, start threads
  result prefill = run(*rt, 1, prompt_len, 1);
  result single = run(*rt, 1, 8, gen);
  result multi = run(*rt, streams, 8, gen);
  // Every step's time (warm-up included), for shares such as bench/ranks' collectives'.
  const double engine_s = warm.seconds + prefill.seconds + single.seconds + multi.seconds;

  const double prefill_tps = prompt_len / prefill.first_token_s;
  const double single_tps = (single.tokens - 1) / (single.seconds - single.first_token_s);
  const double multi_tps = multi.tokens / multi.seconds;
  const double bound = bw * 1e9 / weight_bytes;
  std::printf("%-34s %12s\n", "figure", "value");
  std::printf("%-34s %12.1f\n", "prefill tok/s (prompt tokens)", prefill_tps);
  std::printf("%-34s %12.1f\n", "decode tok/s, 1 stream", single_tps);
  std::printf("%-34s %12.1f\n", ("decode tok/s, " + std::to_string(streams) + " streams").c_str(), multi_tps);
  std::printf("%-34s %12.2f\n", "all-core read GB/s (measured)", bw);
  std::printf("%-34s %12.1f\n", "weight MB read per decode step", weight_bytes / 1e6);
  std::printf("%-34s %12.1f\n", "1-stream decode bound tok/s", bound);
  std::printf("%-34s %11.0f%%\n", "1-stream decode / bound", 100 * single_tps / bound);
  std::printf("{\"bench\":\"engine\",\"prompt\":%d,\"prefill_tps\":%.1f,\"decode_tps_1\":%.1f,"
              "\"streams\":%d,\"decode_tps_n\":%.1f,\"read_gbs\":%.2f,\"weight_bytes\":%.0f,"
              "\"bound_tps_1\":%.1f,\"engine_s\":%.3f}\n",
              prompt_len, prefill_tps, single_tps, streams, multi_tps, bw, weight_bytes, bound, engine_s);
  return 0;
}
