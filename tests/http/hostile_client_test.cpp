#define BOOST_TEST_MODULE http_hostile_clients
#include <boost/test/unit_test.hpp>

// Clients that misbehave or exhaust the server: half-closes, oversized request lines and
// headers, too many connections, no file descriptors left. Raw POSIX sockets, so each test
// controls exactly what goes on the wire. After each case a normal request must succeed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fake_source.hpp"
#include "tandem/server.hpp"

using tandem::test::fake_source;

namespace {

struct live_server {
  std::shared_ptr<fake_source> src;
  tandem::server srv;
  uint16_t port;

  explicit live_server(tandem::server_options opt = {}, std::chrono::milliseconds tick = std::chrono::milliseconds(1))
      : src(std::make_shared<fake_source>("Hello world. The end.", tick)), srv(src, port0(opt)), port(srv.start()) {}
  ~live_server() { srv.stop(std::chrono::seconds(2)); }
  static tandem::server_options port0(tandem::server_options o) {
    o.port = 0;
    return o;
  }
};

// A connected client socket (-1 when socket() or connect() fails), with a receive timeout.
int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends all of `bytes`; false when the server reset the connection first.
bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Everything until the server closes (or the receive timeout).
std::string read_to_end(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string request(const std::string& method, const std::string& target, const std::string& body = {},
                    const std::string& extra_headers = {}) {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: x\r\n" + extra_headers;
  if (!body.empty()) r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// A plain GET /health on a fresh connection answers 200.
bool healthy(uint16_t port) {
  const int fd = connect_to(port);
  if (fd < 0) return false;
  send_all(fd, request("GET", "/health", {}, "Connection: close\r\n"));
  const std::string r = read_to_end(fd);
  ::close(fd);
  return r.rfind("HTTP/1.1 200", 0) == 0;
}

const std::string completion = R"({"prompt":"x","max_tokens":5})";

}  // namespace

BOOST_AUTO_TEST_CASE(half_close_after_one_request_gets_the_response) {
  live_server s;
  for (const std::string& body : {std::string(), completion}) {
    const int fd = connect_to(s.port);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(send_all(fd, body.empty() ? request("GET", "/health") : request("POST", "/v1/completions", body)));
    ::shutdown(fd, SHUT_WR);  // as `nc -N` does
    const std::string r = read_to_end(fd);
    ::close(fd);
    BOOST_TEST(r.find("HTTP/1.1 200 OK") != std::string::npos, r);
    if (!body.empty()) BOOST_TEST(r.find("\"text\":\"Hello\"") != std::string::npos, r);
  }
  BOOST_TEST(s.srv.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(half_close_after_pipelined_requests_gets_every_response) {
  live_server s;
  const int fd = connect_to(s.port);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(send_all(fd, request("POST", "/v1/completions", completion) + request("GET", "/health") +
                                 request("POST", "/v1/completions", completion)));
  ::shutdown(fd, SHUT_WR);
  const std::string r = read_to_end(fd);
  ::close(fd);
  BOOST_TEST(count(r, "HTTP/1.1 200 OK") == 3u, r);
  BOOST_TEST(count(r, "\"text\":\"Hello\"") == 2u, r);
}

BOOST_AUTO_TEST_CASE(half_close_streaming_gets_the_whole_stream) {
  live_server s({}, std::chrono::milliseconds(5));
  const int fd = connect_to(s.port);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(send_all(fd, request("POST", "/v1/completions", R"({"prompt":"x","max_tokens":8,"stream":true})")));
  ::shutdown(fd, SHUT_WR);
  const std::string r = read_to_end(fd);
  ::close(fd);
  BOOST_TEST(r.find("HTTP/1.1 200 OK") != std::string::npos, r);
  BOOST_TEST(r.find("data: [DONE]") != std::string::npos, r);
}

BOOST_AUTO_TEST_CASE(a_client_gone_before_a_non_streamed_answer_is_cancelled) {
  // The same FIN as a half-close, but the socket is closed: the probe draws a reset.
  live_server s({}, std::chrono::milliseconds(20));  // ~1.2 s for 60 tokens
  const int fd = connect_to(s.port);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(send_all(fd, request("POST", "/v1/completions", R"({"prompt":"x","max_tokens":60,"ignore_eos":true})")));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::close(fd);
  for (int i = 0; i < 100 && s.srv.in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  BOOST_TEST(s.srv.in_flight() == 0u, "still generating for a client that is gone");
  BOOST_TEST(s.src->cancelled_ >= 1);
  BOOST_TEST(healthy(s.port));
}

BOOST_AUTO_TEST_CASE(a_huge_url_gets_414_without_a_reset) {
  live_server s;
  const int fd = connect_to(s.port);
  BOOST_REQUIRE(fd >= 0);
  // 1 MB of URL: the client is still sending when the server has decided.
  BOOST_TEST(send_all(fd, request("GET", "/" + std::string(1 << 20, 'a'))), "reset while sending");
  const std::string r = read_to_end(fd);
  ::close(fd);
  BOOST_TEST(r.rfind("HTTP/1.1 414", 0) == 0u, r.substr(0, 200));
  BOOST_TEST(r.find("request line") != std::string::npos);
  BOOST_TEST(healthy(s.port));
}

BOOST_AUTO_TEST_CASE(huge_headers_get_431_without_a_reset) {
  live_server s;
  const int fd = connect_to(s.port);
  BOOST_REQUIRE(fd >= 0);
  std::string headers;
  for (int i = 0; i < 4000; ++i) headers += "X-Filler-" + std::to_string(i) + ": " + std::string(200, 'b') + "\r\n";
  BOOST_TEST(send_all(fd, request("GET", "/health", {}, headers)), "reset while sending");
  const std::string r = read_to_end(fd);
  ::close(fd);
  BOOST_TEST(r.rfind("HTTP/1.1 431", 0) == 0u, r.substr(0, 200));
  BOOST_TEST(healthy(s.port));
}

BOOST_AUTO_TEST_CASE(an_oversized_body_gets_413_without_a_reset) {
  tandem::server_options opt;
  opt.body_limit = 1 << 16;
  live_server s(opt);
  const int fd = connect_to(s.port);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(send_all(fd, request("POST", "/v1/completions", std::string(1 << 19, ' '))), "reset while sending");
  const std::string r = read_to_end(fd);
  ::close(fd);
  BOOST_TEST(r.rfind("HTTP/1.1 413", 0) == 0u, r.substr(0, 200));
  BOOST_TEST(healthy(s.port));
}

BOOST_AUTO_TEST_CASE(connections_over_the_limit_get_503_and_the_server_recovers) {
  tandem::server_options opt;
  opt.max_connections = 3;
  live_server s(opt);
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(connect_to(s.port));
    BOOST_REQUIRE(held.back() >= 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all three accepted
  const int extra = connect_to(s.port);
  BOOST_REQUIRE(extra >= 0);
  send_all(extra, request("GET", "/health"));
  const std::string r = read_to_end(extra);
  ::close(extra);
  BOOST_TEST(r.rfind("HTTP/1.1 503", 0) == 0u, r);
  BOOST_TEST(r.find("limit 3") != std::string::npos, r);
  for (int fd : held) ::close(fd);
  bool ok = false;
  for (int i = 0; i < 50 && !ok; ++i) {  // the sessions notice their closed sockets
    ok = healthy(s.port);
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  BOOST_TEST(ok);
}

BOOST_AUTO_TEST_CASE(descriptor_exhaustion_does_not_end_the_accept_loop) {
  tandem::server_options opt;
  opt.max_connections = 100000;  // the descriptor limit is what runs out here
  live_server s(opt);
  BOOST_REQUIRE(healthy(s.port));
  // Client and server share this process's descriptor table: make the client sockets
  // first, then lower the limit to what is open, so that every accept fails with EMFILE.
  std::vector<int> clients;
  for (int i = 0; i < 40; ++i) clients.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int highest = 0;
  for (int fd = 0; fd < 65536; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) highest = fd;
  rlimit old{};
  BOOST_REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(highest + 1);
  BOOST_REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> fillers;  // the free numbers below the limit
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(s.port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t connected = 0, shed = 0;
  for (int fd : clients) {
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) continue;
    ++connected;
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    send_all(fd, request("GET", "/health"));
  }
  // No descriptor is left for a session: each one is answered 503 through the reserve.
  for (int fd : clients) {
    if (fd < 0) continue;
    char buf[64] = {};
    const ssize_t got = ::recv(fd, buf, sizeof buf - 1, 0);
    if (got > 0 && std::string(buf).rfind("HTTP/1.1 503", 0) == 0) ++shed;
    else BOOST_TEST_MESSAGE("recv " << got << " errno " << errno << ": " << buf);
  }
  for (int fd : clients)
    if (fd >= 0) ::close(fd);
  for (int fd : fillers) ::close(fd);
  BOOST_TEST(connected == clients.size());
  BOOST_TEST(shed == connected);
  // Still at the low limit: with the connections gone, new ones are served again.
  bool ok = false;
  for (int i = 0; i < 100 && !ok; ++i) {
    ok = healthy(s.port);
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::setrlimit(RLIMIT_NOFILE, &old);
  BOOST_TEST(ok, "the server stopped accepting after running out of descriptors");
}
