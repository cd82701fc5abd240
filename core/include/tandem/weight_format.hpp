#pragma once
// weight_format: opens a model file (or directory) and exposes its metadata and tensors.
//
//   auto wf = host.create<weight_format>("weights.gguf", cfg);
//   wf->open("model.gguf");                       // throws model_error on a bad file
//   const tensor_info* t = wf->find("blk.0.attn_q.weight");
//   auto arch = wf->meta().get_string("general.architecture");
//
// Tensor data stays owned by the weight_format (mmap'ed for GGUF) and is valid until
// the object is destroyed; backends copy or reference it when they load a linear.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tandem/dtype.hpp"
#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

// One metadata value. GGUF arrays become the vector alternatives.
using meta_value = std::variant<bool, int64_t, uint64_t, double, std::string,
                                std::vector<int64_t>, std::vector<double>,
                                std::vector<std::string>>;

class TANDEM_API model_metadata {
 public:
  void set(std::string key, meta_value v) { values_[std::move(key)] = std::move(v); }
  const meta_value* find(std::string_view key) const;

  // Typed getters: nullopt when absent; model_error when present with another type.
  std::optional<int64_t> get_int(std::string_view key) const;  // any integer type
  std::optional<double> get_number(std::string_view key) const;  // any numeric type
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<std::string>* get_strings(std::string_view key) const;
  const std::vector<int64_t>* get_ints(std::string_view key) const;
  const std::vector<double>* get_numbers(std::string_view key) const;

  const std::map<std::string, meta_value, std::less<>>& values() const { return values_; }

 private:
  std::map<std::string, meta_value, std::less<>> values_;
};

// One tensor of the file. `shape` is numpy order (outermost first); a linear weight is
// {out_features, in_features}. Quantized blocks run along the last dimension. An opaque
// tensor's data is its weight format's descriptor (dtype.hpp).
struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // host memory, valid for the weight_format's lifetime
  size_t nbytes = 0;

  TANDEM_API tensor_view view() const;  // contiguous host view (ndim <= 4)
  // The type to show in messages: name(type), or an opaque tensor's format tag (dtype.hpp).
  std::string type_name() const { return tandem::type_name(type, data, nbytes); }
};

class TANDEM_API weight_format : public plugin_object {
 public:
  ~weight_format() override;

  // Opens `path`; throws model_error naming the file and what is wrong with it.
  virtual void open(const std::filesystem::path& path) = 0;
  // Metadata of the opened model (architecture, hyperparameters, tokenizer, template).
  virtual const model_metadata& meta() const = 0;
  // Every tensor, in file order.
  virtual std::span<const tensor_info> tensors() const = 0;
  // The tensor called `name`, or nullptr.
  virtual const tensor_info* find(std::string_view name) const = 0;
};

}  // namespace tandem
