#pragma once
// tcp_store: the key-value store Gloo's rendezvous needs (gloo::rendezvous::Store), over TCP
// with Boost.Asio. Rank 0 serves it on host:port for the life of its transport; every rank,
// rank 0 included, is a client. Debian's Gloo (2022) ships only file and Redis stores; this
// is the TCPStore PyTorch builds around Gloo for the same reason.
//
// Wire format, one request per exchange on one connection per client:
//   request  = op(u8: 's' set, 'g' get) | key length (u32 LE) | key | [value length | value]
//   response = set: one byte 1; get: value length | value (sent once the key exists)
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace tandem::gloo_detail {

// Serves the store on host:port until destroyed (a thread accepts, one thread per client).
class tcp_store_server {
 public:
  tcp_store_server(const std::string& host, uint16_t port);
  ~tcp_store_server();
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// A client of the store. Connecting retries until `timeout` (rank 0 may start later than a
// worker); get() and wait() give up after `timeout` with a plugin_error.
class tcp_store final : public ::gloo::rendezvous::Store {
 public:
  tcp_store(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
  ~tcp_store() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// "host:port" split; plugin_error naming `what` when malformed.
std::pair<std::string, uint16_t> parse_endpoint(const std::string& text, const char* what);

}  // namespace tandem::gloo_detail
