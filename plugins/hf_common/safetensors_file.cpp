#include "safetensors_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include <boost/json.hpp>

#include "tandem/error.hpp"

namespace tandem::safetensors {
namespace json = boost::json;
namespace {

struct dtype_row { st_dtype type; std::string_view name; int size; };
constexpr std::array<dtype_row, 15> dtypes = {{
    {st_dtype::f64, "F64", 8}, {st_dtype::f32, "F32", 4}, {st_dtype::f16, "F16", 2},
    {st_dtype::bf16, "BF16", 2}, {st_dtype::f8_e4m3, "F8_E4M3", 1}, {st_dtype::f8_e5m2, "F8_E5M2", 1},
    {st_dtype::i64, "I64", 8}, {st_dtype::i32, "I32", 4}, {st_dtype::i16, "I16", 2},
    {st_dtype::i8, "I8", 1}, {st_dtype::u64, "U64", 8}, {st_dtype::u32, "U32", 4},
    {st_dtype::u16, "U16", 2}, {st_dtype::u8, "U8", 1}, {st_dtype::boolean, "BOOL", 1}}};

// The safetensors format caps the header at 100 MB; a longer one is corrupt.
constexpr uint64_t max_header = 100'000'000;
constexpr int64_t max_dim = int64_t(1) << 48;

// A JSON number that is a non-negative integer below `limit`, else nullopt.
std::optional<int64_t> as_count(const json::value& v, int64_t limit) {
  if (v.is_int64()) {
    const int64_t x = v.get_int64();
    if (x >= 0 && x < limit) return x;
  } else if (v.is_uint64()) {
    const uint64_t x = v.get_uint64();
    if (x < static_cast<uint64_t>(limit)) return static_cast<int64_t>(x);
  }
  return std::nullopt;
}

std::string json_text(const json::value& v) {
  std::string s = json::serialize(v);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

std::optional<st_dtype> parse_dtype(std::string_view name) {
  for (const auto& d : dtypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}
std::string_view dtype_name(st_dtype t) { return dtypes.at(static_cast<size_t>(t)).name; }
int dtype_size(st_dtype t) { return dtypes.at(static_cast<size_t>(t)).size; }

int64_t tensor_entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

safetensors_file::safetensors_file(const std::filesystem::path& path) : source_(path.string()) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw model_error(source_, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw model_error(source_, "not a readable regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw model_error(source_, std::string("cannot map: ") + std::strerror(err));
    }
    map_ = p;
    bytes_ = {static_cast<const std::byte*>(p), size};
  }
  ::close(fd);
  try {
    parse();
  } catch (...) {
    if (map_) ::munmap(map_, bytes_.size());
    throw;
  }
}

safetensors_file::safetensors_file(std::vector<std::byte> bytes, std::string source)
    : source_(std::move(source)), owned_(std::move(bytes)) {
  bytes_ = {owned_.data(), owned_.size()};
  parse();
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, bytes_.size());
}

const tensor_entry* safetensors_file::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void safetensors_file::parse() {
  auto fail = [&](const std::string& what) -> void { throw model_error(source_, what); };
  if (bytes_.size() < 8) fail("too short for a safetensors header (" + std::to_string(bytes_.size()) + " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(bytes_[i]);
  if (n < 2 || n > max_header || n > bytes_.size() - 8)
    fail("header length " + std::to_string(n) + " does not fit the file of " +
         std::to_string(bytes_.size()) + " bytes (limit " + std::to_string(max_header) + ")");
  const std::string_view text(reinterpret_cast<const char*>(bytes_.data() + 8), n);
  json::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec) fail("header is not valid JSON: " + ec.message());
  if (!root.is_object()) fail("header is not a JSON object");
  const std::byte* data = bytes_.data() + 8 + n;
  const auto data_size = static_cast<int64_t>(bytes_.size() - 8 - n);

  for (const auto& kv : root.as_object()) {
    const std::string name(kv.key());
    if (name == "__metadata__") {
      if (!kv.value().is_object()) fail("__metadata__ is not an object");
      for (const auto& m : kv.value().as_object()) {
        if (!m.value().is_string()) fail("__metadata__." + std::string(m.key()) + " is not a string");
        metadata_[std::string(m.key())] = std::string(m.value().as_string());
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail("tensor '" + name + "': " + what); };
    if (name.empty()) fail("a tensor has an empty name");
    if (!kv.value().is_object()) bad("entry is not an object");
    const json::object& o = kv.value().as_object();
    for (const auto& f : o)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        bad("unknown field '" + std::string(f.key()) + "'");
    const json::value* dt = o.if_contains("dtype");
    const json::value* sh = o.if_contains("shape");
    const json::value* off = o.if_contains("data_offsets");
    if (!dt || !sh || !off) bad("needs dtype, shape and data_offsets");
    if (!dt->is_string()) bad("dtype is not a string");
    tensor_entry t;
    t.name = name;
    t.file = source_;
    const auto type = parse_dtype(std::string_view(dt->as_string()));
    if (!type) bad("unknown dtype '" + std::string(dt->as_string()) + "'");
    t.type = *type;
    if (!sh->is_array() || sh->as_array().size() > 8) bad("shape is not an array of at most 8 dims");
    int64_t numel = 1;
    for (const auto& d : sh->as_array()) {
      const auto v = as_count(d, max_dim);
      if (!v) bad("shape entry " + json_text(d) + " is not a dimension");
      t.shape.push_back(*v);
      if (*v != 0 && numel > max_dim / *v) bad("shape has too many elements");
      numel *= *v;
    }
    if (!off->is_array() || off->as_array().size() != 2) bad("data_offsets is not [begin, end]");
    const auto b = as_count(off->as_array()[0], data_size + 1);
    const auto e = as_count(off->as_array()[1], data_size + 1);
    if (!b || !e || *b > *e)
      bad("data_offsets " + json_text(*off) + " are not inside the " + std::to_string(data_size) +
          " data bytes");
    const int64_t want = numel * dtype_size(t.type);
    if (*e - *b != want)
      bad("data_offsets span " + std::to_string(*e - *b) + " bytes but shape and dtype need " +
          std::to_string(want));
    t.nbytes = static_cast<size_t>(want);
    t.data = data + *b;
    index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  if (index_.size() != tensors_.size()) fail("duplicate tensor names in the header");

  // No two tensors may share bytes.
  std::vector<const tensor_entry*> by_start;
  for (const auto& t : tensors_)
    if (t.nbytes > 0) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_start.size(); ++i)
    if (by_start[i - 1]->data + by_start[i - 1]->nbytes > by_start[i]->data)
      fail("tensors '" + by_start[i - 1]->name + "' and '" + by_start[i]->name + "' overlap");

  // Typed access needs natural alignment; a file with odd offsets gets aligned copies.
  for (auto& t : tensors_) {
    const auto align = static_cast<uintptr_t>(dtype_size(t.type));
    if (t.nbytes == 0 || reinterpret_cast<uintptr_t>(t.data) % align == 0) continue;
    auto copy = std::make_unique<std::byte[]>(t.nbytes);
    std::memcpy(copy.get(), t.data, t.nbytes);
    t.data = copy.get();
    realigned_.push_back(std::move(copy));
  }
}

model_files::model_files(const std::filesystem::path& dir, shard_policy policy) : policy_(policy) {
  namespace fs = std::filesystem;
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    if (!fs::exists(single, ec))
      throw model_error(dir.string(), "has neither model.safetensors.index.json nor model.safetensors");
    files_.push_back(std::make_unique<safetensors_file>(single));
    add(*files_.back(), nullptr, "model.safetensors");
    return;
  }
  std::ifstream in(index, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw model_error(index.string(), "cannot read");
  json::error_code jec;
  json::value root = json::parse(text, jec);
  if (jec) throw model_error(index.string(), "is not valid JSON: " + jec.message());
  const json::value* wm = root.is_object() ? root.as_object().if_contains("weight_map") : nullptr;
  if (!wm || !wm->is_object()) throw model_error(index.string(), "has no weight_map object");
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> shards;
  for (const auto& kv : wm->as_object()) {
    if (!kv.value().is_string())
      throw model_error(index.string(), "weight_map." + std::string(kv.key()) + " is not a file name");
    const std::string shard(kv.value().as_string());
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      throw model_error(index.string(), "weight_map names '" + shard + "', not a file in the directory");
    weight_map[std::string(kv.key())] = shard;
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
  std::sort(shards.begin(), shards.end());
  if (policy_ == shard_policy::strict)
    for (const auto& s : shards)
      if (!fs::is_regular_file(dir / s, ec))
        throw model_error(index.string(), "names shard '" + s + "', which is not a file in " + dir.string());
  for (const auto& s : shards) {
    files_.push_back(std::make_unique<safetensors_file>(dir / s));
    add(*files_.back(), &weight_map, s);
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      throw model_error(index.string(), "names tensor '" + name + "' in " + shard + ", which lacks it");
    if (policy_ == shard_policy::strict && it->second->file != (dir / shard).string())
      throw model_error(index.string(), "names tensor '" + name + "' in " + shard + ", but it is in " +
                                            it->second->file);
  }
}

void model_files::add(const safetensors_file& f, const std::map<std::string, std::string>* weight_map,
                      const std::string& shard) {
  for (const auto& t : f.tensors()) {
    if (weight_map && policy_ == shard_policy::index_decides) {
      auto it = weight_map->find(t.name);
      if (it == weight_map->end() || it->second != shard) continue;  // the index decides
    }
    if (auto [it, fresh] = by_name_.emplace(t.name, &t); !fresh)
      throw model_error(f.source(), "tensor '" + t.name + "' also appears in " + it->second->file);
    order_.push_back(&t);
  }
}

const tensor_entry* model_files::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::optional<dtype> tandem_dtype(st_dtype t) {
  switch (t) {
    case st_dtype::f32: return dtype::f32;
    case st_dtype::f16: return dtype::f16;
    case st_dtype::bf16: return dtype::bf16;
    case st_dtype::i32: return dtype::i32;
    case st_dtype::i64: return dtype::i64;
    case st_dtype::u8: return dtype::u8;
    default: return std::nullopt;
  }
}

}  // namespace tandem::safetensors
