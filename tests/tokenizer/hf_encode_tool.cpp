// Test helper: a Hugging Face tokenizer directory through hf_common's tokenizer.json reader
// and tandem::tokenizer, for comparison with the `tokenizers` library (test_hf_tokenizer_json.py).
//
//   tokenizer_hf_encode DIR < {"texts": ["...", ...]}
//   -> {"pre": "glm4", "ids": [[...], ...], "decoded": ["...", ...], "eog": [...]}
// Exit 2 with the error on stderr when the directory is rejected.
#include <iostream>
#include <iterator>
#include <string>

#include <boost/json.hpp>

#include "hf_json.hpp"
#include "hf_tokenizer.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem/weight_format.hpp"

namespace json = boost::json;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenizer_hf_encode DIR < {\"texts\": [...]}\n";
    return 1;
  }
  try {
    const std::filesystem::path dir = argv[1];
    tandem::model_metadata meta;
    tandem::hf::tokenizer_ids ids;
    if (std::filesystem::exists(dir / "config.json")) {
      const json::value cfg = tandem::hf::read_json(dir / "config.json");
      if (auto v = tandem::hf::json_token_id(cfg.as_object(), "vocab_size")) ids.vocab_size = *v;
      ids.eog = tandem::hf::json_token_ids(cfg.as_object(), "eos_token_id", (dir / "config.json").string());
    }
    tandem::hf::read_hf_tokenizer(dir, ids, meta);
    const auto tok = tandem::tokenizer::from_metadata(meta, (dir / "tokenizer.json").string());
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const json::value in = json::parse(input);
    json::array all_ids, decoded;
    for (const auto& t : in.as_object().at("texts").as_array()) {
      const std::string_view text = t.as_string();
      const std::vector<int32_t> got = tok.encode(text);
      json::array row;
      for (int32_t id : got) row.push_back(id);
      all_ids.push_back(std::move(row));
      decoded.push_back(json::string(tok.decode(got)));
    }
    json::array eog;
    for (int32_t id : tok.end_of_generation_ids()) eog.push_back(id);
    json::object out{{"pre", tok.pre()}, {"ids", std::move(all_ids)}, {"decoded", std::move(decoded)},
                     {"eog", std::move(eog)}};
    std::cout << json::serialize(out) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
