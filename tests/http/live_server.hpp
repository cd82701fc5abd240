#pragma once
// A live tandem::server on 127.0.0.1 (any free port) over a fake_source, and the helpers the
// HTTP tests share: one blocking request per call, SSE events, OpenAI error checks.
#include <boost/test/unit_test.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <map>
#include <thread>

#include "fake_source.hpp"
#include "tandem/server.hpp"

namespace tandem::test {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;


inline const std::string reply_text = "Hello world. The end.";

struct response {
  int status = 0;
  std::string body;
  std::string content_type;
  std::map<std::string, std::string> headers;  // every response header, by name as sent
};

// A live server on 127.0.0.1, any free port, over a fake source.
struct live_server {
  std::shared_ptr<fake_source> src;
  tandem::server srv;
  uint16_t port;

  explicit live_server(tandem::server_options opt = {}, std::chrono::milliseconds tick = std::chrono::milliseconds(1),
                       std::string reply = reply_text, int64_t max_len = 64)
      : src(make_source(std::move(reply), tick, max_len)), srv(src, with_port0(opt)), port(srv.start()) {}

  static std::shared_ptr<fake_source> make_source(std::string reply, std::chrono::milliseconds tick, int64_t max_len) {
    auto s = std::make_shared<fake_source>(std::move(reply), tick);
    s->max_len_ = max_len;
    return s;
  }
  ~live_server() { srv.stop(std::chrono::seconds(2)); }

  static tandem::server_options with_port0(tandem::server_options o) {
    o.port = 0;
    return o;
  }

  response call(bhttp::verb method, const std::string& target, const std::string& body = {},
                const std::map<std::string, std::string>& headers = {}) const {
    net::io_context ioc;
    beast::tcp_stream s(ioc);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    bhttp::request<bhttp::string_body> req{method, target, 11};
    req.set(bhttp::field::host, "127.0.0.1");
    req.set(bhttp::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    bhttp::write(s, req);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> p;
    p.body_limit(64u << 20);
    bhttp::read(s, buf, p);
    response r{static_cast<int>(p.get().result_int()), p.get().body(),
               std::string(p.get()[bhttp::field::content_type]), {}};
    for (const auto& f : p.get()) r.headers[std::string(f.name_string())] = std::string(f.value());
    return r;
  }
  response post(const std::string& target, const std::string& body) const { return call(bhttp::verb::post, target, body); }
  response get(const std::string& target) const { return call(bhttp::verb::get, target); }
};

inline boost::json::value json(const response& r) { return boost::json::parse(r.body); }

// The JSON events of an SSE body, and whether it ended with [DONE].
inline std::pair<std::vector<boost::json::value>, bool> events(const std::string& body) {
  std::vector<boost::json::value> out;
  bool done = false;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    BOOST_REQUIRE(end != std::string::npos);
    const std::string ev = body.substr(at, end - at);
    BOOST_REQUIRE(ev.rfind("data: ", 0) == 0);
    BOOST_TEST(!done, "an event after [DONE]");
    if (ev == "data: [DONE]") done = true;
    else out.push_back(boost::json::parse(ev.substr(6)));
    at = end + 2;
  }
  return {out, done};
}

inline void expect_error(const response& r, int status) {
  BOOST_TEST(r.status == status, r.body);
  auto v = json(r);
  BOOST_TEST(v.at("error").at("message").is_string());
  BOOST_TEST(v.at("error").at("type").is_string());
  BOOST_TEST(v.at("error").at("code").as_int64() == status);
  BOOST_TEST(v.at("error").as_object().contains("param"));
}

inline const std::string chat_hi = R"("messages":[{"role":"user","content":"hi"}])";


}  // namespace tandem::test
