#pragma once
// Shared by the dflash2 tests: the fixture directory, case tensors, a writer of drafter
// directories with random weights (any config, f32 / bf16, one file or shards), a bound
// drafter on backend.cpu with a given target table and head.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "dflash2_drafter.hpp"
#include "dflash2_weights.hpp"
#include "safetensors_file.hpp"
#include "tandem/model_store.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace dflash2_test {

namespace fs = std::filesystem;
using namespace tandem;

inline fs::path fixture_dir() {
  const char* root = std::getenv("TANDEM_SOURCE_ROOT");
  return fs::path(root ? root : ".") / "tests" / "spec" / "fixtures" / "dflash2_tiny";
}

inline tensor_info info_of(const safetensors::tensor_entry& t) {
  tensor_info i;
  i.name = t.name;
  i.type = safetensors::tandem_dtype(t.type).value();
  i.shape = t.shape;
  i.data = t.data;
  i.nbytes = t.nbytes;
  return i;
}

template <class T>
std::vector<T> values(const safetensors::safetensors_file& f, const std::string& name) {
  const safetensors::tensor_entry* t = f.find(name);
  if (!t) throw std::runtime_error("case file lacks " + name);
  std::vector<T> v(t->nbytes / sizeof(T));
  std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

// ---- Writing drafter directories.

struct host_tensor {
  std::string dtype;  // "F32" or "BF16"
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

inline host_tensor make_tensor(const std::vector<float>& f, std::vector<int64_t> shape, bool bf16) {
  host_tensor t{bf16 ? "BF16" : "F32", std::move(shape), {}};
  if (bf16) {
    t.bytes.resize(f.size() * 2);
    for (size_t i = 0; i < f.size(); ++i) {
      const uint16_t h = fp32_to_bf16(f[i]);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  } else {
    t.bytes.resize(f.size() * 4);
    std::memcpy(t.bytes.data(), f.data(), t.bytes.size());
  }
  return t;
}

inline void write_safetensors(const fs::path& file, const std::map<std::string, host_tensor>& tensors) {
  std::string header = "{";
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream out(file, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

// MANIFEST.sha256 over every file of `dir` (but itself).
inline void write_manifest(const fs::path& dir) {
  std::map<std::string, std::string> lines;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "MANIFEST.sha256")
      lines[e.path().filename().string()] = sha256_file(e.path());
  std::ofstream out(dir / "MANIFEST.sha256");
  for (const auto& [name, hash] : lines) out << hash << "  " << name << "\n";
}

inline std::string config_json(const dflash2_config& c) {
  std::string layers;
  for (int l : c.target_layers) layers += (layers.empty() ? "" : ", ") + std::to_string(l);
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"architecture\": \"dflash2\",\n \"target\": {\"arch\": \"%s\", \"hidden_size\": %lld, \"vocab_size\": "
                "%lld, \"num_layers\": %d},\n \"hidden_size\": %lld, \"num_layers\": %d, \"num_heads\": %d, "
                "\"num_kv_heads\": %d, \"head_dim\": %d,\n \"intermediate_size\": %lld, \"rms_norm_eps\": %g, "
                "\"rope_theta\": %g,\n \"target_layers\": [%s], \"block_size\": %d, \"conv_group_size\": %d,\n "
                "\"selector_top_k\": %d, \"selector_rank\": %d, \"context_window\": %lld}\n",
                c.target.arch.c_str(), static_cast<long long>(c.target.hidden_size),
                static_cast<long long>(c.target.vocab_size), c.target.num_layers, static_cast<long long>(c.hidden_size),
                c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, static_cast<long long>(c.intermediate_size),
                static_cast<double>(c.rms_norm_eps), static_cast<double>(c.rope_theta), layers.c_str(), c.block_size,
                c.conv_group_size, c.selector_top_k, c.selector_rank, static_cast<long long>(c.context_window));
  return buf;
}

// The smollm2-135m-instruct drafter of ARCHITECTURE.md's config.json.
inline dflash2_config default_config() {
  dflash2_config c;
  c.target = {"llama", 576, 49152, 30};
  c.hidden_size = 576;
  c.num_layers = 2;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 100000.0f;
  c.target_layers = {1, 8, 14, 20, 27};
  c.block_size = 8;
  c.conv_group_size = 16;
  c.selector_top_k = 16;
  c.selector_rank = 64;
  c.context_window = 2048;
  return c;
}

struct write_options {
  bool bf16 = false;
  int shards = 1;                 // > 1: model-0000K-of-0000N.safetensors + index
  std::string drop_tensor;        // leave this tensor out
  uint32_t seed = 1;
};

// A drafter directory of config `c` with random weights (small enough that activations stay
// tame), its MANIFEST.sha256 written last.
inline void write_drafter(const fs::path& dir, const dflash2_config& c, const write_options& o = {}) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json(c);
  std::mt19937 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::map<std::string, host_tensor>> shards(static_cast<size_t>(std::max(1, o.shards)));
  std::map<std::string, std::string> weight_map;
  size_t i = 0;
  for (const auto& [name, shape] : dflash2_tensor_shapes(c)) {
    if (name == o.drop_tensor) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> f(static_cast<size_t>(n));
    const bool is_norm = name.ends_with("norm.weight");
    const float scale = is_norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(shape.back()));
    for (float& x : f) x = (is_norm ? 1.0f : 0.0f) + scale * normal(rng);
    if (name.ends_with(".base"))
      for (size_t g = 0; g < f.size(); g += 2) f[g] += 1.0f;  // near the identity convolution
    const size_t s = i++ % shards.size();
    shards[s].emplace(name, make_tensor(f, shape, o.bf16));
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    weight_map[name] = file;
  }
  if (shards.size() == 1) {
    write_safetensors(dir / "model.safetensors", shards[0]);
  } else {
    for (size_t s = 0; s < shards.size(); ++s) {
      char file[64];
      std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      write_safetensors(dir / file, shards[s]);
    }
    std::ofstream idx(dir / "model.safetensors.index.json");
    idx << "{\"metadata\": {}, \"weight_map\": {";
    bool first = true;
    for (const auto& [name, file] : weight_map) idx << (first ? "" : ", ") << "\"" << name << "\": \"" << file << "\"", first = false;
    idx << "}}\n";
  }
  write_manifest(dir);
}

inline fs::path temp_dir(const std::string& name) {
  return fs::temp_directory_path() / ("dflash2_test_" + std::to_string(::getpid()) + "_" + name);
}

// ---- A target for bind(): backend.cpu plus an embedding table and head.

struct cpu_target {
  cpu::cpu_backend be;
  std::unique_ptr<linear_weight> embedding, head;
  draft_target target;

  cpu_target(const dflash2_config& c, const tensor_info& emb, const tensor_info& hd) {
    embedding = be.load_linear(emb);
    head = be.load_linear(hd);
    target = {&be, embedding.get(), head.get(), c.target.arch, c.target.num_layers, c.target.hidden_size,
              c.target.vocab_size};
  }
};

inline dflash2_settings settings_for(const fs::path& dir, int k = 0) {
  return {dir.string(), k, 0, true};
}

}  // namespace dflash2_test
