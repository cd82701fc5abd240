// libFuzzer harness: a Hugging Face model directory (fuzz_model_dir.hpp: config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja,
// model.safetensors or model.safetensors.index.json and its shards) opened by
// weights.safetensors (st_plugin::hf_model, strict shard policy). It either throws
// model_error or gives: tensors with unique names found by find(), each of a dtype tandem
// reads, nbytes = elements x element size, every byte readable; general.architecture set;
// and tokenizer metadata from which tandem::tokenizer builds or throws model_error.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_model_dir.hpp"
#include "fuzz_support.hpp"
#include "hf_model.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"

using tandem::fuzz::require;

namespace {

void check(const tandem::st_plugin::hf_model& m) {
  require(m.meta().get_string("general.architecture").has_value(), "no general.architecture");
  std::set<std::string> names;
  for (const tandem::tensor_info& t : m.tensors()) {
    require(names.insert(t.name).second, "a tensor name appears twice");
    require(m.find(t.name) == &t, "find() does not give the tensor of that name");
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    require(static_cast<int64_t>(t.nbytes) == numel * tandem::traits(t.type).block_bytes,
            "nbytes is not elements x size");
    const auto* p = static_cast<const unsigned char*>(t.data);
    volatile unsigned sum = 0;
    for (size_t i = 0; i < t.nbytes; ++i) sum = sum + p[i];
  }
  try {
    const auto tok = tandem::tokenizer::from_metadata(m.meta(), "fuzz-model");
    require(tok.vocab_size() > 0, "a tokenizer was built with no tokens");
    tandem::fuzz::note("tokenizer of " + std::to_string(tok.vocab_size()) + " tokens");
  } catch (const tandem::model_error& e) {
    tandem::fuzz::note(std::string("tokenizer: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::scratch_dir dir;
  const auto& path = dir.fill(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const tandem::st_plugin::hf_model m(path);
    tandem::fuzz::note("read " + std::to_string(m.tensors().size()) + " tensors");
    check(m);
  } catch (const tandem::model_error& e) {
    tandem::fuzz::note(e.what());
  }
  return 0;
}
