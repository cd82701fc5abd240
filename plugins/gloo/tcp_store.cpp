#include "tcp_store.hpp"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "tandem/error.hpp"

namespace tandem::gloo_detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr const char* plugin = "transport.gloo";

void write_u32(std::vector<char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t read_u32(tcp::socket& s) {
  unsigned char b[4];
  asio::read(s, asio::buffer(b, 4));
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

std::vector<char> read_bytes(tcp::socket& s, uint32_t n) {
  // Keys and values are addresses and rank tables: a megabyte is far beyond any of them,
  // and refusing more keeps a stray client from making the server allocate gigabytes.
  if (n > (1u << 20)) throw std::runtime_error("tcp_store: a message of " + std::to_string(n) + " bytes");
  std::vector<char> v(n);
  if (n) asio::read(s, asio::buffer(v));
  return v;
}

}  // namespace

std::pair<std::string, uint16_t> parse_endpoint(const std::string& text, const char* what) {
  const size_t colon = text.rfind(':');
  unsigned port = 0;
  if (colon == std::string::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ptr != text.data() + text.size() ||
      port == 0 || port > 65535)
    throw plugin_error(plugin, std::string(what) + ": expected HOST:PORT (port 1-65535), got '" + text + "'");
  return {text.substr(0, colon), static_cast<uint16_t>(port)};
}

// ---- server ----

struct tcp_store_server::impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::mutex mu;
  std::map<std::string, std::vector<char>> values;
  std::list<tcp::socket> clients;
  std::list<std::thread> threads;
  std::thread accept_thread;
  bool stopping = false;

  void serve(tcp::socket& s) {
    try {
      for (;;) {
        char op = 0;
        asio::read(s, asio::buffer(&op, 1));
        const std::vector<char> k = read_bytes(s, read_u32(s));
        const std::string key(k.begin(), k.end());
        std::vector<char> reply;
        if (op == 's') {
          std::vector<char> v = read_bytes(s, read_u32(s));
          std::lock_guard l(mu);
          values[key] = std::move(v);
          reply.push_back(1);
        } else if (op == 'g') {
          std::lock_guard l(mu);
          auto it = values.find(key);
          reply.push_back(it != values.end() ? 1 : 0);
          if (it != values.end()) {
            write_u32(reply, static_cast<uint32_t>(it->second.size()));
            reply.insert(reply.end(), it->second.begin(), it->second.end());
          }
        } else {
          return;  // not a store client: drop the connection
        }
        asio::write(s, asio::buffer(reply));
      }
    } catch (const std::exception&) {
      // The client went away (or the server is stopping): this connection is done.
    }
  }

  void accept_loop() {
    for (;;) {
      tcp::socket s(io);
      boost::system::error_code ec;
      acceptor.accept(s, ec);
      std::lock_guard l(mu);
      if (stopping) return;
      if (ec) continue;
      tcp::socket& kept = clients.emplace_back(std::move(s));
      threads.emplace_back([this, &kept] { serve(kept); });
    }
  }
};

tcp_store_server::tcp_store_server(const std::string& host, uint16_t port) : impl_(std::make_unique<impl>()) {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) throw plugin_error(plugin, "rendezvous: '" + host + "' is not an IP address");
  const tcp::endpoint ep(addr, port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec)
    throw plugin_error(plugin, "rendezvous: rank 0 cannot listen on " + host + ":" + std::to_string(port) + ": " +
                                   ec.message());
  impl_->acceptor.listen();
  impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
}

tcp_store_server::~tcp_store_server() {
  {
    std::lock_guard l(impl_->mu);
    impl_->stopping = true;
    // shutdown() wakes the threads blocked in accept / read on these sockets.
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    for (tcp::socket& s : impl_->clients) ::shutdown(s.native_handle(), SHUT_RDWR);
  }
  impl_->accept_thread.join();
  for (std::thread& t : impl_->threads) t.join();
}

// ---- client ----

struct tcp_store::impl {
  asio::io_context io;
  tcp::socket sock{io};
  std::chrono::milliseconds timeout;
  std::string where;

  std::vector<char> request(char op, const std::string& key, const std::vector<char>* value) {
    std::vector<char> msg{op};
    write_u32(msg, static_cast<uint32_t>(key.size()));
    msg.insert(msg.end(), key.begin(), key.end());
    if (value) {
      write_u32(msg, static_cast<uint32_t>(value->size()));
      msg.insert(msg.end(), value->begin(), value->end());
    }
    try {
      asio::write(sock, asio::buffer(msg));
      char found = 0;
      asio::read(sock, asio::buffer(&found, 1));
      if (op == 's' || !found) return {};
      std::vector<char> v = read_bytes(sock, read_u32(sock));
      v.insert(v.begin(), 1);  // marks "found" for the caller
      return v;
    } catch (const std::exception& e) {
      throw plugin_error(plugin, "rendezvous store at " + where + " went away: " + e.what());
    }
  }

  // The value of `key`, polled until it exists or the deadline passes.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      std::vector<char> v = request('g', key, nullptr);
      if (!v.empty()) return {v.begin() + 1, v.end()};
      if (std::chrono::steady_clock::now() > deadline)
        throw plugin_error(plugin, "rendezvous at " + where + ": '" + key + "' did not appear within " +
                                       std::to_string(limit.count()) + " ms (is every rank started, with the same "
                                       "topology.ranks?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
};

tcp_store::tcp_store(const std::string& host, uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()) {
  impl_->timeout = timeout;
  impl_->where = host + ":" + std::to_string(port);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) throw plugin_error(plugin, "rendezvous: '" + host + "' is not an IP address");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    impl_->sock.connect(tcp::endpoint(addr, port), ec);
    if (!ec) break;
    impl_->sock.close();
    if (std::chrono::steady_clock::now() > deadline)
      throw plugin_error(plugin, "rendezvous: no store at " + impl_->where + " within " +
                                     std::to_string(timeout.count()) + " ms (" + ec.message() +
                                     "); is rank 0 running?");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  impl_->sock.set_option(tcp::no_delay(true));
}

tcp_store::~tcp_store() = default;

void tcp_store::set(const std::string& key, const std::vector<char>& data) { impl_->request('s', key, &data); }

std::vector<char> tcp_store::get(const std::string& key) { return impl_->get(key, impl_->timeout); }

void tcp_store::wait(const std::vector<std::string>& keys) { wait(keys, impl_->timeout); }

void tcp_store::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  for (const std::string& k : keys) impl_->get(k, timeout);
}

}  // namespace tandem::gloo_detail
