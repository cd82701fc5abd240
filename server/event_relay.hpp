#pragma once
// event_relay: takes token events off the engine thread once per step instead of once per
// token.
//
// Why: the HTTP layer's callback posts each event to its connection's strand, and a post
// that finds an I/O thread asleep wakes it (a futex call, and on a busy machine often a
// context switch that the engine thread waits out). At 64 streams that was 64 posts per
// step on the one thread that also drives the model. Now the engine thread only appends
// each event to a list (wrap()) and, after the step, hands the list over (flush()): one
// wake-up per step. The relay thread then runs the callbacks, in order.
//
// Guarantees: every event reaches its callback exactly once, as its own call, in the order
// the engine emitted it (one producer, one consumer, FIFO). A step with at most
// direct_max events, while the relay has nothing in hand, is delivered on the engine thread
// itself, which keeps the order because nothing earlier is still pending: a few posts cost
// the engine thread less than the extra thread hop (on the 2-core CPU machine, 8 streams
// decoded ~10% slower through the relay than with direct posts; 64 streams gained).
//
// Threads: the wrapped callbacks and flush() must run on one thread (the engine's);
// stop() on any thread once that one no longer calls them.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/engine.hpp"

namespace tandem::http {

class event_relay {
 public:
  using callback = std::function<void(const token_event&)>;
  explicit event_relay(size_t direct_max = 8);
  ~event_relay();
  event_relay(const event_relay&) = delete;
  event_relay& operator=(const event_relay&) = delete;

  // A callback for the engine that stages the event for the next flush().
  callback wrap(callback cb);
  // After each engine step: delivers what the step emitted (see above).
  void flush();
  // Delivers what is left and ends the relay thread; later flushes deliver directly.
  void stop();

 private:
  struct item {
    std::shared_ptr<callback> cb;  // shared: the engine drops its copy when the request ends
    token_event ev;
  };
  void run();
  static void deliver(std::vector<item>& batch);

  const size_t direct_max_;
  std::vector<item> staged_;  // the engine thread's only
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<item> ready_;   // handed over, not yet taken by the relay thread
  bool busy_ = false;         // the relay thread is delivering a batch
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::http
