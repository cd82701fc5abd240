// grammar_mask_dump: tandem's grammar masks for the cross-check against the xgrammar Python
// package (test_mask_crosscheck.py). Reads one JSON object on stdin:
//   {"vocab": ["<hex bytes>", ...], "vocab_size": N, "stop_ids": [...],
//    "cases": [{"schema": <JSON Schema> | null (json_object), "tokens": [ids]}]}
// and writes {"masks": [[[word, ...] per position 0..len(tokens)] per case]}: the mask
// before each token, then after the last. A token the grammar refuses ends its case early
// (its list is shorter), so the Python side sees where tandem stopped agreeing.
#include <boost/json.hpp>

#include <iostream>
#include <iterator>
#include <string>

#include "tandem/grammar.hpp"

namespace {

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

int main() {
  try {
    const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const boost::json::object req = boost::json::parse(in).as_object();
    tandem::grammar_vocabulary v;
    for (const auto& t : req.at("vocab").as_array()) v.token_bytes.push_back(unhex(std::string(t.as_string())));
    v.vocab_size = static_cast<int32_t>(req.at("vocab_size").to_number<int64_t>());
    for (const auto& s : req.at("stop_ids").as_array()) v.stop_ids.push_back(static_cast<int32_t>(s.to_number<int64_t>()));
    const tandem::grammar_compiler gc(v);
    boost::json::array all;
    for (const auto& c : req.at("cases").as_array()) {
      const auto& schema = c.at("schema");
      const auto spec = schema.is_null() ? tandem::grammar_spec::json_object()
                                         : tandem::grammar_spec::json_schema(boost::json::serialize(schema));
      tandem::grammar_matcher m(gc.compile(spec));
      std::vector<uint32_t> words(tandem::grammar_matcher::mask_words(v.vocab_size));
      boost::json::array masks;
      auto dump = [&] {
        std::fill(words.begin(), words.end(), 0u);
        m.fill_mask(words);
        boost::json::array w;
        for (uint32_t x : words) w.push_back(x);
        masks.push_back(std::move(w));
      };
      dump();
      for (const auto& t : c.at("tokens").as_array()) {
        if (!m.accept(static_cast<int32_t>(t.to_number<int64_t>()))) break;
        if (m.terminated()) break;
        dump();
      }
      all.push_back(std::move(masks));
    }
    std::cout << boost::json::serialize(boost::json::object{{"masks", std::move(all)}}) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "grammar_mask_dump: " << e.what() << "\n";
    return 1;
  }
}
