// libFuzzer harness: bytes as one safetensors file (hf_common's reader, held in memory).
// The reader either throws model_error or gives tensors that keep the format's promises:
// names unique and found by find(), nbytes = elements x element size, data aligned to the
// element size, no two tensors sharing a byte, every byte readable (ASan checks the reads),
// and a tandem dtype only for the types weights.safetensors documents.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "safetensors_file.hpp"
#include "tandem/error.hpp"

namespace st = tandem::safetensors;
using tandem::fuzz::require;

namespace {

void check(const st::safetensors_file& f) {
  std::set<std::string> names;
  std::vector<std::pair<const std::byte*, size_t>> spans;
  for (const st::tensor_entry& t : f.tensors()) {
    require(names.insert(t.name).second, "a tensor name appears twice");
    require(f.find(t.name) == &t, "find() does not give the tensor of that name");
    require(st::parse_dtype(st::dtype_name(t.type)) == t.type, "dtype name does not round-trip");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      require(d >= 0, "a negative dimension");
      numel *= d;
    }
    require(t.numel() == numel, "numel() disagrees with the shape");
    require(static_cast<int64_t>(t.nbytes) == numel * st::dtype_size(t.type), "nbytes is not elements x size");
    if (t.nbytes == 0) continue;
    require(reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(st::dtype_size(t.type)) == 0,
            "tensor data is not aligned to its element size");
    tandem::fuzz::read_all(t.data, t.nbytes);
    spans.emplace_back(t.data, t.nbytes);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    require(spans[i - 1].first + spans[i - 1].second <= spans[i].first, "two tensors share bytes");
  if (const auto* t = f.tensors().empty() ? nullptr : &f.tensors().front()) {
    const auto td = st::tandem_dtype(t->type);
    const bool readable = t->type == st::st_dtype::f32 || t->type == st::st_dtype::f16 ||
                          t->type == st::st_dtype::bf16 || t->type == st::st_dtype::i32 ||
                          t->type == st::st_dtype::i64 || t->type == st::st_dtype::u8;
    require(td.has_value() == readable, "tandem_dtype() disagrees with the documented list");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  try {
    const st::safetensors_file f(std::move(bytes), "fuzz.safetensors");
    tandem::fuzz::note("read " + std::to_string(f.tensors().size()) + " tensors");
    check(f);
  } catch (const tandem::model_error& e) {
    tandem::fuzz::note(e.what());
  }
  return 0;
}
