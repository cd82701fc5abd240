#pragma once
// What every architecture's `tandem quantize --to exl3` shares: the EXL3 output directory
// (shards named model-0000i-of-0000N.safetensors, the index, quantization_config), one
// linear quantized into a shard with its tensor_storage entry, the resumable progress file,
// and the progress bar. quantize_model.cpp (llama GGUF) and quantize_glm.cpp (glm_moe_dsa
// Hugging Face directories) drive it.
#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "quantize_model.hpp"
#include "safetensors_writer.hpp"
#include "tandem_exl3/ldlq.hpp"

namespace tandem::quantize {

class calibration_state;

std::string shard_name(int i, int n);

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> to_f16(const std::vector<float>& v);

class progress_bar {
 public:
  progress_bar(int total, bool on) : total_(total), on_(on), t0_(std::chrono::steady_clock::now()) {}
  void tick(const std::string& what);
  void skip(int n) { total_ -= n; }

 private:
  int total_, done_ = 0;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

// The quantized tensors of a run so far (restored from the progress file on a resume).
struct run_state {
  const exl3_request& req;
  boost::json::object storage;  // tensor_storage of quantization_config.json
  boost::json::object proxy;    // module -> proxy error
  double bits_num = 0, bits_den = 0;

  // Quantizes one linear (w: [k0][n0], rows = inputs) into `shard` under module `key` at
  // `bits`; returns W_hat [k0][n0]. `counted`: part of the layers' bits per weight.
  std::vector<float> add_linear(safetensors_file& shard, const std::string& key, const std::vector<float>& w,
                                int k0, int n0, const exl3::prepared_hessian& hp, uint64_t seed, uint64_t stream,
                                int bits, bool counted);
};

boost::json::object settings_of(const exl3_request& r, const std::string& source);

// The progress file of an unfinished run in `dir`: its layer count, with `st` (and `cal`,
// when given) restored; 0 for a fresh (empty) directory. tandem::error when the directory
// holds another run's settings or other files.
int resume_progress(const std::filesystem::path& dir, const boost::json::object& settings, run_state& st,
                    calibration_state* cal);
// Records `done` finished layers (and `cal`, when given) after a layer's shard is written.
void save_progress(const std::filesystem::path& dir, const boost::json::object& settings, int done,
                   const run_state& st, const calibration_state* cal);
// The last files of a run, once its shards 1..n_shards are written (and the tokenizer
// files): model.safetensors.index.json, config.json (`config` plus quantization_config:
// quant_method exl3, bits = the layers' bits per weight, head_bits, calibration, out_scales,
// codebook) and quantization_config.json (with tensor_storage). Fills rep.bits_per_weight
// and rep.proxy_error, then removes the progress files.
void finish_run(const exl3_request& r, const boost::json::object& settings, const run_state& st, int n_shards,
                boost::json::object config, exl3_report& rep);

// The LM head into `shard`: fp16 (no tensor when tied: the embedding stays the head) at
// head_bits 16, else quantized at head_bits from `head` ([vocab][d], the embedding when
// tied) with Hessian `H`. Returns exl3_report::head's text.
std::string add_head(run_state& st, safetensors_file& shard, const std::vector<float>& head, int64_t vocab, int d,
                     bool tied, const exl3::prepared_hessian& H, uint64_t seed);

// Throws tandem::error naming the setting that is out of range.
void check_request(const exl3_request& r);

}  // namespace tandem::quantize
