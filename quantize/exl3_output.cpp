// See exl3_output.hpp. exl3.md §2 (layout).
#include "exl3_output.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "calibration.hpp"
#include "gguf_source.hpp"
#include "hf_export.hpp"
#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"
#include "tile_coder_cuda.hpp"

namespace tandem::quantize {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace {

constexpr const char* progress_name = "quantize_progress.json";
constexpr const char* state_name = "quantize_state.bin";

json::value read_json_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(ss.str(), ec);
  if (ec) throw error("cannot parse " + p.string() + ": " + ec.message());
  return v;
}

}  // namespace

std::string shard_name(int i, int n) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%05d.safetensors", i, n);
  return b;
}

std::vector<uint8_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  return bytes_of(h);
}

void progress_bar::tick(const std::string& what) {
  ++done_;
  if (!on_) return;
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double eta = done_ ? el / done_ * (total_ - done_) : 0;
  const int w = 30, fill = total_ ? w * done_ / total_ : w;
  std::fprintf(stderr, "\r[%s%s] %d/%d %-40.40s %5.0fs ETA %5.0fs", std::string(fill, '#').c_str(),
               std::string(w - fill, '.').c_str(), done_, total_, what.c_str(), el, eta);
  if (done_ == total_) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

std::vector<float> run_state::add_linear(safetensors_file& shard, const std::string& key, const std::vector<float>& w,
                                         int k0, int n0, const exl3::prepared_hessian& hp, uint64_t seed,
                                         uint64_t stream, int bits, bool counted) {
  exl3::quant_options o;
  o.bits = bits;
  o.cb = req.cb;
  o.scales = req.scales;
  o.threads = req.threads;
  o.encoder = make_tile_encoder(req.device);  // empty (the CPU coder) without a GPU
  exl3::quantized_linear q = exl3::quantize_linear(w.data(), k0, n0, hp, seed, stream, o);
  json::object stored;
  auto put = [&](const std::string& suffix, const std::string& dtype, std::vector<int64_t> shape,
                 std::vector<uint8_t> data) {
    json::array sh;
    for (int64_t d : shape) sh.push_back(d);
    stored[key + "." + suffix] = json::object{{"shape", sh}, {"n_bytes", data.size()}, {"dtype", dtype == "F16" ? "float16" : dtype == "I16" ? "int16" : "int32"}};
    shard.add(key + "." + suffix, dtype, std::move(shape), std::move(data));
  };
  put("trellis", "I16", {q.k / 16, q.n / 16, 16 * bits}, bytes_of(q.trellis));
  put("suh", "F16", {q.k}, bytes_of(q.suh));
  put("svh", "F16", {q.n}, bytes_of(q.svh));
  json::object entry{{"quant_format", "exl3"}, {"bits_per_weight", bits}};
  if (req.cb != exl3::codebook::inst3) {
    const bool mul1 = req.cb == exl3::codebook::mul1;
    const auto mult = static_cast<int32_t>(mul1 ? exl3::mul1_multiplier : exl3::mcg_multiplier);
    put(mul1 ? "mul1" : "mcg", "I32", {}, bytes_of(std::vector<int32_t>{mult}));
    entry[mul1 ? "mul1_multiplier" : "mcg_multiplier"] = mult;
  }
  entry["stored_tensors"] = std::move(stored);
  storage[key] = std::move(entry);
  proxy[key] = q.proxy_error;
  if (counted) {
    bits_num += static_cast<double>(bits) * k0 * n0 + 16.0 * (k0 + n0);
    bits_den += static_cast<double>(k0) * n0;
  }
  return std::move(q.w_hat);
}

json::object settings_of(const exl3_request& r, const std::string& source) {
  json::object s{{"bits", r.bits}, {"head_bits", r.head_bits}, {"codebook", std::string(exl3::name(r.cb))},
                 {"rows", r.rows}, {"cols", r.cols}, {"source", fs::absolute(source).string()},
                 {"calibration", r.calibration.empty() ? "" : fs::absolute(r.calibration).string()}};
  s["out_scales"] = r.scales == exl3::out_scales::always ? "always" : r.scales == exl3::out_scales::never ? "never" : "auto";
  return s;
}

int resume_progress(const fs::path& dir, const json::object& settings, run_state& st, calibration_state* cal) {
  if (!fs::exists(dir / progress_name)) {
    if (!fs::is_empty(dir))
      throw error("output directory " + dir.string() + " is not empty and holds no quantize progress");
    return 0;
  }
  const json::object p = read_json_file(dir / progress_name).as_object();
  if (p.at("settings") != json::value(settings))
    throw error("output directory " + dir.string() + " holds a run with other settings (" +
                json::serialize(p.at("settings")) + "); use an empty directory");
  st.storage = p.at("tensor_storage").as_object();
  st.proxy = p.at("proxy_error").as_object();
  st.bits_num = p.at("bits_num").to_number<double>();
  st.bits_den = p.at("bits_den").to_number<double>();
  if (cal) cal->load(dir / state_name);
  return static_cast<int>(p.at("layers_done").as_int64());
}

void save_progress(const fs::path& dir, const json::object& settings, int done, const run_state& st,
                   const calibration_state* cal) {
  if (cal) cal->save(dir / state_name);
  json::object p{{"settings", settings}, {"layers_done", done}, {"tensor_storage", st.storage},
                 {"proxy_error", st.proxy}, {"bits_num", st.bits_num}, {"bits_den", st.bits_den}};
  write_json(dir / (std::string(progress_name) + ".tmp"), p);
  fs::rename(dir / (std::string(progress_name) + ".tmp"), dir / progress_name);
}

namespace {

void write_index(const fs::path& dir, int n_shards) {
  json::object weight_map;
  size_t total = 0;
  for (int i = 1; i <= n_shards; ++i) {
    const fs::path p = dir / shard_name(i, n_shards);
    total += fs::file_size(p);
    std::ifstream f(p, std::ios::binary);
    uint8_t len[8];
    f.read(reinterpret_cast<char*>(len), 8);
    uint64_t n = 0;
    for (int b = 7; b >= 0; --b) n = (n << 8) | len[b];
    std::string hdr(n, ' ');
    f.read(hdr.data(), static_cast<std::streamsize>(n));
    const json::value parsed = json::parse(hdr);
    for (const auto& kv : parsed.as_object())
      if (kv.key() != "__metadata__") weight_map[kv.key()] = shard_name(i, n_shards);
  }
  write_json(dir / "model.safetensors.index.json",
             json::object{{"metadata", json::object{{"total_size", total}}}, {"weight_map", weight_map}});
}

json::object quantization_config(const exl3_request& r, const json::object& settings, double bits_per_weight) {
  return json::object{{"quant_method", "exl3"}, {"version", "tandem-" TANDEM_QUANT_VERSION},
                      {"bits", bits_per_weight}, {"head_bits", r.head_bits},
                      {"calibration", json::object{{"rows", r.calibration.empty() ? 0 : r.rows},
                                                   {"cols", r.calibration.empty() ? 0 : r.cols}}},
                      {"out_scales", settings.at("out_scales")}, {"codebook", std::string(exl3::name(r.cb))}};
}

}  // namespace

void finish_run(const exl3_request& r, const json::object& settings, const run_state& st, int n_shards,
                json::object config, exl3_report& rep) {
  write_index(r.out_dir, n_shards);
  rep.bits_per_weight = st.bits_den > 0 ? st.bits_num / st.bits_den : 0;
  json::object qc = quantization_config(r, settings, rep.bits_per_weight);
  config["quantization_config"] = qc;
  write_json(r.out_dir / "config.json", config);
  qc["tensor_storage"] = st.storage;
  write_json(r.out_dir / "quantization_config.json", qc);
  for (const auto& kv : st.proxy) rep.proxy_error[kv.key()] = kv.value().to_number<double>();
  fs::remove(r.out_dir / progress_name);
  fs::remove(r.out_dir / state_name);
}

std::string add_head(run_state& st, safetensors_file& shard, const std::vector<float>& head, int64_t vocab, int d,
                     bool tied, const exl3::prepared_hessian& H, uint64_t seed) {
  if (st.req.head_bits == 16) {
    if (!tied) shard.add("lm_head.weight", "F16", {vocab, d}, to_f16(head));
    return tied ? "fp16 (the tied embedding, no lm_head tensor)" : "fp16 lm_head";
  }
  st.add_linear(shard, "lm_head", transpose(head, vocab, d), d, static_cast<int>(vocab), H, seed, 1,
                st.req.head_bits, false);
  return std::to_string(st.req.head_bits) + "-bit lm_head" + (tied ? " quantized from the tied embedding" : "");
}

void check_request(const exl3_request& r) {
  if (r.bits < 1 || r.bits > 8) throw error("--bits must be 1..8, got " + std::to_string(r.bits));
  if (r.head_bits != 16 && (r.head_bits < 1 || r.head_bits > 8))
    throw error("--head-bits must be 1..8 or 16, got " + std::to_string(r.head_bits));
  if (r.rows < 1 || r.cols < 16) throw error("calibration needs --rows >= 1 and --cols >= 16");
  if (r.out_dir.empty()) throw error("no output directory");
}

}  // namespace tandem::quantize
