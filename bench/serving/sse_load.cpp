// sse_load: a C++ load generator for /v1/completions streaming, for measuring the server
// path itself. bench_serving.py (httpx, one Python thread) spends tens of microseconds per
// SSE event, so at tens of thousands of events a second it measures itself; this client is
// one thread on epoll, parses only what it needs (chunked framing, event boundaries, usage)
// and reports its own CPU time, so its share of the machine is visible.
//
//   build/bench/serving/sse_load --port 8080 --concurrency 1,8,64 --prompt-tokens 128 --output-len 128
//
// Prompts are token ids (like bench_engine's: ids from 100 on, new every request so nothing
// comes from the prefix cache), so the workload matches `bench_engine --decode-prompt P
// --gen G --streams C` exactly. Per concurrency level C it sends --waves x C requests, C at
// a time, on C keep-alive connections, and prints:
//   output tok/s  usage.completion_tokens of all requests / wall time (bench_serving's figure)
//   decode tok/s  with --waves 1: token events after every stream has its first one / the
//                 time from then to the last one (bench_engine's decode figure)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

struct options {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<int> concurrency{1, 8, 64};
  int prompt_tokens = 128, output_len = 128, waves = 1, span = 20000, salt = 1;
};

struct conn {
  int fd = -1;
  std::string out;        // request bytes not yet sent
  size_t sent = 0;
  std::string in;         // raw response bytes not yet parsed
  std::string sse;        // de-chunked body not yet split into events
  bool head_done = false, done = false;
  size_t chunk_left = 0;  // body bytes left in the current chunk (+2 for its CRLF)
  bool in_chunk = false;
  int64_t usage_tokens = -1;
  clk::time_point first{}, last{};
  bool has_first = false;
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "sse_load: %s\n", why.c_str());
  std::exit(1);
}

int connect_to(const options& o) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(o.port));
  inet_pton(AF_INET, o.host.c_str(), &a.sin_addr);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) die("connect failed");
  return fd;
}

std::string request_bytes(const options& o, int seq) {
  std::string body = "{\"prompt\":[";
  for (int i = 0; i < o.prompt_tokens; ++i) {
    if (i) body += ',';
    body += std::to_string(100 + (i * 37 + seq * 11 + o.salt * 7919) % o.span);
  }
  body += "],\"max_tokens\":" + std::to_string(o.output_len) +
          ",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,\"temperature\":0}";
  return "POST /v1/completions HTTP/1.1\r\nHost: " + o.host + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One SSE event ("data: ...") arrived at t.
void on_event(conn& c, std::string_view ev, clk::time_point t, std::vector<clk::time_point>& stamps) {
  if (!ev.starts_with("data: ") || ev == "data: [DONE]") return;
  if (const size_t u = ev.find("\"completion_tokens\":"); u != std::string_view::npos && ev.find("\"choices\":[]") != std::string_view::npos) {
    c.usage_tokens = std::strtoll(ev.data() + u + 20, nullptr, 10);
    return;
  }
  const size_t k = ev.find("\"text\":\"");
  if (k == std::string_view::npos || ev[k + 8] == '"') return;  // no text (a finish chunk)
  if (!c.has_first) c.first = t, c.has_first = true;
  c.last = t;
  stamps.push_back(t);
}

// Parses what arrived: the head, then chunks; true when the response is complete.
bool parse(conn& c, clk::time_point t, std::vector<clk::time_point>& stamps) {
  size_t pos = 0;
  if (!c.head_done) {
    const size_t e = c.in.find("\r\n\r\n");
    if (e == std::string::npos) return false;
    if (c.in.compare(0, 12, "HTTP/1.1 200") != 0) die("server answered: " + c.in.substr(0, 300));
    c.head_done = true;
    pos = e + 4;
  }
  while (pos < c.in.size()) {
    if (!c.in_chunk) {
      const size_t line = pos;
      const size_t e = c.in.find("\r\n", pos);
      if (e == std::string::npos) break;
      const size_t n = std::strtoul(c.in.c_str() + pos, nullptr, 16);
      pos = e + 2;
      if (n == 0) {  // the last chunk: "0\r\n\r\n"
        if (c.in.size() < pos + 2) {  // its closing CRLF has not arrived yet
          pos = line;
          break;
        }
        c.in.clear();
        c.done = true;
        break;
      }
      c.in_chunk = true;
      c.chunk_left = n + 2;
    }
    const size_t take = std::min(c.chunk_left, c.in.size() - pos);
    const size_t body = c.chunk_left > 2 ? std::min(take, c.chunk_left - 2) : 0;
    c.sse.append(c.in, pos, body);
    pos += take;
    c.chunk_left -= take;
    if (c.chunk_left == 0) c.in_chunk = false;
  }
  if (!c.done) c.in.erase(0, pos);
  for (size_t e; (e = c.sse.find("\n\n")) != std::string::npos;) {
    on_event(c, std::string_view(c.sse).substr(0, e), t, stamps);
    c.sse.erase(0, e + 2);
  }
  return c.done;
}

void run_level(const options& o, int concurrency) {
  const int total = concurrency * o.waves;
  const int ep = epoll_create1(0);
  std::vector<conn> conns(concurrency);
  std::vector<clk::time_point> stamps;
  stamps.reserve(static_cast<size_t>(total) * o.output_len);
  int next = 0, finished = 0;
  int64_t tokens = 0;
  std::vector<clk::time_point> firsts;
  const double cpu0 = cpu_seconds();
  const auto t0 = clk::now();
  auto start = [&](int i) {
    conn& c = conns[i];
    if (c.fd < 0) {
      c.fd = connect_to(o);
      epoll_event ev{EPOLLIN | EPOLLOUT, {.u32 = static_cast<uint32_t>(i)}};
      epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    }
    c.out = request_bytes(o, next++);
    c.sent = 0;
    c.head_done = c.in_chunk = c.has_first = c.done = false;
    c.usage_tokens = -1;
    c.sse.clear();
  };
  for (int i = 0; i < concurrency; ++i) start(i);
  std::vector<epoll_event> evs(concurrency);
  char buf[1 << 16];
  while (finished < total) {
    const int n = epoll_wait(ep, evs.data(), concurrency, 10000);
    if (n <= 0) die("no progress for 10 s");
    const auto t = clk::now();
    for (int k = 0; k < n; ++k) {
      const int i = static_cast<int>(evs[k].data.u32);
      conn& c = conns[i];
      if ((evs[k].events & EPOLLOUT) && c.sent < c.out.size()) {
        const ssize_t w = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (w > 0) c.sent += static_cast<size_t>(w);
        if (c.sent == c.out.size()) {
          epoll_event ev{EPOLLIN, {.u32 = static_cast<uint32_t>(i)}};
          epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        }
      }
      if (!(evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      for (;;) {
        const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) die("the server closed a connection");
        if (r < 0) break;
        c.in.append(buf, static_cast<size_t>(r));
      }
      if (!parse(c, t, stamps)) continue;
      ++finished;
      tokens += c.usage_tokens;
      firsts.push_back(c.first);
      if (c.usage_tokens < 0) die("a response without usage");
      if (next < total) {
        start(i);
        epoll_event ev{EPOLLIN | EPOLLOUT, {.u32 = static_cast<uint32_t>(i)}};
        epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
      }
    }
  }
  const double wall = std::chrono::duration<double>(clk::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  for (auto& c : conns) ::close(c.fd);
  ::close(ep);
  double decode = 0;
  if (o.waves == 1) {  // bench_engine's figure: after every stream has its first token
    const auto all_first = *std::max_element(firsts.begin(), firsts.end());
    const auto last = *std::max_element(stamps.begin(), stamps.end());
    const auto after = std::count_if(stamps.begin(), stamps.end(), [&](auto s) { return s > all_first; });
    const double span = std::chrono::duration<double>(last - all_first).count();
    if (span > 0) decode = static_cast<double>(after) / span;
  }
  std::printf("concurrency %3d  requests %4d  tokens %7lld  wall %7.3f s  output tok/s %9.1f  decode tok/s %9.1f  "
              "events %zu  client cpu %.2f s (%.0f%% of one core)\n",
              concurrency, total, static_cast<long long>(tokens), wall, tokens / wall, decode, stamps.size(), cpu,
              100 * cpu / wall);
  std::printf("{\"bench\":\"sse_load\",\"concurrency\":%d,\"requests\":%d,\"tokens\":%lld,\"wall_s\":%.4f,"
              "\"output_tps\":%.1f,\"decode_tps\":%.1f,\"client_cpu_s\":%.3f}\n",
              concurrency, total, static_cast<long long>(tokens), wall, tokens / wall, decode, cpu);
  std::fflush(stdout);
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--host") o.host = val();
    else if (a == "--port") o.port = std::stoi(val());
    else if (a == "--concurrency") o.concurrency = parse_list(val());
    else if (a == "--prompt-tokens") o.prompt_tokens = std::stoi(val());
    else if (a == "--output-len") o.output_len = std::stoi(val());
    else if (a == "--waves") o.waves = std::stoi(val());
    else if (a == "--span") o.span = std::stoi(val());
    else if (a == "--salt") o.salt = std::stoi(val());
    else {
      std::fprintf(stderr,
                   "sse_load [--host H] [--port P] [--concurrency 1,8,64] [--prompt-tokens 128] [--output-len 128]\n"
                   "         [--waves 1] [--span 20000 (prompt ids in [100, 100+span))] [--salt 1 (new prompts)]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  for (int c : o.concurrency) {
    run_level(o, c);
    o.salt += 1000;  // the next level's prompts are new to the prefix cache too
  }
  return 0;
}
