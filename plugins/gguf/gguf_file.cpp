// GGUF layout: header (magic "GGUF", version, tensor count, kv count), key/values,
// tensor infos, padding up to the alignment, then the data section that tensor
// offsets are relative to.
#include "gguf_file.hpp"

#include <string>

#include "gguf_sections.hpp"
#include "mapped_file.hpp"

namespace tandem::gguf {
namespace {

constexpr uint64_t default_alignment = 32;
constexpr uint64_t max_alignment = uint64_t{1} << 30;

void check_magic_and_version(byte_reader& r, uint32_t& version) {
  const auto magic = r.read<uint32_t>("magic");
  if (magic != 0x46554747u) {  // "GGUF" read little-endian
    r.fail("not a GGUF file (magic bytes are not \"GGUF\")");
  }
  version = r.read<uint32_t>("version");
  if ((version & 0xffffu) == 0 && (version >> 16) != 0) {
    r.fail("big-endian GGUF files are not supported");
  }
  if (version != 2 && version != 3) {
    r.fail("unsupported GGUF version " + std::to_string(version) + " (supported: 2, 3)");
  }
}

// The counts are checked against the bytes left so that a corrupt count cannot make the
// parser reserve more than the file could possibly describe.
void check_counts(byte_reader& r, uint64_t tensors, uint64_t kvs) {
  const uint64_t left = r.left();
  if (kvs > max_kv_count) r.fail("metadata count " + std::to_string(kvs) + " is absurd (limit 2^20)");
  if (tensors > max_tensor_count) {
    r.fail("tensor count " + std::to_string(tensors) + " is absurd (limit 2^22)");
  }
  if (kvs > left / min_kv_bytes) {
    r.fail("metadata count " + std::to_string(kvs) + " cannot fit in the " + std::to_string(left) +
           " bytes that follow the header");
  }
  if (tensors > (left - kvs * min_kv_bytes) / min_tensor_info_bytes) {
    r.fail("tensor count " + std::to_string(tensors) + " cannot fit in the " +
           std::to_string(left) + " bytes that follow the header");
  }
}

uint64_t read_alignment(byte_reader& r, const model_metadata& meta) {
  const meta_value* v = meta.find("general.alignment");
  if (!v) return default_alignment;
  uint64_t a = 0;
  if (auto* i = std::get_if<int64_t>(v); i && *i > 0) a = static_cast<uint64_t>(*i);
  if (auto* u = std::get_if<uint64_t>(v)) a = *u;
  if (a == 0 || (a & (a - 1)) != 0 || a > max_alignment) {
    r.fail("general.alignment must be a power-of-two integer up to 2^30");
  }
  return a;
}

}  // namespace

struct gguf_file::storage {
  file_bytes file;
};

gguf_file::gguf_file(gguf_file&&) noexcept = default;
gguf_file& gguf_file::operator=(gguf_file&&) noexcept = default;
gguf_file::~gguf_file() = default;

gguf_file gguf_file::open(const std::filesystem::path& path, load_mode mode) {
  gguf_file f;
  f.label_ = path.string();
  f.storage_.reset(new storage{file_bytes(path, mode == load_mode::mmap)});
  f.bytes_ = f.storage_->file.bytes();
  f.parse_all();
  return f;
}

gguf_file gguf_file::parse(std::span<const std::byte> bytes, std::string label) {
  gguf_file f;
  f.label_ = std::move(label);
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

void gguf_file::parse_all() {
  byte_reader r(bytes_, label_);
  if (r.size() == 0) r.fail("file is empty");
  check_magic_and_version(r, version_);
  const auto n_tensors = r.read<uint64_t>("tensor count");
  const auto n_kvs = r.read<uint64_t>("metadata count");
  check_counts(r, n_tensors, n_kvs);
  read_metadata(r, n_kvs, meta_, kvs_);
  alignment_ = read_alignment(r, meta_);
  auto records = read_tensor_table(r, n_tensors);
  data_offset_ = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_offset_ <= r.size() ? r.size() - data_offset_ : 0;
  if (!records.empty() && data_offset_ > r.size()) {
    r.fail("truncated: the tensor data section would start at offset " +
           std::to_string(data_offset_) + " but the file ends at " + std::to_string(r.size()));
  }
  tensors_.reserve(records.size());
  for (auto& rec : records) {
    tensor_info& t = rec.info;
    if (rec.offset % alignment_ != 0) {
      r.fail("tensor '" + t.name + "' data offset " + std::to_string(rec.offset) +
             " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    if (rec.offset > data_size || t.nbytes > data_size - rec.offset) {
      r.fail("tensor '" + t.name + "' data (" + std::to_string(t.nbytes) + " bytes at offset " +
             std::to_string(rec.offset) + ") runs past the end of the file (data section holds " +
             std::to_string(data_size) + " bytes)");
    }
    t.data = bytes_.data() + data_offset_ + rec.offset;
    tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const tensor_info* gguf_file::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t gguf_file::offset_of(const tensor_info& t) const {
  return static_cast<uint64_t>(static_cast<const std::byte*>(t.data) - bytes_.data()) - data_offset_;
}

}  // namespace tandem::gguf
