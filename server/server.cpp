// server: the listener, the I/O threads and graceful shutdown.
#include "tandem/server.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>

#include <thread>

#include "completion_source.hpp"
#include "http_session.hpp"
#include "listener.hpp"
#include "router.hpp"
#include "server_context.hpp"

namespace tandem {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Descriptors left for connections: the soft RLIMIT_NOFILE less what the rest of the
// process holds or may open (model file, plugins, logs, the listener's reserve).
size_t connection_limit_from_rlimit() {
  constexpr rlim_t kept_for_the_process = 64;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 65536;
  return rl.rlim_cur > kept_for_the_process + 1 ? static_cast<size_t>(rl.rlim_cur - kept_for_the_process) : 1;
}

}  // namespace

struct server::impl {
  // Order matters: the context (and with it the source, whose pending requests hold
  // handlers bound to sockets) must go before the io_context.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  http::server_context ctx;
  http::router routes{ctx};
  http::listener listen{ioc, ctx, [this](tcp::socket&& socket, bool over_limit) {
                          std::make_shared<http::http_session>(std::move(socket), ctx, routes, over_limit)->run();
                        }};
  std::vector<std::thread> threads;
  bool started = false, stopped = false;

  bool drained() const {
    for (const auto& j : ctx.jobs->live())
      if (!j->answered()) return false;
    return ctx.in_flight == 0;
  }

  bool wait_drained(std::chrono::steady_clock::time_point until) const {
    while (!drained()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
};

server::server(std::shared_ptr<completion_source> source, server_options opt) : impl_(std::make_unique<impl>()) {
  impl_->ctx.source = std::move(source);
  impl_->ctx.opt = std::move(opt);
  if (impl_->ctx.opt.io_threads < 1) impl_->ctx.opt.io_threads = 1;
}

server::~server() { stop(std::chrono::milliseconds(0)); }

uint16_t server::start() {
  impl& m = *impl_;
  if (m.started) throw error("server: already started");
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(m.ctx.opt.host, ec);
  if (ec) throw error(fmt::format("server: '{}' is not an IP address", m.ctx.opt.host));
  const tcp::endpoint ep(addr, m.ctx.opt.port);
  if (m.ctx.opt.max_connections == 0) m.ctx.opt.max_connections = connection_limit_from_rlimit();
  const uint16_t port = m.listen.open(ep);
  m.work.emplace(m.ioc.get_executor());
  m.listen.start();
  for (int i = 0; i < m.ctx.opt.io_threads; ++i)
    m.threads.emplace_back([&m] {
      pthread_setname_np(pthread_self(), "tandem-io");  // top -H, perf and /proc tell the threads apart
      m.ioc.run();
    });
  m.started = true;
  return port;
}

void server::stop(std::chrono::milliseconds deadline) {
  impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.ctx.stopping = true;
  m.listen.close();
  const auto now = std::chrono::steady_clock::now();
  if (!m.wait_drained(now + deadline)) {
    for (const auto& j : m.ctx.jobs->live()) j->cancel_all();
    // Cancelled requests end within a step; give their final chunks time to go out.
    m.wait_drained(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  }
  m.ctx.source->shutdown();
  m.work.reset();
  m.ioc.stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
}

size_t server::in_flight() const { return impl_->ctx.in_flight; }

source_state state_of(const completion_source& s) { return s.state(); }
std::string failure_of(const completion_source& s) { return s.failure(); }
std::vector<std::string> summary_of(const completion_source& s) { return s.summary(); }

namespace http {

uint64_t job_registry::add(std::weak_ptr<completion_job> j) {
  std::lock_guard l(mu_);
  jobs_.emplace(next_, std::move(j));
  return next_++;
}

void job_registry::remove(uint64_t key) {
  std::lock_guard l(mu_);
  jobs_.erase(key);
}

size_t job_registry::size() const {
  std::lock_guard l(mu_);
  return jobs_.size();
}

std::vector<std::shared_ptr<completion_job>> job_registry::live() const {
  std::lock_guard l(mu_);
  std::vector<std::shared_ptr<completion_job>> out;
  for (const auto& [k, w] : jobs_)
    if (auto j = w.lock()) out.push_back(std::move(j));
  return out;
}

}  // namespace http
}  // namespace tandem
