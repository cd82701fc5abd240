#include "event_relay.hpp"

#include <pthread.h>

namespace tandem::http {

event_relay::event_relay(size_t direct_max) : direct_max_(direct_max), thread_([this] { run(); }) {}

event_relay::~event_relay() { stop(); }

event_relay::callback event_relay::wrap(callback cb) {
  return [this, cb = std::make_shared<callback>(std::move(cb))](const token_event& ev) { staged_.push_back({cb, ev}); };
}

void event_relay::flush() {
  if (staged_.empty()) return;
  {
    std::unique_lock l(mu_);
    const bool relay_idle = !busy_ && ready_.empty();
    if (!(stopping_ || (relay_idle && staged_.size() <= direct_max_))) {
      // A vector handed over whole when the relay has taken the last one: no copy.
      if (ready_.empty()) ready_.swap(staged_);
      else ready_.insert(ready_.end(), std::make_move_iterator(staged_.begin()), std::make_move_iterator(staged_.end()));
      staged_.clear();
      l.unlock();
      cv_.notify_one();
      return;
    }
  }
  // Direct: nothing earlier is pending (or the relay has stopped and delivered all it had).
  deliver(staged_);
}

void event_relay::stop() {
  {
    std::lock_guard l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void event_relay::run() {
  pthread_setname_np(pthread_self(), "tandem-relay");
  std::vector<item> batch;
  std::unique_lock l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return !ready_.empty() || stopping_; });
    if (ready_.empty()) return;  // stopping, and everything handed over is delivered
    batch.swap(ready_);
    busy_ = true;
    l.unlock();
    deliver(batch);
    l.lock();
    busy_ = false;
  }
}

void event_relay::deliver(std::vector<item>& batch) {
  for (auto& it : batch) {
    try {
      (*it.cb)(it.ev);
    } catch (...) {
      // As engine::emit: a failing consumer must not stop the others' events.
    }
  }
  batch.clear();  // may drop the last reference to a finished request's callback
}

}  // namespace tandem::http
