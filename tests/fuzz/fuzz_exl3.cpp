// libFuzzer harness: an EXL3 model directory (fuzz_model_dir.hpp: config.json,
// tokenizer.json, tokenizer_config.json, model.safetensors or model.safetensors.index.json
// and its shards) opened by weights.exl3 (exl3_plugin::exl3_model). It either throws
// model_error or gives tensors with unique names found by find(), where
//   - a plain tensor has nbytes = elements x element size, every byte readable;
//   - an exl3 tensor is a descriptor (exl3_tensor::of) of a tensor group whose parts are
//     all readable at the sizes the descriptor states: trellis [k/16][n/16][16*bits] int16,
//     suh [k], svh [n], bias [n] when present; bits 1..8; k, n positive multiples of 128
//     covering the unpadded in x out shape; out_perm a permutation of the outputs;
// and the tokenizer metadata builds a tandem::tokenizer or throws model_error.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "exl3_model.hpp"
#include "fuzz_model_dir.hpp"
#include "fuzz_support.hpp"
#include "tandem/error.hpp"
#include "tandem/exl3_tensor.hpp"
#include "tandem/tokenizer.hpp"

using tandem::fuzz::require;

namespace {

void read_all(const void* data, size_t nbytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  volatile unsigned sum = 0;
  for (size_t i = 0; i < nbytes; ++i) sum = sum + p[i];
}

void check_group(const tandem::tensor_info& t, const tandem::exl3_tensor& e) {
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

void check(const tandem::exl3_plugin::exl3_model& m) {
  std::set<std::string> names;
  for (const tandem::tensor_info& t : m.tensors()) {
    require(names.insert(t.name).second, "a tensor name appears twice");
    require(m.find(t.name) == &t, "find() does not give the tensor of that name");
    if (t.type == tandem::dtype::exl3) {
      const auto* e = tandem::exl3_tensor::of(t.type, t.data, t.nbytes);
      require(e != nullptr, "an exl3 tensor without a valid descriptor");
      check_group(t, *e);
      continue;
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    require(static_cast<int64_t>(t.nbytes) == numel * tandem::traits(t.type).block_bytes,
            "nbytes is not elements x size");
    read_all(t.data, t.nbytes);
  }
  try {
    const auto tok = tandem::tokenizer::from_metadata(m.meta(), "fuzz-exl3");
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
    const tandem::exl3_plugin::exl3_model m(path);
    tandem::fuzz::note("read " + std::to_string(m.tensors().size()) + " tensors");
    check(m);
  } catch (const tandem::model_error& e) {
    tandem::fuzz::note(e.what());
  }
  return 0;
}
