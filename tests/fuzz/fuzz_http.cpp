// libFuzzer harness: raw bytes as one HTTP/1.1 request, parsed by Boost.Beast with the
// server's header and body limits, then routed (the API key, CORS, every endpoint, request
// JSON, the job builder, the chat template and tokenizer through a stub model). A request
// the client got wrong must get a 4xx, never a 5xx or a crash: the stub source is ready and
// never fails, so every 5xx is a server bug. Generation requests that pass become jobs on a
// stub engine that never produces tokens; they are dropped after one poll of the strand.
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>

#include "fuzz_support.hpp"
#include "router.hpp"
#include "stub_source.hpp"

namespace bhttp = boost::beast::http;
using namespace tandem;
using tandem::fuzz::require;

namespace {

class discard_sink final : public http::response_sink {
 public:
  // Not checked: a stub engine's one token may not be what a job asked for (logprobs).
  void send_json(int, std::string) override {}
  void begin_stream() override {}
  void stream(std::string) override {}
  void end_stream() override {}
  bool gone() const override { return false; }
};

http::server_context& context() {
  static http::server_context* ctx = [] {
    auto* c = new http::server_context;  // lives as long as the fuzzing process
    c->source = std::make_shared<fuzz::stub_source>();
    c->opt.api_key = "sk-fuzz";  // the Authorization header is checked too
    c->opt.cors_origins = {"https://allowed.example"};
    return c;
  }();
  return *ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::server_context& ctx = context();
  bhttp::request_parser<bhttp::string_body> parser;
  parser.eager(true);
  parser.body_limit(ctx.opt.body_limit);
  parser.header_limit(static_cast<uint32_t>(ctx.opt.header_limit));
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_done()) return 0;  // Beast's 400 / 413 / 414 / 431 paths (http_session)
  const auto& req = parser.get();
  http::request_meta meta;
  meta.authorization = req[bhttp::field::authorization];
  meta.origin = req[bhttp::field::origin];
  boost::asio::io_context io;
  auto strand = boost::asio::make_strand(io);
  auto sink = std::make_shared<discard_sink>();
  http::router r(ctx);
  http::route_result res = r.handle(req.method_string(), req.target(), req.body(), sink, strand,
                                    http::clock::now(), meta);
  // 501: /reset_prefix_cache on an engine without a prefix cache (the stub's) is the answer.
  if (res.rep) require(res.rep->status < 500 || res.rep->status == 501, "a request answered 5xx");
  io.poll();
  static_cast<fuzz::stub_source&>(*ctx.source).finish_all();
  io.poll();
  if (res.job) res.job->cancel_all();
  io.poll();
  return 0;
}
