#pragma once
// http_session: one client connection (HTTP/1.1 keep-alive) on its own strand. Reads a
// request, routes it, and writes the answer: a whole response, or a chunked server-sent-
// events stream fed by a completion_job. While a job runs, the socket is watched so that a
// client that hangs up gets its engine requests cancelled.
//
// Hostile or odd clients:
// - A request line over header_limit gets 414, other headers over it 431, a body over
//   body_limit 413, anything unparsable 400; then the session stops reading requests but
//   keeps reading and discarding what the client still sends (up to body_limit bytes or a
//   few seconds, like nginx's lingering close) so that the client, still writing, is not
//   reset before it can read the answer.
// - A client that half-closes (shutdown(SHUT_WR) after its requests, as `nc -N` does) gets
//   every response. End of input alone cannot tell a half-close from a hang-up, so a
//   session that sees it while a job runs writes a probe — the response's own head when it
//   streams, else an interim "100 Continue" (which HTTP/1.1 clients must accept) — and
//   then polls the socket: a peer that is really gone answers the probe with a reset.
// - A session created over server_options::max_connections answers 503 and closes.
// - Slow clients (slowloris): the request line and headers must arrive within
//   server_options::header_timeout_s, counted from the connection's start for its first
//   request and from the first byte for a keep-alive one (an idle keep-alive connection
//   waits up to 120 s); past it the connection is closed.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "response_sink.hpp"
#include "router.hpp"

namespace tandem::http {

class http_session : public std::enable_shared_from_this<http_session>, public response_sink {
 public:
  http_session(boost::asio::ip::tcp::socket&& socket, server_context& ctx, router& r, bool over_limit = false);
  ~http_session() override;
  void run();

  void send_json(int status, std::string body) override;
  void begin_stream() override;
  void stream(std::string bytes) override;
  void end_stream() override;
  bool gone() const override { return gone_; }

 private:
  void do_read();
  void read_request();
  void on_read(boost::beast::error_code ec);
  void refuse(boost::beast::error_code ec);
  void handle();
  void send(int status, std::string body, const std::string& content_type);
  void enqueue(std::string bytes, bool last);
  void pump();
  void on_write(boost::beast::error_code ec, size_t written, bool last);
  void watch_disconnect();
  void on_readable(boost::beast::error_code ec, uint64_t generation);
  void on_end_of_input();
  void poll_for_reset();
  void hang_up();
  void linger_then_close();
  void drain(size_t left);
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
  std::deque<pending_write> queue_;  // a deque: pushing keeps the bytes of a write in flight in place
  std::vector<boost::asio::const_buffer> gather_;  // the write in flight: queue_'s first entries
  std::shared_ptr<completion_job> job_;
  clock::time_point arrival_;
  std::string method_, target_;
  header_list extra_headers_;  // for the next answer: CORS (auth.hpp)
  uint64_t watch_generation_ = 0;
  bool writing_ = false, keep_alive_ = true, chunked_ = true, gone_ = false, closed_ = false;
  bool over_limit_ = false;       // answer 503 to whatever arrives
  bool input_ended_ = false;      // the client sent FIN (half-close or gone)
  bool probed_ = false;           // bytes written since input ended (a gone peer resets)
  bool responded_ = false;        // this exchange's response has started
  bool linger_ = false;           // after the last write: drain the input, then close
  bool first_request_ = true;     // the header timeout counts from the connection's start
  std::optional<boost::asio::steady_timer> poll_timer_;
  std::string drain_buffer_;
};

}  // namespace tandem::http
