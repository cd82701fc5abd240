#pragma once
// server_context: what every connection and job of one server shares.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "completion_source.hpp"
#include "metrics.hpp"
#include "tandem/server.hpp"

namespace tandem::http {

class completion_job;

// Jobs in progress, so shutdown can cancel what did not finish in time.
class job_registry {
 public:
  uint64_t add(std::weak_ptr<completion_job> j);
  void remove(uint64_t key);
  size_t size() const;
  std::vector<std::shared_ptr<completion_job>> live() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, std::weak_ptr<completion_job>> jobs_;
};

struct server_context {
  std::shared_ptr<completion_source> source;
  server_options opt;
  server_metrics metrics;
  // Shared: a job may outlive the server (a handler dropped with the io_context).
  std::shared_ptr<job_registry> jobs = std::make_shared<job_registry>();
  std::atomic<size_t> in_flight{0};    // engine requests submitted and not yet finished
  std::atomic<size_t> connections{0};  // open http_sessions (for server_options::max_connections)
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_request{1};
};

}  // namespace tandem::http
