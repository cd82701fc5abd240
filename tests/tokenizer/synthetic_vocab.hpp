#pragma once
// A small byte-level BPE vocab built in code, for tests that need no model file.
//   ids 0-2: <|endoftext|> <|im_start|> <|im_end|> (CONTROL); 3: <x> (CONTROL); 4: <x>y
//   (USER_DEFINED); then one token per byte symbol (minus `missing_bytes`), then merges.
#include <string>
#include <vector>

#include "tandem/weight_format.hpp"

namespace tandem::test {

struct synthetic_vocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<std::string> merges;

  // Builds the vocab; `merges` are "left right" pairs in byte-level text, in rank order.
  static synthetic_vocab make(const std::vector<std::string>& merges,
                              const std::vector<unsigned char>& missing_bytes = {});
  model_metadata metadata(const std::string& pre = "smollm") const;
  int32_t id(const std::string& token) const;  // throws when absent
};

}  // namespace tandem::test
