#pragma once
// listener: the accept loop of the HTTP server, built to keep accepting whatever happens.
//
//   listener l(ioc, ctx, [&](tcp::socket s, bool over_limit) { start_session(std::move(s), over_limit); });
//   uint16_t port = l.open(endpoint);   // throws tandem::error when it cannot bind
//   l.start();                           // accepts until close()
//
// - Descriptor exhaustion (EMFILE / ENFILE / ENOBUFS / ENOMEM) never ends the loop. A reserve
//   descriptor (/dev/null) is held from the start; when accept runs out of descriptors the
//   reserve is released, one pending connection is accepted, answered 503 and closed, and the
//   reserve taken again (the libev / libuv recipe). Then the loop backs off and retries, so
//   clients get an answer instead of waiting in the kernel's backlog.
// - At server_options::max_connections open sessions, a new connection is still handed on,
//   flagged over_limit: its session reads the request, answers 503 and closes.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "server_context.hpp"

namespace tandem::http {

class listener {
 public:
  using on_connection = std::function<void(boost::asio::ip::tcp::socket&&, bool over_limit)>;

  listener(boost::asio::io_context& ioc, server_context& ctx, on_connection handler);
  ~listener();
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;

  // Binds and listens; returns the bound port. Throws tandem::error naming the address.
  uint16_t open(const boost::asio::ip::tcp::endpoint& ep);
  void start();
  // Stops accepting (posted to the acceptor's strand, so it never races an accept).
  void close();

  // Connections answered 503 because no descriptor was left for them.
  uint64_t shed() const { return shed_; }

 private:
  void accept();
  void on_accept_error(const boost::system::error_code& ec);
  void shed_pending();
  void retry_after(std::chrono::milliseconds delay);
  void take_reserve();

  boost::asio::io_context& ioc_;
  server_context& ctx_;
  on_connection handler_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;
  int reserve_fd_ = -1;
  bool closed_ = false;
  std::atomic<uint64_t> shed_{0};
  std::chrono::steady_clock::time_point last_warning_{};
};

}  // namespace tandem::http
