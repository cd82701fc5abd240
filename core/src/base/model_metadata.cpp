#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {
namespace {

[[noreturn]] void wrong_type(std::string_view key, const char* wanted) {
  throw model_error("metadata", std::string(key) + " is not " + wanted);
}

}  // namespace

const meta_value* model_metadata::find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

std::optional<int64_t> model_metadata::get_int(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  if (auto* u = std::get_if<uint64_t>(v)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) wrong_type(key, "an integer in range");
    return static_cast<int64_t>(*u);
  }
  if (auto* b = std::get_if<bool>(v)) return *b ? 1 : 0;
  wrong_type(key, "an integer");
}

std::optional<double> model_metadata::get_number(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  if (auto* u = std::get_if<uint64_t>(v)) return static_cast<double>(*u);
  wrong_type(key, "a number");
}

std::optional<bool> model_metadata::get_bool(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* b = std::get_if<bool>(v)) return *b;
  wrong_type(key, "a bool");
}

std::optional<std::string> model_metadata::get_string(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  wrong_type(key, "a string");
}

const std::vector<std::string>* model_metadata::get_strings(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return nullptr;
  if (auto* s = std::get_if<std::vector<std::string>>(v)) return s;
  wrong_type(key, "an array of strings");
}

const std::vector<int64_t>* model_metadata::get_ints(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return nullptr;
  if (auto* s = std::get_if<std::vector<int64_t>>(v)) return s;
  wrong_type(key, "an array of integers");
}

const std::vector<double>* model_metadata::get_numbers(std::string_view key) const {
  const meta_value* v = find(key);
  if (!v) return nullptr;
  if (auto* s = std::get_if<std::vector<double>>(v)) return s;
  wrong_type(key, "an array of numbers");
}

tensor_view tensor_info::view() const {
  tensor_view v;
  v.data = const_cast<void*>(data);
  v.type = type;
  v.ndim = static_cast<int>(shape.size());
  if (v.ndim > tensor_view::max_dims) throw model_error(name, "tensor has more than 4 dimensions");
  for (int d = 0; d < v.ndim; ++d) v.shape[d] = shape[d];
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= d == v.ndim - 1 ? v.shape[d] / traits(type).block_elems : v.shape[d];
  }
  return v;
}

}  // namespace tandem
