// fake_serve: the HTTP server with no model behind it — the scripted source of the HTTP
// tests (tests/http/fake_source.hpp), every live request one token per tick — so the server
// path's own capacity, and a client's, can be measured with an engine that costs nothing.
//
//   build/bench/serving/fake_serve --port 18300 [--tick-ms 1] [--io-threads 2]
//   build/bench/serving/sse_load --port 18300 --concurrency 64 --span 26 ...
//   .venv/bin/python bench/serving/bench_serving.py --base-url http://127.0.0.1:18300 ...
//
// At 1 ms a tick, 64 streams are offered ~60k tokens/s (above what the H200 decodes), so
// what arrives is what the server path and the client can carry. Tokens are bytes of a
// fixed text (every token one SSE event). The source posts each event itself (it has no
// event_relay, as runtime_source has), so this is the HTTP layer's capacity, not the
// engine thread's.
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "fake_source.hpp"
#include "tandem/server.hpp"

namespace {
volatile std::sig_atomic_t stop_requested = 0;
}

int main(int argc, char** argv) {
  tandem::server_options opt;
  opt.port = 18300;
  opt.max_pending = 4096;
  int tick_ms = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--port") opt.port = static_cast<uint16_t>(std::stoi(v));
    else if (a == "--tick-ms") tick_ms = std::stoi(v);
    else if (a == "--io-threads") opt.io_threads = std::stoi(v);
    else {
      std::fprintf(stderr, "fake_serve [--port P] [--tick-ms 1] [--io-threads 2]\n");
      return 2;
    }
  }
  std::string reply;
  while (reply.size() < 65536) reply += "the quick brown fox jumps over the lazy dog ";
  auto src = std::make_shared<tandem::test::fake_source>(reply, std::chrono::milliseconds(tick_ms));
  src->max_len_ = 1 << 20;
  tandem::server s(src, opt);
  std::printf("fake_serve on port %u, a token per %d ms per request\n", s.start(), tick_ms);
  std::fflush(stdout);
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
  while (!stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.stop(std::chrono::milliseconds(1000));
  return 0;
}
