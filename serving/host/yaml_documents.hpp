#pragma once
// Reading the documents of a YAML stream without yaml-cpp 0.7's YAML::LoadAll, which never
// returns on some invalid input: a stray ',' makes its parser report an empty document
// without consuming the token, so LoadAll appends null nodes until memory runs out
// (yaml-cpp issue 1040, fixed upstream by pull request 1319, after Debian 12's 0.7). Found by
// tests/fuzz/fuzz_pipeline (tests/fuzz/regressions/fuzz_pipeline/).
#include <string>

#include <yaml-cpp/yaml.h>

namespace tandem::host_detail {

struct yaml_documents {
  YAML::Node first;   // the first document (null when the stream has none)
  size_t count = 0;   // documents in the stream, counted up to 2
  YAML::Mark second;  // where the second one starts (when count is 2)
};

// Throws YAML::Exception for a syntax error in the first two documents.
yaml_documents read_yaml_documents(const std::string& text);

}  // namespace tandem::host_detail
