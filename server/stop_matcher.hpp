#pragma once
// stop_matcher: finds stop strings in streamed text without ever releasing a partial one.
//
//   stop_matcher m({"\n\n", "END"});
//   auto r = m.push("Hello EN");   // r.text == "Hello ", "EN" held back
//   r = m.push("D and more");      // r.text == "", r.stopped == true ("END" matched)
//   r = m.finish();                // what is still held back, when no stop matched
//
// The text of a match and everything after it is dropped (OpenAI: the stop sequence is
// not included). Held-back text is the longest tail that is a prefix of some stop string,
// so a stop string split across tokens is still caught.
#include <string>
#include <string_view>
#include <vector>

namespace tandem::http {

class stop_matcher {
 public:
  explicit stop_matcher(std::vector<std::string> stops = {});

  struct result {
    std::string text;     // safe to release now
    bool stopped = false; // a stop string matched; nothing more will be released
    std::string matched;  // the stop string that matched
  };

  result push(std::string_view text);
  // End of generation: releases what is held back (nothing after a match).
  result finish();
  bool stopped() const { return stopped_; }

 private:
  size_t holdback(std::string_view tail) const;

  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tandem::http
