// tandem serve: the OpenAI-compatible HTTP API over a pipeline.
#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <pthread.h>

#include "commands.hpp"
#include "model_option.hpp"
#include "parse_args.hpp"
#include "tandem/error.hpp"
#include "tandem/pipeline.hpp"
#include "tandem/server.hpp"

namespace po = boost::program_options;

namespace tandem::cli {
namespace {

struct serve_options {
  std::string pipeline = "pipelines/default.yaml";
  std::string host, model;
  int port = -1;  // -1: the pipeline's server.port
  int io_threads = 2;
  size_t max_pending = 256;
  size_t max_connections = 0;  // 0 = from ulimit -n
  // HTTP limits (tandem::server_options).
  size_t header_limit = server_options{}.header_limit, body_limit = server_options{}.body_limit;
  double header_timeout_s = server_options{}.header_timeout_s;
  double shutdown_s = 10;
  std::vector<std::string> sets;
  // The API (tandem::server_options / source_options).
  std::string api_key, tool_parser = "auto", chat_template, served_model_name;
  bool api_key_all_paths = false;
  std::vector<std::string> cors_origins;
  // vLLM's names for pipeline settings (0 = not given).
  int64_t max_model_len = 0, max_num_seqs = 0;
  std::string gpu_memory_utilization;  // passed on as text: the backend's schema checks it
};

po::options_description describe(serve_options& o) {
  po::options_description d("tandem serve [options]");
  d.add_options()
      ("help,h", "this help")
      ("pipeline,p", po::value(&o.pipeline)->default_value(o.pipeline), "pipeline file")
      ("model,m", po::value(&o.model), "the model (same as --set model=M); a directory (EXL3) "
       "without --pipeline uses pipelines/exl3.yaml")
      ("host", po::value(&o.host), "address to listen on (default: the pipeline's server.host)")
      ("port", po::value(&o.port), "TCP port, 0 = any free one (default: the pipeline's server.port)")
      ("io-threads", po::value(&o.io_threads)->default_value(o.io_threads), "HTTP I/O threads")
      ("max-connections", po::value(&o.max_connections)->default_value(o.max_connections),
       "open connections at most; one more is answered 503 (0 = ulimit -n less 64)")
      ("max-pending", po::value(&o.max_pending)->default_value(o.max_pending),
       "engine requests in flight before new ones get 429")
      ("header-limit", po::value(&o.header_limit)->default_value(o.header_limit),
       "bytes of request line and headers; more gets 414 / 431")
      ("body-limit", po::value(&o.body_limit)->default_value(o.body_limit), "bytes of request body; more gets 413")
      ("header-timeout", po::value(&o.header_timeout_s)->default_value(o.header_timeout_s),
       "seconds a request line and headers may take to arrive; a slower client is disconnected")
      ("shutdown-timeout", po::value(&o.shutdown_s)->default_value(o.shutdown_s),
       "seconds in-flight requests may take to finish on SIGINT/SIGTERM")
      ("set", po::value(&o.sets)->composing(), "override a pipeline setting: section.key=value")
      ("api-key", po::value(&o.api_key), "require 'Authorization: Bearer KEY' on /v1/* (default: $TANDEM_API_KEY)")
      ("api-key-all-paths", po::bool_switch(&o.api_key_all_paths),
       "require the API key on every path, /health and /metrics included")
      ("cors-origin", po::value(&o.cors_origins)->composing(),
       "allow browser calls from this origin (repeatable; * = any): CORS headers and preflight answers")
      ("tool-parser", po::value(&o.tool_parser)->default_value(o.tool_parser),
       "tool-call format of the model's output: auto (from the chat template), hermes, glm4")
      ("chat-template", po::value(&o.chat_template), "a Jinja chat template file used instead of the model's")
      ("served-model-name", po::value(&o.served_model_name), "the model name clients send and /v1/models lists")
      ("max-model-len", po::value(&o.max_model_len), "context length (same as --set engine.max_model_len=N)")
      ("max-num-seqs", po::value(&o.max_num_seqs), "requests per engine step (same as --set scheduler.max_batch=N)")
      ("gpu-memory-utilization", po::value(&o.gpu_memory_utilization),
       "share (0-1] of the GPU memory free after the weights that the KV pool may take "
       "(same as --set backend.memory_utilization=X; backend.cuda only)");
  return d;
}

// --chat-template names a file; its text replaces the model's template.
std::string read_template(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw po::error("--chat-template: cannot read '" + path + "'");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// --host/--port become overrides of the pipeline's server section, so the loader checks them.
std::vector<std::string> overrides(const serve_options& o) {
  std::vector<std::string> out;
  // Aliases first, so an explicit --set of the same key still wins.
  if (o.max_model_len > 0) out.push_back("engine.max_model_len=" + std::to_string(o.max_model_len));
  if (o.max_num_seqs > 0) out.push_back("scheduler.max_batch=" + std::to_string(o.max_num_seqs));
  if (!o.gpu_memory_utilization.empty()) out.push_back("backend.memory_utilization=" + o.gpu_memory_utilization);
  out.insert(out.end(), o.sets.begin(), o.sets.end());
  if (!o.host.empty()) out.push_back("server.host=" + o.host);
  if (o.port > 0) out.push_back("server.port=" + std::to_string(o.port));
  return out;
}

// The server section, read without building anything (a bad pipeline fails here, at once).
std::pair<std::string, int> listen_address(const serve_options& o) {
  plugin_host host(plugin_host::default_search_path());
  const auto ov = overrides(o);
  pipeline_result r = load_pipeline(o.pipeline, host, ov);
  if (!r.spec) {
    std::string all;
    for (const auto& d : r.errors) all += d.str() + "\n";
    throw config_error("", all);
  }
  return {r.spec->server.get_string("host"), o.port == 0 ? 0 : static_cast<int>(r.spec->server.get_int("port"))};
}

// Waits for SIGINT/SIGTERM, watching the source: prints the address once it is ready.
// Returns 0 on a signal, 1 when the model failed to load or the engine died.
int wait(const completion_source& src, const std::string& url, const sigset_t& set) {
  bool announced = false;
  const timespec tick{0, 100'000'000};
  while (true) {
    if (sigtimedwait(&set, nullptr, &tick) > 0) return 0;
    const source_state st = state_of(src);
    if (st == source_state::dead) {
      std::cerr << "error: " << failure_of(src) << "\n";
      return 1;
    }
    if (st == source_state::ready && !announced) {
      for (const auto& line : summary_of(src)) std::cerr << line << "\n";
      std::cout << "serving on " << url << std::endl;
      announced = true;
    }
  }
}

}  // namespace

int run_serve(const args& a) {
  serve_options o;
  po::options_description desc = describe(o);
  po::variables_map vm;
  auto check = [&] {
    if (o.port < -1 || o.port > 65535) throw po::error("--port must be in [0, 65535]");
    if (o.io_threads < 1) throw po::error("--io-threads must be at least 1");
    if (o.max_pending < 1) throw po::error("--max-pending must be at least 1");
    if (o.header_limit < 64) throw po::error("--header-limit must be at least 64 bytes");
    if (!(o.header_timeout_s > 0 && o.header_timeout_s <= 86400))
      throw po::error("--header-timeout must be in (0, 86400] seconds");
    if (o.tool_parser != "auto" && o.tool_parser != "hermes" && o.tool_parser != "glm4")
      throw po::error("--tool-parser must be auto, hermes or glm4; got '" + o.tool_parser + "'");
    if (vm.count("max-model-len") && o.max_model_len < 1) throw po::error("--max-model-len must be at least 1");
    if (vm.count("max-num-seqs") && o.max_num_seqs < 1) throw po::error("--max-num-seqs must be at least 1");
    if (vm.count("api-key") && o.api_key.empty()) throw po::error("--api-key must not be empty");
    if (o.api_key_all_paths && o.api_key.empty() && !std::getenv("TANDEM_API_KEY"))
      throw po::error("--api-key-all-paths needs --api-key (or $TANDEM_API_KEY)");
    if (vm.count("chat-template")) o.chat_template = read_template(o.chat_template);
  };
  // `tandem serve MODEL`, as `vllm serve MODEL`: the positional argument is --model.
  po::positional_options_description pos;
  pos.add("model", 1);
  if (auto rc = parse_args("serve", a, desc, vm, &pos, check)) return *rc;
  if (o.api_key.empty())
    if (const char* k = std::getenv("TANDEM_API_KEY"); k && *k) o.api_key = k;
  apply_model_option(o.model, vm, o.pipeline, o.sets);
  const auto [host, port] = listen_address(o);

  // Signals are taken by sigtimedwait on this thread only: block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  runtime_options ro;
  ro.overrides = overrides(o);
  ro.progress = [](std::string_view s) { std::cerr << s << "\n"; };
  source_options sopt;
  sopt.served_model_name = o.served_model_name;
  sopt.chat_template = o.chat_template;
  auto source = make_runtime_source(o.pipeline, ro, sopt);
  const completion_source& src = *source;
  server_options so;
  so.host = host;
  so.port = static_cast<uint16_t>(port);
  so.io_threads = o.io_threads;
  so.max_pending = o.max_pending;
  so.max_connections = o.max_connections;
  so.header_limit = o.header_limit;
  so.body_limit = o.body_limit;
  so.header_timeout_s = o.header_timeout_s;
  so.api_key = o.api_key;
  so.auth_all = o.api_key_all_paths;
  so.cors_origins = o.cors_origins;
  so.tool_parser = o.tool_parser;
  server srv(std::move(source), so);
  const uint16_t bound = srv.start();
  const int rc = wait(src, "http://" + host + ":" + std::to_string(bound), set);
  std::cerr << "shutting down\n";
  srv.stop(std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_s * 1000)));
  return rc;
}

}  // namespace tandem::cli
