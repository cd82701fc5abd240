// The key/value section of a GGUF file, mapped onto tandem::meta_value.
//
// Scalars: signed integers and u8/u16/u32 become int64_t, u64 stays uint64_t, floats
// become double. Arrays: integers and bools become vector<int64_t>, floats
// vector<double>, strings vector<string>. Arrays of arrays are rejected (nothing in
// tandem can use them and meta_value cannot hold them).
#include <limits>
#include <unordered_set>

#include "gguf_sections.hpp"
#include "gguf_types.hpp"

namespace tandem::gguf {
namespace {

// Reads one fixed-size scalar of type `t` as int64_t / uint64_t / double / bool.
meta_value read_scalar(byte_reader& r, value_type t, std::string_view what) {
  switch (t) {
    case value_type::u8: return int64_t{r.read<uint8_t>(what)};
    case value_type::i8: return int64_t{r.read<int8_t>(what)};
    case value_type::u16: return int64_t{r.read<uint16_t>(what)};
    case value_type::i16: return int64_t{r.read<int16_t>(what)};
    case value_type::u32: return int64_t{r.read<uint32_t>(what)};
    case value_type::i32: return int64_t{r.read<int32_t>(what)};
    case value_type::u64: return r.read<uint64_t>(what);
    case value_type::i64: return r.read<int64_t>(what);
    case value_type::f32: return double{r.read<float>(what)};
    case value_type::f64: return r.read<double>(what);
    case value_type::boolean: return r.read<uint8_t>(what) != 0;
    case value_type::string: return r.read_string(what);
    case value_type::array: break;
  }
  r.fail("internal: read_scalar called for an array");
}

int64_t as_int(byte_reader& r, const meta_value& v, const std::string& key) {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  const uint64_t u = std::get<uint64_t>(v);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    r.fail("metadata array '" + key + "' holds u64 value " + std::to_string(u) +
           ", beyond the int64 range tandem keeps integer arrays in");
  }
  return static_cast<int64_t>(u);
}

template <class T>
std::vector<T> reserve_vector(uint64_t n) {
  std::vector<T> v;
  v.reserve(n);  // n is already bounded by the bytes left in the file
  return v;
}

meta_value read_array(byte_reader& r, const std::string& key, kv_entry& entry) {
  const std::string what = "an item of array '" + key + "'";
  const auto elem_id = r.read<uint32_t>("array element type of '" + key + "'");
  const auto elem_size = fixed_size(elem_id);
  if (!elem_size) r.fail("metadata array '" + key + "' has unknown element type id " + std::to_string(elem_id));
  const auto elem = static_cast<value_type>(elem_id);
  if (elem == value_type::array) r.fail("metadata array '" + key + "' is an array of arrays, which tandem does not support");
  const auto n = r.read<uint64_t>("array length of '" + key + "'");
  const uint64_t min_item = elem == value_type::string ? 8 : *elem_size;
  if (n > r.left() / min_item) {
    r.fail("metadata array '" + key + "' claims " + std::to_string(n) + " items of type " +
           std::string(name(elem)) + " but only " + std::to_string(r.left()) + " bytes remain");
  }
  if (n > max_array_items) {
    r.fail("metadata array '" + key + "' claims " + std::to_string(n) +
           " items, more than the 2^26 tandem accepts");
  }
  entry.elem_type = elem;
  entry.count = n;
  if (elem == value_type::string) {
    auto out = reserve_vector<std::string>(n);
    for (uint64_t i = 0; i < n; ++i) out.push_back(r.read_string(what));
    return out;
  }
  if (elem == value_type::f32 || elem == value_type::f64) {
    auto out = reserve_vector<double>(n);
    for (uint64_t i = 0; i < n; ++i) out.push_back(std::get<double>(read_scalar(r, elem, what)));
    return out;
  }
  auto out = reserve_vector<int64_t>(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(as_int(r, read_scalar(r, elem, what), key));
  return out;
}

}  // namespace

void read_metadata(byte_reader& r, uint64_t count, model_metadata& meta,
                   std::vector<kv_entry>& kvs) {
  kvs.reserve(count);  // bounded by the caller against the file size
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    std::string key = r.read_string("key of metadata entry " + std::to_string(i));
    if (!seen.insert(key).second) r.fail("metadata key '" + key + "' appears twice");
    const auto type_id = r.read<uint32_t>("value type of '" + key + "'");
    if (!fixed_size(type_id)) {
      r.fail("metadata key '" + key + "' has unknown value type id " + std::to_string(type_id));
    }
    const auto type = static_cast<value_type>(type_id);
    kv_entry entry{key, type, type, 1};
    meta_value v = type == value_type::array ? read_array(r, key, entry)
                                             : read_scalar(r, type, "value of '" + key + "'");
    meta.set(key, std::move(v));
    kvs.push_back(std::move(entry));
  }
}

}  // namespace tandem::gguf
