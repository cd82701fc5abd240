// Memory, weights and KV of backend.cpu; the ops are in cpu_ops.cpp.
#include "cpu_backend.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "cpu_weights.hpp"
#include "exl3_linear.hpp"
#include "host_memory.hpp"
#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::cpu {
namespace {

int pick_threads(int requested) { return requested > 0 ? requested : usable_cores(); }

size_t pick_budget(int64_t memory_mb) {
  if (memory_mb > 0) return static_cast<size_t>(memory_mb) << 20;
  return available_memory() / 2;
}

[[noreturn]] void weight_fail(const tensor_info& t, const std::string& what) {
  throw error("backend.cpu: tensor '" + t.name + "' " + what);
}

void check_tensor_bytes(const tensor_info& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  const int64_t inner = t.shape.empty() ? 1 : t.shape.back();
  const auto rb = row_bytes(t.type, inner);
  if (!rb) weight_fail(t, "has rows that are not whole " + t.type_name() + " blocks");
  const int64_t rows = inner == 0 ? 0 : n / inner;
  if (t.data == nullptr || static_cast<int64_t>(t.nbytes) < rows * *rb) {
    weight_fail(t, "has " + std::to_string(t.nbytes) + " bytes, its shape needs " +
                       std::to_string(rows * *rb));
  }
}

}  // namespace

cpu_backend::cpu_backend(const cpu_options& opt)
    : kernels_(opt.kernels ? opt.kernels : &best_kernels()),
      pool_(pick_threads(opt.threads)),
      memory_budget_(pick_budget(opt.memory_mb)),
      float_linear_(opt.float_linear),
      exl3_exact_(opt.exl3_exact) {}

std::string cpu_backend::describe() const {
  return "backend.cpu: " + std::to_string(pool_.size()) + " threads, " +
         std::string(kernels_->name) + " kernels, " + (float_linear_ ? "float" : "q8") +
         " linears, f32 activations, memory budget " +
         std::to_string(memory_budget_ >> 20) + " MiB";
}

std::unique_ptr<device_buffer> cpu_backend::alloc(size_t bytes) {
  return std::make_unique<host_buffer>(bytes);
}

void cpu_backend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
}

void cpu_backend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
}

std::unique_ptr<linear_weight> cpu_backend::load_linear(const tensor_info& w) {
  if (w.shape.size() != 2) weight_fail(w, "is not a 2-D linear weight");
  if (w.type == dtype::opaque)  // EXL3, the one opaque format backend.cpu loads (it checks the tag)
    return load_exl3_linear(w, exl3_exact_ ? exl3_mode::exact : exl3_mode::reconstruct, pool_);
  check_tensor_bytes(w);
  const int64_t out = w.shape[0], in = w.shape[1];
  switch (w.type) {
    case dtype::f32:
    case dtype::f16:
    case dtype::q4_0:
    case dtype::q4_1:
    case dtype::q8_0:
      return std::make_unique<cpu_linear>(w.type, w.data, out, in);
    case dtype::bf16: {
      auto buf = std::make_unique<host_buffer>(static_cast<size_t>(out * in) * sizeof(float));
      dequantize_row(dtype::bf16, w.data, static_cast<float*>(buf->data()), out * in);
      const void* data = buf->data();
      return std::make_unique<cpu_linear>(dtype::f32, data, out, in, std::move(buf));
    }
    default:
      weight_fail(w, "has type " + w.type_name() +
                         "; backend.cpu linears take f32, f16, bf16, q4_0, q4_1, q8_0");
  }
}

std::unique_ptr<device_buffer> cpu_backend::load_tensor(const tensor_info& t, dtype as) {
  check_tensor_bytes(t);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  if (as == t.type) {
    auto buf = std::make_unique<host_buffer>(t.nbytes);
    if (t.nbytes > 0) std::memcpy(buf->data(), t.data, t.nbytes);
    return buf;
  }
  if (as != dtype::f32 && as != dtype::f16 && as != dtype::bf16) {
    weight_fail(t, "cannot be converted from " + t.type_name() + " to " +
                       std::string(name(as)) + " (targets: its own type, f32, f16, bf16)");
  }
  std::vector<float> f(static_cast<size_t>(n));
  dequantize_row(t.type, t.data, f.data(), n);  // throws for integer sources
  auto buf = std::make_unique<host_buffer>(static_cast<size_t>(n) * traits(as).block_bytes);
  if (as == dtype::f32) {
    std::memcpy(buf->data(), f.data(), f.size() * sizeof(float));
  } else {
    auto* h = static_cast<uint16_t*>(buf->data());
    for (int64_t i = 0; i < n; ++i) h[i] = as == dtype::f16 ? fp32_to_fp16(f[i]) : fp32_to_bf16(f[i]);
  }
  return buf;
}

std::unique_ptr<kv_storage> cpu_backend::alloc_kv(const kv_layout& layout) {
  return std::make_unique<cpu_kv>(layout);
}

}  // namespace tandem::cpu
