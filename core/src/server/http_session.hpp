#pragma once
// http_session: one client connection (HTTP/1.1 keep-alive) on its own strand. Reads a
// request (body over the limit → 413), routes it, and writes the answer: a whole response,
// or a chunked server-sent-events stream fed by a completion_job. While a job runs, the
// socket is watched so that a client that hangs up gets its engine requests cancelled.
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "response_sink.hpp"
#include "router.hpp"

namespace tandem::http {

class http_session : public std::enable_shared_from_this<http_session>, public response_sink {
 public:
  http_session(boost::asio::ip::tcp::socket&& socket, server_context& ctx, router& r);
  void run();

  void send_json(int status, std::string body) override;
  void begin_stream() override;
  void stream(std::string bytes) override;
  void end_stream() override;
  bool gone() const override { return gone_; }

 private:
  void do_read();
  void on_read(boost::beast::error_code ec);
  void handle();
  void send(int status, std::string body, const std::string& content_type);
  void enqueue(std::string bytes, bool last);
  void pump();
  void on_write(boost::beast::error_code ec, bool last);
  void watch_disconnect();
  void on_readable(boost::beast::error_code ec, uint64_t generation);
  void hang_up();
  void close();
  void log_plain(int status) const;

  struct pending_write {
    std::string bytes;
    bool last = false;  // the end of this exchange's response
  };

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  server_context& ctx_;
  router& router_;
  std::deque<pending_write> queue_;
  std::shared_ptr<completion_job> job_;
  clock::time_point arrival_;
  std::string method_, target_;
  uint64_t watch_generation_ = 0;
  bool writing_ = false, keep_alive_ = true, chunked_ = true, gone_ = false, closed_ = false;
};

}  // namespace tandem::http
