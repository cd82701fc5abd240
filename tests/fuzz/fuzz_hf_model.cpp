// libFuzzer harness: a Hugging Face model directory (fuzz_model_dir.hpp: config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja,
// model.safetensors or model.safetensors.index.json and its shards) opened by
// weights.safetensors (st_plugin::hf_model, strict shard policy). It either throws
// model_error or gives: tensors with unique names found by find(), each of a dtype tandem
// reads (never exl3), nbytes = elements x element size, every byte readable;
// general.architecture set; and tokenizer metadata from which tandem::tokenizer builds or
// throws model_error.
#include <cstddef>
#include <cstdint>

#include "fuzz_model_dir.hpp"
#include "hf_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tandem::fuzz::require;
  return tandem::fuzz::run_model_input<tandem::st_plugin::hf_model>(data, size, [](const auto& m) {
    require(m.meta().get_string("general.architecture").has_value(), "no general.architecture");
    tandem::fuzz::check_tensors(m, [](const tandem::tensor_info&) {
      require(false, "weights.safetensors gave an exl3 tensor");
    });
    tandem::fuzz::check_tokenizer(m.meta());
  });
}
