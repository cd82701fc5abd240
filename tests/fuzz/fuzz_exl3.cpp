// libFuzzer harness: an EXL3 model directory (fuzz_model_dir.hpp: config.json,
// tokenizer.json, tokenizer_config.json, model.safetensors or model.safetensors.index.json
// and its shards) opened by weights.exl3 (exl3_plugin::exl3_model). It either throws
// model_error or gives tensors with unique names found by find(), where
//   - a plain tensor has nbytes = elements x element size, every byte readable;
//   - an exl3 (opaque) tensor is a descriptor (exl3::exl3_tensor::of) of a tensor group whose parts are
//     all readable at the sizes the descriptor states: trellis [k/16][n/16][16*bits] int16,
//     suh [k], svh [n], bias [n] when present; bits 1..8; k, n positive multiples of 128
//     covering the unpadded in x out shape; out_perm a permutation of the outputs;
// and the tokenizer metadata builds a tandem::tokenizer or throws model_error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "exl3_model.hpp"
#include "fuzz_model_dir.hpp"
#include "fuzz_support.hpp"
#include "tandem_exl3/tensor.hpp"

using tandem::fuzz::read_all;
using tandem::fuzz::require;

namespace {

void check_group(const tandem::tensor_info& t, const tandem::exl3::exl3_tensor& e) {
  require(e.bits >= 1 && e.bits <= 8, "exl3 bits outside 1..8");
  require(e.k > 0 && e.n > 0 && e.k % 128 == 0 && e.n % 128 == 0, "exl3 k / n not positive multiples of 128");
  require(e.in_features > 0 && e.in_features <= e.k && e.out_features > 0 && e.out_features <= e.n,
          "exl3 unpadded shape outside the padded one");
  require(t.shape == std::vector<int64_t>{e.out_features, e.in_features}, "tensor shape is not {out, in}");
  require(e.trellis && e.suh && e.svh, "exl3 descriptor without trellis / suh / svh");
  read_all(e.trellis, static_cast<size_t>(e.k / 16 * (e.n / 16) * 16 * e.bits) * 2);
  read_all(e.suh, static_cast<size_t>(e.k) * 2);
  read_all(e.svh, static_cast<size_t>(e.n) * 2);
  if (e.bias) read_all(e.bias, static_cast<size_t>(e.n) * 2);
  if (e.out_perm) {
    std::vector<bool> seen(static_cast<size_t>(e.out_features));
    for (int64_t i = 0; i < e.out_features; ++i) {
      const int32_t p = e.out_perm[i];
      require(p >= 0 && p < e.out_features && !seen[static_cast<size_t>(p)], "out_perm is not a permutation");
      seen[static_cast<size_t>(p)] = true;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_model_input<tandem::exl3_plugin::exl3_model>(data, size, [](const auto& m) {
    tandem::fuzz::check_tensors(m, [](const tandem::tensor_info& t) {
      const auto* e = tandem::exl3::exl3_tensor::of(t.type, t.data, t.nbytes);
      require(e != nullptr, "an exl3 tensor without a valid descriptor");
      check_group(t, *e);
    });
    tandem::fuzz::check_tokenizer(m.meta());
  });
}
