#pragma once
// Reads the reference logits fixtures made by tools/fixtures/logits_*.py (llama.cpp and
// Hugging Face transformers on the default model).
#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

struct ref_prompt {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<std::pair<int32_t, float>> last_top;                // best first
  std::vector<std::vector<std::pair<int32_t, float>>> per_position_top;  // may be empty
  std::vector<float> last_full;                                    // may be empty
  std::vector<int32_t> greedy;                                     // ends with EOS when hit
  std::vector<float> greedy_margin;                                // best minus second, per step
};

inline std::vector<std::pair<int32_t, float>> top_list(const boost::json::value& v) {
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& e : v.as_array())
    out.emplace_back(static_cast<int32_t>(e.as_array()[0].to_number<int64_t>()),
                     static_cast<float>(e.as_array()[1].to_number<double>()));
  return out;
}

inline std::vector<ref_prompt> load_logits_fixture(const std::string& file) {
  const char* dir = std::getenv("TANDEM_FIXTURES");
  std::ifstream in(std::string(dir ? dir : "tests/fixtures") + "/logits/" + file);
  std::stringstream ss;
  ss << in.rdbuf();
  const boost::json::value doc = boost::json::parse(ss.str());
  std::vector<ref_prompt> out;
  for (const auto& pv : doc.at("prompts").as_array()) {
    const auto& p = pv.as_object();
    ref_prompt r;
    r.name = std::string(p.at("name").as_string());
    for (const auto& t : p.at("token_ids").as_array()) r.ids.push_back(static_cast<int32_t>(t.to_number<int64_t>()));
    r.last_top = top_list(p.at("last_top_k"));
    if (p.contains("per_position_top_k") && p.at("per_position_top_k").is_array())
      for (const auto& pos : p.at("per_position_top_k").as_array()) r.per_position_top.push_back(top_list(pos));
    if (p.contains("last_full_logits") && p.at("last_full_logits").is_array())
      for (const auto& x : p.at("last_full_logits").as_array()) r.last_full.push_back(static_cast<float>(x.to_number<double>()));
    const auto& g = p.at("greedy").as_object();
    for (const auto& t : g.at("token_ids").as_array()) r.greedy.push_back(static_cast<int32_t>(t.to_number<int64_t>()));
    if (g.contains("margins"))
      for (const auto& m : g.at("margins").as_array()) r.greedy_margin.push_back(static_cast<float>(m.to_number<double>()));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tandem::test
