// bench_spec: speculative decoding against none on one pipeline's model: decode tok/s, the
// mean acceptance length tau (accepted + 1 per verify, vLLM's definition), per-position
// acceptance and the speedup, for each drafter on a few tasks (greedy, chat-templated).
// One JSON object per (task, drafter, batch) on stdout, a table on stderr. Drafters run with
// the adaptive draft length (the default); --fixed adds each drafter drafting k every step.
// --rounds N repeats everything N times, each task's drafters back to back, and reports the
// median speed and the median of the per-round ratios to no drafter (robust to a shared
// machine's drifting load); tau and acceptance are summed over the rounds. Beside wall-clock
// speed it reports tokens per CPU-second of the process against none (speedup_cpu_time): on
// an oversubscribed machine that measures the work, not who held the cores. Requests end at
// the model's end of turn, as the API's do (a JSON answer is ~70 tokens of the default
// model's, a count to 200 runs to --tokens); --ignore-eos generates --tokens every time, past
// the answer into text no drafter was trained on (the figures before 2026-12-05 did that).
// drafter_share: the drafter's propose() and observe() calls over the engine's step time.
// Where the step time goes (engine_stats): each table line is followed by one with the mean
// wall time of a draft step (a verify of at least one draft token), a plain decode step and
// any other (prompt chunks), and the mean ms per step of each phase (propose, forward,
// sample, verify, observe, rest; engine.hpp); the JSON line has them too.
// --warmup N (default 1): every runtime first serves N untimed requests of a neutral prompt
// (longer than every task's, 32 tokens, at each --batch size), so graph recordings and the
// adaptive controller's first step timings are not in the figures. --trace-dir DIR: each timed run's steps go to
// DIR/<task>-<drafter>-b<batch>-r<round>.jsonl (engine::set_trace; step_trace.hpp).
// --dump-prompts DIR writes the tasks' (and the warm-up's) prompt token ids after the chat
// template and exits: bench/peers/spec_peer.py serves the same requests to llama.cpp's server.
// With --backend cuda, TANDEM_CUDA_GRAPH_STATS=1: each runtime's backend logs its CUDA graph
// captures, replays and drops when it closes (after a "closing" line naming the drafter).
//
//   build/bench/spec/bench_spec --pipeline pipelines/cpu.yaml --tokens 128 --batch 1 --batch 8
//   build/bench/spec/bench_spec --pipeline pipelines/default.yaml --backend cuda --batch 1 --batch 8
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/runtime.hpp"

namespace po = boost::program_options;
using clock_type = std::chrono::steady_clock;
using namespace tandem;

namespace {

struct task {
  std::string name, prompt;
};

const std::vector<task> tasks = {
    {"count", "Count from 1 to 200, one number per line."},
    {"json", "Write a JSON array of 10 objects, each with the fields \"id\", \"name\" and \"email\"."},
    {"code", "Write a Python function that returns the n-th Fibonacci number, with a docstring and tests."},
    {"prose", "Tell me a short story about a lighthouse keeper who finds a message in a bottle."},
};

struct drafter_choice {
  std::string name;
  std::vector<std::string> overrides;  // onto the pipeline: the drafter section
};

// CPU seconds of this process (every thread): on a machine shared with other work, the
// work a run did, which wall time mixes with the time other processes held the cores.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct measurement {
  double decode_s = 0;
  double decode_cpu_s = 0;
  int64_t tokens = 0;
  engine_stats stats;
  std::vector<std::vector<int32_t>> outputs;
};

// `batch` copies of the prompt together; decode time runs from the first token of the last
// stream to start to the end (prefill excluded).
measurement run(runtime& rt, const std::string& prompt, int batch, int gen, bool ignore_eos) {
  const std::vector<chat_message> msgs{{"user", prompt}};
  const std::vector<int32_t> ids = rt.tokens_for_chat(msgs);
  measurement m;
  m.outputs.resize(batch);
  int started = 0;
  clock_type::time_point decode_start{};
  double cpu_start = 0;
  for (int b = 0; b < batch; ++b) {
    generation_request r;
    r.prompt = ids;
    r.max_new_tokens = gen;
    r.ignore_eos = ignore_eos;
    r.on_event = [&, b](const token_event& ev) {
      if (ev.token < 0) return;
      if (m.outputs[b].empty() && ++started == batch) decode_start = clock_type::now(), cpu_start = process_cpu_s();
      m.outputs[b].push_back(ev.token);
    };
    rt.eng().submit(std::move(r));
  }
  while (rt.eng().has_work()) rt.eng().step();
  m.decode_s = std::chrono::duration<double>(clock_type::now() - decode_start).count();
  m.decode_cpu_s = process_cpu_s() - cpu_start;
  for (const auto& o : m.outputs) m.tokens += static_cast<int64_t>(o.size()) - 1;  // the first came with prefill
  m.stats = rt.eng().stats();
  return m;
}

size_t chat_tokens(runtime& rt, const std::string& text) {
  return rt.tokens_for_chat(std::vector<chat_message>{{"user", text}}).size();
}

// Untimed requests before the timed tasks, at each batch size: CUDA graphs get recorded
// and the adaptive draft length times its first steps here, not in the figures. The prompt
// says nothing the tasks ask for, but is longer than any of theirs: its prefill sizes the
// step buffers, and a longer prompt later would reallocate them (llama_model's workspace
// generation, backend.cuda's scratch) and have every recorded step captured again inside a
// timed run. What its text taught the controller about acceptance is forgotten (a greeting
// run past its end drafts badly, and the probes it backed off would delay the first task).
std::string warm_up_prompt(runtime& rt) {
  size_t longest = 0;
  for (const task& t : tasks) longest = std::max(longest, chat_tokens(rt, t.prompt));
  std::string prompt = "Say hello in five words.";
  while (chat_tokens(rt, prompt) <= longest) prompt += " Then say hello again.";
  return prompt;
}
constexpr int warm_up_tokens = 32;

void warm_up(runtime& rt, int n, const std::vector<int>& batches) {
  if (n == 0) return;
  const std::string prompt = warm_up_prompt(rt);
  for (int i = 0; i < n; ++i)
    for (int batch : batches) run(rt, prompt, batch, warm_up_tokens, true);
  rt.eng().forget_draft_acceptance();
}

// --dump-prompts DIR: what a peer needs to serve the same requests. DIR/prompts.jsonl has one
// line per task, {"task", "max_tokens", "ignore_eos", "tokens"}: the prompt's token ids after
// the chat template, exactly as run() submits them (the warm-up's neutral prompt first, as
// task "warmup"); DIR/<task>.txt the rendered text those ids encode, for tools that take text.
int dump_prompts(runtime& rt, const std::filesystem::path& dir, int gen, bool ignore_eos) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::FILE* jsonl = ec ? nullptr : std::fopen((dir / "prompts.jsonl").c_str(), "w");
  if (!jsonl) {
    std::cerr << "bench_spec: cannot write --dump-prompts " << dir << "\n";
    return 2;
  }
  std::vector<std::tuple<std::string, std::string, int, bool>> all{{"warmup", warm_up_prompt(rt), warm_up_tokens, true}};
  for (const task& t : tasks) all.emplace_back(t.name, t.prompt, gen, ignore_eos);
  for (const auto& [name, prompt, max_tokens, no_eos] : all) {
    const std::vector<chat_message> msgs{{"user", prompt}};
    std::string ids;
    for (int32_t id : rt.tokens_for_chat(msgs)) ids += fmt::format("{}{}", ids.empty() ? "" : ",", id);
    std::fprintf(jsonl, "{\"task\":\"%s\",\"max_tokens\":%d,\"ignore_eos\":%s,\"tokens\":[%s]}\n", name.c_str(),
                 max_tokens, no_eos ? "true" : "false", ids.c_str());
    std::FILE* txt = std::fopen((dir / (name + ".txt")).c_str(), "w");
    if (!txt) {
      std::fclose(jsonl);
      std::cerr << "bench_spec: cannot write " << (dir / (name + ".txt")) << "\n";
      return 2;
    }
    const std::string text = rt.render_chat(msgs);
    std::fwrite(text.data(), 1, text.size(), txt);
    std::fclose(txt);
  }
  std::fclose(jsonl);
  std::cerr << "bench_spec: " << all.size() << " prompts in " << dir << "\n";
  return 0;
}

// Engine step counters of one run or a sum of runs: steps and wall seconds by kind, and the
// seconds of each phase (engine_stats).
struct step_split {
  double draft = 0, draft_s = 0, decode = 0, decode_s = 0, other = 0, other_s = 0;
  double propose_s = 0, forward_s = 0, sample_s = 0, verify_s = 0, observe_s = 0;

  void add(const engine_stats& before, const engine_stats& now) {
    const auto d = [](uint64_t a, uint64_t b) { return static_cast<double>(a - b); };
    draft += d(now.draft_steps, before.draft_steps);
    decode += d(now.decode_steps, before.decode_steps);
    other += d(now.other_steps, before.other_steps);
    draft_s += now.draft_step_seconds - before.draft_step_seconds;
    decode_s += now.decode_step_seconds - before.decode_step_seconds;
    other_s += now.other_step_seconds - before.other_step_seconds;
    propose_s += now.step_propose_seconds - before.step_propose_seconds;
    forward_s += now.step_forward_seconds - before.step_forward_seconds;
    sample_s += now.step_sample_seconds - before.step_sample_seconds;
    verify_s += now.step_verify_seconds - before.step_verify_seconds;
    observe_s += now.step_observe_seconds - before.step_observe_seconds;
  }
  double steps() const { return draft + decode + other; }
  // Plan building, publishing pages, emitting events: the steps' time less the phases.
  double rest_s() const { return draft_s + decode_s + other_s - propose_s - forward_s - sample_s - verify_s - observe_s; }
  static double ms(double seconds, double n) { return n > 0 ? 1e3 * seconds / n : 0; }
  // Mean ms per step of each phase, over all the steps.
  std::vector<std::pair<const char*, double>> phases() const {
    const double n = steps();
    return {{"propose", ms(propose_s, n)}, {"forward", ms(forward_s, n)}, {"sample", ms(sample_s, n)},
            {"verify", ms(verify_s, n)},   {"observe", ms(observe_s, n)}, {"rest", ms(rest_s(), n)}};
  }
  std::string table() const {
    std::string p;
    for (const auto& [name, v] : phases()) p += fmt::format(" {} {:.3f}", name, v);
    return fmt::format("draft steps {:.0f} x {:.3f} ms, decode {:.0f} x {:.3f} ms, other {:.0f} x {:.3f} ms; ms/step:{}",
                       draft, ms(draft_s, draft), decode, ms(decode_s, decode), other, ms(other_s, other), p);
  }
  std::string json() const {
    std::string p;
    for (const auto& [name, v] : phases()) p += fmt::format("{}\"{}\":{:.4f}", p.empty() ? "" : ",", name, v);
    return fmt::format(
        "\"draft_steps\":{:.0f},\"draft_step_ms\":{:.4f},\"decode_steps\":{:.0f},\"decode_step_ms\":{:.4f},"
        "\"other_steps\":{:.0f},\"other_step_ms\":{:.4f},\"phase_ms\":{{{}}}",
        draft, ms(draft_s, draft), decode, ms(decode_s, decode), other, ms(other_s, other), p);
  }
};

// One (task, drafter) over the rounds: decode speeds, speeds relative to no drafter in the
// same round, and the speculation counters summed.
struct tally {
  std::vector<double> tps, ratio, cpu_ratio;  // cpu_ratio: tokens per CPU second, against none
  double drafts = 0, accepted = 0, proposed = 0;
  double step_s = 0, drafter_s = 0;  // engine step time, and the drafter's calls in it
  step_split split;
  std::vector<double> per_pos;
  int64_t tokens = 0;

  void add(const engine_stats& before, const measurement& m, double speed, double vs_none, double cpu_vs_none) {
    tps.push_back(speed);
    ratio.push_back(vs_none);
    cpu_ratio.push_back(cpu_vs_none);
    tokens += m.tokens;
    drafts += static_cast<double>(m.stats.spec_drafts - before.spec_drafts);
    accepted += static_cast<double>(m.stats.spec_accepted_tokens - before.spec_accepted_tokens);
    proposed += static_cast<double>(m.stats.spec_draft_tokens - before.spec_draft_tokens);
    step_s += m.stats.step_seconds - before.step_seconds;
    split.add(before, m.stats);
    drafter_s += m.stats.spec_propose_seconds - before.spec_propose_seconds + m.stats.spec_observe_seconds -
                 before.spec_observe_seconds;
    if (per_pos.size() < m.stats.spec_accepted_per_pos.size()) per_pos.resize(m.stats.spec_accepted_per_pos.size());
    for (size_t i = 0; i < m.stats.spec_accepted_per_pos.size(); ++i) {
      const uint64_t was = i < before.spec_accepted_per_pos.size() ? before.spec_accepted_per_pos[i] : 0;
      per_pos[i] += static_cast<double>(m.stats.spec_accepted_per_pos[i] - was);
    }
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pipeline, backend_name;
  int gen = 128, rounds = 1, warmup = 1;
  std::string trace_dir;
  int64_t kv_tokens = 16384;
  std::vector<int> batches;
  std::vector<std::string> sets, names;
  std::string dflash2_weights, dump_dir;
  po::options_description opts("bench_spec options");
  opts.add_options()("help,h", "this help")(
      "pipeline", po::value(&pipeline)->default_value("pipelines/cpu.yaml"), "the pipeline without a drafter")(
      "tokens", po::value(&gen)->default_value(128), "tokens generated per request")(
      "batch", po::value(&batches)->multitoken(), "concurrent requests (repeatable; default 1)")(
      "backend", po::value(&backend_name), "backend plugin for every run (cpu, cuda): --set backend.plugin=NAME")(
      "set", po::value(&sets)->multitoken(), "key=value onto the pipeline of every run (repeatable)")(
      "fixed", "also run each drafter with adaptive: false (k draft tokens every step)")(
      "ignore-eos", "generate --tokens every time, past the end of turn (default: stop there, as the API does)")(
      "rounds", po::value(&rounds)->default_value(1),
      "repeat every (task, drafter) this many times, interleaved; report medians")(
      "warmup", po::value(&warmup)->default_value(1),
      "untimed requests (32 tokens of a neutral prompt, at each --batch) each runtime serves first")(
      "trace-dir", po::value(&trace_dir),
      "write each timed run's engine steps to DIR/<task>-<drafter>-b<batch>-r<round>.jsonl")(
      "drafters", po::value(&names)->multitoken(),
      "drafters to compare with none: ngram suffix dflash2 dflash2-q8 (its matrices as Q8_0)")(
      "dflash2-weights", po::value(&dflash2_weights)->default_value("drafters/smollm2-135m-instruct-dflash2"),
      "drafter.dflash2's weights directory")(
      "kv-tokens", po::value(&kv_tokens)->default_value(16384),
      "engine.kv_tokens of each runtime (one per drafter is open at once, so not sized from free memory)")(
      "dump-prompts", po::value(&dump_dir),
      "write each task's prompt token ids (after the chat template) to DIR/prompts.jsonl and its text to "
      "DIR/<task>.txt, for a peer to serve the same requests (bench/peers/spec_peer.py), then exit");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "bench_spec: " << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (batches.empty()) batches = {1};
  if (rounds < 1 || gen < 2) {
    std::cerr << "bench_spec: --rounds must be at least 1 and --tokens at least 2\n";
    return 2;
  }
  if (kv_tokens < 1) {
    std::cerr << "bench_spec: --kv-tokens must be at least 1\n";
    return 2;
  }
  if (warmup < 0) {
    std::cerr << "bench_spec: --warmup must not be negative\n";
    return 2;
  }
  if (!trace_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(trace_dir, ec);
    if (ec) {
      std::cerr << "bench_spec: cannot create --trace-dir " << trace_dir << ": " << ec.message() << "\n";
      return 2;
    }
  }
  // backend.cuda reads it when it is created: each runtime's graph counters are logged as it closes.
  const bool graph_stats = backend_name == "cuda";
  if (graph_stats) ::setenv("TANDEM_CUDA_GRAPH_STATS", "1", 1);
  sets.insert(sets.begin(), "engine.kv_tokens=" + std::to_string(kv_tokens));  // a --set of it still wins
  if (!backend_name.empty()) sets.push_back("backend.plugin=" + backend_name);
  // Every drafter bench_spec knows; --drafters picks (default: all but dflash2 when its
  // weights are not in the working directory).
  const std::vector<drafter_choice> known = {
      {"none", {}},
      {"ngram", {"drafter.plugin=drafter.ngram", "drafter.k=4"}},
      {"suffix", {"drafter.plugin=drafter.suffix"}},
      {"dflash2", {"drafter.plugin=drafter.dflash2", "drafter.weights=" + dflash2_weights, "drafter.k=7"}},
      {"dflash2-q8",
       {"drafter.plugin=drafter.dflash2", "drafter.weights=" + dflash2_weights, "drafter.k=7", "drafter.weights_type=q8_0"}},
  };
  if (names.empty()) {
    names = {"none", "ngram", "suffix"};
    if (std::filesystem::exists(dflash2_weights)) names.push_back("dflash2");
  }
  if (names.front() != "none") names.insert(names.begin(), "none");  // the speedups' reference
  std::vector<drafter_choice> drafters;
  for (const std::string& n : names) {
    auto it = std::find_if(known.begin(), known.end(), [&](const drafter_choice& d) { return d.name == n; });
    if (it == known.end()) {
      std::cerr << "bench_spec: unknown drafter '" << n << "' (none, ngram, suffix, dflash2, dflash2-q8)\n";
      return 2;
    }
    drafters.push_back(*it);
  }
  if (vm.count("fixed"))
    for (size_t i = 1, n = drafters.size(); i < n; ++i) {
      drafter_choice f = drafters[i];
      f.name += "-fixed";
      f.overrides.push_back("drafter.adaptive=false");
      drafters.push_back(f);
    }
  for (drafter_choice& d : drafters) d.overrides.insert(d.overrides.begin(), sets.begin(), sets.end());
  try {
    if (!dump_dir.empty()) {  // the tokenizer and chat template only: no drafter, no run
      const auto rt = runtime::open(pipeline, {.overrides = sets, .allow_pull = true, .progress = {}});
      return dump_prompts(*rt, dump_dir, gen, vm.count("ignore-eos") > 0);
    }
    for (int batch : batches) {
      std::map<std::pair<std::string, std::string>, tally> tallies;  // (task, drafter)
      for (int round = 0; round < rounds; ++round) {
        // Fresh runtimes each round, one per drafter: the suffix drafter's global cache
        // learns across the round's tasks, as it would serving, never from an earlier
        // round's identical answers. Within a task the drafters run back to back, so each
        // ratio compares runs a few seconds apart (a shared machine's load drifts).
        std::vector<std::unique_ptr<runtime>> rts;
        for (const drafter_choice& d : drafters) {
          rts.push_back(runtime::open(pipeline, {.overrides = d.overrides, .allow_pull = true, .progress = {}}));
          if (round == 0)
            for (const std::string& line : rts.back()->summary())
              if (line.starts_with("backend:") || line.starts_with("speculative"))
                std::cerr << d.name << ": " << line << "\n";
          warm_up(*rts.back(), warmup, batches);
        }
        for (const task& t : tasks) {
          double base = 0, base_cpu = 0;
          for (size_t i = 0; i < drafters.size(); ++i) {
            runtime& rt = *rts[i];
            const engine_stats before = rt.eng().stats();
            if (!trace_dir.empty()) {
              const std::filesystem::path file = std::filesystem::path(trace_dir) /
                  fmt::format("{}-{}-b{}-r{}.jsonl", t.name, drafters[i].name, batch, round);
              std::filesystem::remove(file);  // the trace appends: an earlier bench's lines go
              rt.eng().set_trace(file.string());
            }
            const measurement m = run(rt, t.prompt, batch, gen, vm.count("ignore-eos") > 0);
            if (!trace_dir.empty()) rt.eng().set_trace("");
            const double tps = static_cast<double>(m.tokens) / m.decode_s;
            const double per_cpu = static_cast<double>(m.tokens) / m.decode_cpu_s;
            if (i == 0) base = tps, base_cpu = per_cpu;  // drafters[0] is none
            tally& y = tallies[{t.name, drafters[i].name}];
            y.add(before, m, tps, tps / base, per_cpu / base_cpu);
            std::cerr << fmt::format("round {} {:6} {:13} batch {:2}: {:8.1f} tok/s  x{:.2f}  per CPU-s x{:.2f}\n", round,
                                     t.name, drafters[i].name, batch, tps, tps / base, per_cpu / base_cpu);
          }
        }
        // In drafter order, each named first: backend.cuda's graph counters are logged as it closes.
        for (size_t i = 0; i < rts.size(); ++i) {
          if (graph_stats) std::cerr << fmt::format("round {} batch {}: closing {}\n", round, batch, drafters[i].name);
          rts[i].reset();
        }
      }
      for (const task& t : tasks)
        for (const drafter_choice& d : drafters) {
          const tally& y = tallies[{t.name, d.name}];
          std::string per_pos;
          for (size_t i = 0; i < y.per_pos.size(); ++i)
            per_pos += fmt::format("{}{:.3f}", i ? "," : "", y.drafts > 0 ? y.per_pos[i] / y.drafts : 0);
          const double tau = y.drafts > 0 ? 1 + y.accepted / y.drafts : 1;
          const double drafter_share = y.step_s > 0 ? y.drafter_s / y.step_s : 0;
          std::printf(
              "{\"task\":\"%s\",\"drafter\":\"%s\",\"batch\":%d,\"rounds\":%d,\"tokens\":%lld,"
              "\"decode_tok_s\":%.2f,\"speedup\":%.3f,\"speedup_cpu_time\":%.3f,\"tau\":%.3f,\"drafts\":%.0f,\"draft_tokens\":%.0f,"
              "\"accepted\":%.0f,\"per_position\":[%s],\"drafter_share\":%.3f,%s}\n",
              t.name.c_str(), d.name.c_str(), batch, rounds, static_cast<long long>(y.tokens), median(y.tps),
              median(y.ratio), median(y.cpu_ratio), tau, y.drafts, y.proposed, y.accepted, per_pos.c_str(),
              drafter_share, y.split.json().c_str());
          std::fflush(stdout);
          std::cerr << fmt::format(
              "{:6} {:13} batch {:2}: {:8.1f} tok/s  x{:.2f}  per CPU-s x{:.2f} (medians of {})  tau {:.2f}  "
              "accepted {:.0f}/{:.0f}  tokens {}  drafter {:.0f}% of step time\n",
              t.name, d.name, batch, median(y.tps), median(y.ratio), median(y.cpu_ratio), rounds, tau, y.accepted,
              y.proposed, y.tokens, 100 * drafter_share);
          std::cerr << fmt::format("{:6} {:13} batch {:2}:   {}\n", t.name, d.name, batch, y.split.table());
        }
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_spec: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
