#pragma once
// router: maps (method, path) to a handler. Plain endpoints answer at once with a reply;
// chat and completion requests become a completion_job that writes its own answer.
// 404 for an unknown path, 405 for a known path with the wrong method; api_error from a
// handler becomes its status and OpenAI error body. Access (API key, CORS preflight) is
// checked first (auth.hpp).
#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "auth.hpp"
#include "completion_job.hpp"
#include "server_context.hpp"

namespace tandem::http {

struct reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  header_list headers{};  // extra response headers (a preflight's CORS, a 401's WWW-Authenticate)
};

struct route_result {
  std::optional<reply> rep;              // set, or
  std::shared_ptr<completion_job> job;   // a started job that answers through the sink
};

class router {
 public:
  explicit router(server_context& ctx) : ctx_(ctx) {}

  route_result handle(std::string_view method, std::string_view target, std::string_view body,
                      const std::shared_ptr<response_sink>& sink, const boost::asio::any_io_executor& strand,
                      clock::time_point arrival, const request_meta& meta = {});

 private:
  reply health() const;
  reply version() const;
  reply models() const;
  reply metrics() const;
  reply tokenize(std::string_view body) const;
  reply reset_prefix_cache() const;
  reply detokenize(std::string_view body) const;
  std::shared_ptr<completion_job> generate(bool chat, std::string_view path, std::string_view body,
                                           const std::shared_ptr<response_sink>& sink,
                                           const boost::asio::any_io_executor& strand, clock::time_point arrival);
  void require_ready() const;

  server_context& ctx_;
};

}  // namespace tandem::http
