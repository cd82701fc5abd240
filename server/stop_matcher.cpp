#include "stop_matcher.hpp"

#include <algorithm>

namespace tandem::http {

stop_matcher::stop_matcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

size_t stop_matcher::holdback(std::string_view tail) const {
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t most = std::min(tail.size(), s.size() - 1);
    for (size_t k = most; k > keep; --k)
      if (tail.substr(tail.size() - k) == std::string_view(s).substr(0, k)) {
        keep = k;
        break;
      }
  }
  return keep;
}

stop_matcher::result stop_matcher::push(std::string_view text) {
  result r;
  if (stopped_) return r;
  pending_ += text;
  // The earliest match wins, so text before it is released and nothing after it.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < best) {
      best = at;
      which = &s;
    }
  }
  if (which) {
    r.text = pending_.substr(0, best);
    r.stopped = stopped_ = true;
    r.matched = *which;
    pending_.clear();
    return r;
  }
  const size_t keep = holdback(pending_);
  r.text = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return r;
}

stop_matcher::result stop_matcher::finish() {
  result r;
  if (stopped_) return r;
  r.text = std::move(pending_);
  pending_.clear();
  return r;
}

}  // namespace tandem::http
