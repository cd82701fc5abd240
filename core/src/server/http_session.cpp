#include "http_session.hpp"

#include <sys/socket.h>

#include <cerrno>

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
}  // namespace

http_session::http_session(tcp::socket&& socket, server_context& ctx, router& r)
    : stream_(std::move(socket)), ctx_(ctx), router_(r) {}

void http_session::run() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
}

void http_session::do_read() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(ctx_.opt.body_limit);
  stream_.expires_after(idle_timeout);
  bhttp::async_read(stream_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
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
  if (ec) {
    keep_alive_ = false;
    chunked_ = false;
    if (ec == bhttp::error::body_limit)
      send(413, error_body(413, fmt::format("the request body exceeds the limit of {} bytes", ctx_.opt.body_limit)),
           "application/json");
    else
      send(400, error_body(400, "malformed HTTP request: " + ec.message()), "application/json");
    log_plain(ec == bhttp::error::body_limit ? 413 : 400);
    return;
  }
  handle();
}

void http_session::handle() {
  const auto& req = parser_->get();
  keep_alive_ = req.keep_alive() && !ctx_.stopping;
  chunked_ = req.version() >= 11;
  method_ = std::string(req.method_string());
  target_ = std::string(req.target());
  route_result r = router_.handle(method_, target_, req.body(), shared_from_this(), stream_.get_executor(), arrival_);
  if (r.job) {
    job_ = std::move(r.job);
    if (!job_->answered()) watch_disconnect();
    return;
  }
  send(r.rep->status, std::move(r.rep->body), r.rep->content_type);
  log_plain(r.rep->status);
}

void http_session::send(int status, std::string body, const std::string& content_type) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), parser_ ? parser_->get().version() : 11};
  res.set(bhttp::field::server, "tandem");
  res.set(bhttp::field::content_type, content_type);
  res.keep_alive(keep_alive_);
  res.body() = std::move(body);
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  enqueue(std::move(os).str(), true);
}

void http_session::send_json(int status, std::string body) { send(status, std::move(body), "application/json"); }

void http_session::begin_stream() {
  std::string head = fmt::format(
      "HTTP/1.{} 200 OK\r\nServer: tandem\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
      chunked_ ? 1 : 0);
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
  queue_.push_back({std::move(bytes), last});
  if (!writing_) pump();
}

void http_session::pump() {
  if (queue_.empty() || gone_) return;
  writing_ = true;
  stream_.expires_after(write_timeout);
  const bool last = queue_.front().last;
  net::async_write(stream_, net::buffer(queue_.front().bytes),
                   [self = shared_from_this(), last](beast::error_code ec, size_t) { self->on_write(ec, last); });
}

void http_session::on_write(beast::error_code ec, bool last) {
  writing_ = false;
  if (gone_ || closed_) {  // hung up while this write was in flight
    queue_.clear();
    return;
  }
  if (ec) {
    hang_up();
    return;
  }
  queue_.pop_front();
  if (!last) {
    pump();
    return;
  }
  // The exchange is over: stop watching for a hang-up, then read the next request.
  job_.reset();
  ++watch_generation_;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
  if (!keep_alive_) {
    close();
    return;
  }
  do_read();
}

void http_session::watch_disconnect() {
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
  }
  hang_up();
}

// The client is gone: cancel its engine requests and drop the connection.
void http_session::hang_up() {
  if (gone_) return;
  gone_ = true;
  if (!writing_) queue_.clear();  // an in-flight write still reads its buffer
  if (job_) {
    job_->client_gone();
    job_.reset();
  }
  close();
}

void http_session::close() {
  if (closed_) return;
  closed_ = true;
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
