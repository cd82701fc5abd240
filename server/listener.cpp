#include "listener.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "api_error.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"

namespace tandem::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr auto exhausted_backoff = std::chrono::milliseconds(50);
constexpr int shed_per_round = 64;  // then back off, so a flood cannot pin the strand

bool out_of_descriptors(const boost::system::error_code& ec) {
  const int v = ec.value();
  return ec.category() == boost::system::system_category() &&
         (v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM);
}

const std::string& shed_reply() {
  static const std::string reply = [] {
    const std::string body = error_body(503, "the server is out of file descriptors; retry later");
    return fmt::format("HTTP/1.1 503 Service Unavailable\r\nServer: tandem\r\nContent-Type: application/json\r\n"
                       "Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
                       body.size(), body);
  }();
  return reply;
}

}  // namespace

listener::listener(net::io_context& ioc, server_context& ctx, on_connection handler)
    : ioc_(ioc), ctx_(ctx), handler_(std::move(handler)), strand_(net::make_strand(ioc)), acceptor_(strand_),
      backoff_(strand_) {}

listener::~listener() {
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

uint16_t listener::open(const tcp::endpoint& ep) {
  boost::system::error_code ec;
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw error(fmt::format("server: cannot listen on {}:{}: {}", ep.address().to_string(), ep.port(), ec.message()));
  take_reserve();
  if (reserve_fd_ < 0) throw error("server: no file descriptor left for the reserve (raise ulimit -n)");
  return acceptor_.local_endpoint().port();
}

void listener::start() {
  net::dispatch(strand_, [this] { accept(); });
}

void listener::close() {
  net::post(strand_, [this] {
    closed_ = true;
    boost::system::error_code ec;
    backoff_.cancel();
    acceptor_.close(ec);
  });
}

void listener::take_reserve() {
  if (reserve_fd_ < 0) reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void listener::accept() {
  if (closed_) return;
  acceptor_.async_accept(net::make_strand(ioc_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (closed_ || ec == net::error::operation_aborted) return;  // closed at shutdown
    if (ec) {
      on_accept_error(ec);
      return;
    }
    take_reserve();  // given up to shed a connection earlier and not yet back
    const bool over_limit = ctx_.connections.load() >= ctx_.opt.max_connections;
    handler_(std::move(socket), over_limit);
    accept();
  });
}

void listener::on_accept_error(const boost::system::error_code& ec) {
  if (!out_of_descriptors(ec)) {
    // ECONNABORTED and the like concern one connection, not the listener: keep going.
    accept();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - last_warning_ > std::chrono::seconds(5)) {
    last_warning_ = now;
    default_logger().warn(fmt::format("accept: {}; answering 503 to waiting connections ({} open; raise ulimit -n "
                                      "or lower --max-connections)",
                                      ec.message(), ctx_.connections.load()));
  }
  shed_pending();
  retry_after(exhausted_backoff);
}

// Answers pending connections with 503 through the reserve descriptor, one at a time.
void listener::shed_pending() {
  for (int i = 0; i < shed_per_round; ++i) {
    if (reserve_fd_ < 0) take_reserve();
    if (reserve_fd_ < 0) return;  // someone else took it: wait for the next round
    ::close(reserve_fd_);
    reserve_fd_ = -1;
    const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      take_reserve();
      return;  // nothing waiting (EAGAIN), or still no descriptor
    }
    // Best effort: the reply fits any socket buffer; a client that is gone just misses it.
    [[maybe_unused]] const ssize_t n = ::send(fd, shed_reply().data(), shed_reply().size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    // Read what the client already sent: closing with unread bytes would send a reset,
    // which can destroy the reply before the client reads it.
    char discard[4096];
    for (size_t drained = 0; drained < (64u << 10);) {
      const ssize_t got = ::recv(fd, discard, sizeof discard, MSG_DONTWAIT);
      if (got <= 0) break;
      drained += static_cast<size_t>(got);
    }
    ::close(fd);
    ++shed_;
    take_reserve();
  }
}

void listener::retry_after(std::chrono::milliseconds delay) {
  backoff_.expires_after(delay);
  backoff_.async_wait([this](boost::system::error_code ec) {
    if (ec || closed_) return;
    accept();
  });
}

}  // namespace tandem::http
