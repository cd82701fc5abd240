#include "http_session.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <sstream>

#include "api_error.hpp"
#include "tandem/logger.hpp"

namespace tandem::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
constexpr auto idle_timeout = std::chrono::seconds(120);  // keep-alive connections
constexpr auto write_timeout = std::chrono::seconds(60);  // a reader this slow is gone
constexpr auto refused_read_timeout = std::chrono::seconds(5);  // a 503 session waits this long for its request
constexpr auto linger_timeout = std::chrono::seconds(5);  // discarding a refused request's rest
constexpr auto reset_poll_interval = std::chrono::milliseconds(100);
constexpr std::string_view continue_probe = "HTTP/1.1 100 Continue\r\n\r\n";

// A request line longer than the header limit: the parser never got a target, and what was
// read holds no line break. (Beast consumes the request line and whole fields as it parses
// them, so one long header field also leaves no line break in the buffer: the target tells
// them apart.)
bool request_line_incomplete(const beast::flat_buffer& b, const bhttp::request<bhttp::string_body>& req) {
  const auto data = b.data();
  const std::string_view head(static_cast<const char*>(data.data()), data.size());
  return req.target().empty() && head.find("\r\n") == std::string_view::npos;
}

}  // namespace

http_session::http_session(tcp::socket&& socket, server_context& ctx, router& r, bool over_limit)
    : stream_(std::move(socket)), ctx_(ctx), router_(r), over_limit_(over_limit) {
  ++ctx_.connections;
}

http_session::~http_session() { --ctx_.connections; }

void http_session::run() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
}

void http_session::do_read() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(ctx_.opt.body_limit);
  parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(ctx_.opt.header_limit, UINT32_MAX)));
  if (std::exchange(first_request_, false) || over_limit_ || buffer_.size() > 0) {
    read_request();  // a new connection, or pipelined bytes already here: the clock runs now
    return;
  }
  // An idle keep-alive connection: wait for the next request's first bytes.
  stream_.expires_after(idle_timeout);
  stream_.async_read_some(buffer_.prepare(16u << 10), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) {
      self->on_read(ec);
      return;
    }
    self->buffer_.commit(n);
    self->read_request();
  });
}

// The request line and headers within the header timeout, then the body within the idle
// timeout (a refused session's request: a few seconds for both).
void http_session::read_request() {
  using duration = std::chrono::steady_clock::duration;
  const auto header_timeout = std::chrono::duration_cast<duration>(std::chrono::duration<double>(ctx_.opt.header_timeout_s));
  stream_.expires_after(over_limit_ ? duration(refused_read_timeout) : header_timeout);
  bhttp::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec || self->parser_->is_done()) {
      self->on_read(ec);
      return;
    }
    self->stream_.expires_after(self->over_limit_ ? duration(refused_read_timeout) : duration(idle_timeout));
    bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                      [self](beast::error_code ec, size_t) { self->on_read(ec); });
  });
}

void http_session::on_read(beast::error_code ec) {
  if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset) {
    close();
    return;
  }
  arrival_ = clock::now();
  method_ = "-";
  target_ = "-";
  responded_ = false;
  if (ec) {
    refuse(ec);
    return;
  }
  if (over_limit_) {
    keep_alive_ = false;
    linger_ = true;
    send(503, error_body(503, fmt::format("the server has too many open connections (limit {}); retry later",
                                          ctx_.opt.max_connections)),
         "application/json");
    log_plain(503);
    return;
  }
  handle();
}

// A request that cannot be parsed or exceeds a limit: answer, then discard the rest.
void http_session::refuse(beast::error_code ec) {
  keep_alive_ = false;
  chunked_ = false;
  linger_ = true;
  int status = 400;
  std::string why = "malformed HTTP request: " + ec.message();
  if (ec == bhttp::error::body_limit) {
    status = 413;
    why = fmt::format("the request body exceeds the limit of {} bytes", ctx_.opt.body_limit);
  } else if (ec == bhttp::error::header_limit && request_line_incomplete(buffer_, parser_->get())) {
    status = 414;
    why = fmt::format("the request line (method and URL) exceeds the limit of {} bytes", ctx_.opt.header_limit);
  } else if (ec == bhttp::error::header_limit) {
    status = 431;
    why = fmt::format("the request headers exceed the limit of {} bytes", ctx_.opt.header_limit);
  }
  send(status, error_body(status, why), "application/json");
  log_plain(status);
}

void http_session::handle() {
  const auto& req = parser_->get();
  keep_alive_ = req.keep_alive() && !ctx_.stopping;
  chunked_ = req.version() >= 11;
  method_ = std::string(req.method_string());
  target_ = std::string(req.target());
  // Access (API key, CORS) is the router's (auth.hpp); the answer carries the CORS headers.
  const request_meta meta{req[bhttp::field::authorization], req[bhttp::field::origin]};
  extra_headers_ = cors_headers(ctx_.opt, meta.origin);
  route_result r = router_.handle(method_, target_, req.body(), shared_from_this(), stream_.get_executor(), arrival_, meta);
  if (r.job) {
    job_ = std::move(r.job);
    if (!job_->answered()) watch_disconnect();
    return;
  }
  if (!r.rep->headers.empty()) extra_headers_ = std::move(r.rep->headers);
  send(r.rep->status, std::move(r.rep->body), r.rep->content_type);
  log_plain(r.rep->status);
}

void http_session::send(int status, std::string body, const std::string& content_type) {
  responded_ = true;
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), parser_ ? parser_->get().version() : 11};
  res.set(bhttp::field::server, "tandem");
  res.set(bhttp::field::content_type, content_type);
  for (const auto& [k, v] : extra_headers_) res.set(k, v);
  extra_headers_.clear();
  res.keep_alive(keep_alive_);
  res.body() = std::move(body);
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  enqueue(std::move(os).str(), true);
}

void http_session::send_json(int status, std::string body) { send(status, std::move(body), "application/json"); }

void http_session::begin_stream() {
  responded_ = true;
  std::string head = fmt::format(
      "HTTP/1.{} 200 OK\r\nServer: tandem\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
      chunked_ ? 1 : 0);
  for (const auto& [k, v] : extra_headers_) head += fmt::format("{}: {}\r\n", k, v);
  extra_headers_.clear();
  if (chunked_) head += "Transfer-Encoding: chunked\r\n";
  else keep_alive_ = false;  // HTTP/1.0: the end of the stream is the end of the connection
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  enqueue(std::move(head), false);
}

void http_session::stream(std::string bytes) {
  if (bytes.empty()) return;
  if (chunked_) bytes = fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes);
  enqueue(std::move(bytes), false);
}

void http_session::end_stream() { enqueue(chunked_ ? "0\r\n\r\n" : std::string(), true); }

void http_session::enqueue(std::string bytes, bool last) {
  if (gone_ || closed_) return;
  if (input_ended_) probed_ = true;  // a peer that is gone will answer it with a reset
  queue_.push_back({std::move(bytes), last});
  if (!writing_) pump();
}

// Everything queued, up to the end of this exchange's response, goes out in one gathered
// write (one syscall, usually one TCP segment): the events a connection has ready when a
// write completes (a step's tokens, a choice's finish, usage, [DONE], the last chunk) are
// not written one round trip at a time. Each stays its own HTTP chunk and SSE event.
void http_session::pump() {
  if (queue_.empty() || gone_) return;
  writing_ = true;
  stream_.expires_after(write_timeout);
  gather_.clear();
  bool last = false;
  for (const auto& w : queue_) {
    gather_.push_back(net::buffer(w.bytes));
    if ((last = w.last)) break;
  }
  net::async_write(stream_, gather_, [self = shared_from_this(), n = gather_.size(), last](beast::error_code ec, size_t) {
    self->on_write(ec, n, last);
  });
}

void http_session::on_write(beast::error_code ec, size_t written, bool last) {
  writing_ = false;
  if (gone_ || closed_) {  // hung up while this write was in flight
    queue_.clear();
    return;
  }
  if (ec) {
    hang_up();
    return;
  }
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(written));
  if (!last) {
    pump();
    return;
  }
  // The exchange is over: stop watching for a hang-up, then read the next request.
  job_.reset();
  ++watch_generation_;
  if (poll_timer_) poll_timer_->cancel();
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
  if (!keep_alive_) {
    if (linger_) linger_then_close();
    else close();
    return;
  }
  do_read();  // a half-closed client's pipelined requests are still in buffer_
}

void http_session::watch_disconnect() {
  if (input_ended_) {  // the socket stays readable at end of input: poll instead
    poll_for_reset();
    return;
  }
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [self = shared_from_this(), gen = watch_generation_](beast::error_code ec) {
                                self->on_readable(ec, gen);
                              });
}

void http_session::on_readable(beast::error_code ec, uint64_t generation) {
  if (generation != watch_generation_ || !job_ || ec == net::error::operation_aborted) return;
  if (!ec) {
    // Peek without blocking: the reactor may wake us with nothing to read, and a blocking
    // peek would then hold this strand (and its token events) until the client next acts.
    char c;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // the client sent more (pipelining): not a hang-up
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      watch_disconnect();  // a spurious wake: keep watching
      return;
    }
    if (n == 0) {
      on_end_of_input();
      return;
    }
  }
  hang_up();
}

// FIN from the client while a job runs: a half-close (answer it) or a hang-up (cancel).
// Only a write can tell: a closed socket answers one with a reset.
void http_session::on_end_of_input() {
  input_ended_ = true;
  if (!probed_ && !responded_ && chunked_) enqueue(std::string(continue_probe), false);
  poll_for_reset();
}

void http_session::poll_for_reset() {
  if (!poll_timer_) poll_timer_.emplace(stream_.get_executor());
  poll_timer_->expires_after(reset_poll_interval);
  poll_timer_->async_wait([self = shared_from_this(), gen = watch_generation_](beast::error_code ec) {
    if (ec || gen != self->watch_generation_ || !self->job_ || self->gone_) return;
    pollfd p{self->stream_.socket().native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) {
      self->hang_up();
      return;
    }
    self->poll_for_reset();
  });
}

// The client is gone: cancel its engine requests and drop the connection.
void http_session::hang_up() {
  if (gone_) return;
  gone_ = true;
  if (poll_timer_) poll_timer_->cancel();
  if (!writing_) queue_.clear();  // an in-flight write still reads its buffer
  if (job_) {
    job_->client_gone();
    job_.reset();
  }
  close();
}

// Stops writing, then reads and discards what the client still sends (bounded in bytes and
// time) before closing: closing with unread input would reset the connection, and the
// client could lose the answer it has not read yet.
void http_session::linger_then_close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) {
    close();
    return;
  }
  buffer_.clear();
  stream_.expires_after(linger_timeout);
  drain(ctx_.opt.body_limit + ctx_.opt.header_limit);
}

void http_session::drain(size_t left) {
  drain_buffer_.resize(16u << 10);
  stream_.async_read_some(net::buffer(drain_buffer_), [self = shared_from_this(), left](beast::error_code ec, size_t n) {
    if (ec || n >= left) {
      self->close();
      return;
    }
    self->drain(left - n);
  });
}

void http_session::close() {
  if (closed_) return;
  closed_ = true;
  if (poll_timer_) poll_timer_->cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

void http_session::log_plain(int status) const {
  ctx_.metrics.count_http(status);
  const double dur = std::chrono::duration<double>(clock::now() - arrival_).count();
  default_logger().info(fmt::format("{} {} {} dur={:.3f}s", method_, target_, status, dur));
}

}  // namespace tandem::http
