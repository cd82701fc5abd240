// See quantize_model.hpp. exl3.md §2 (layout) and §5 (algorithm).
#include "quantize_model.hpp"
#include "tile_coder_cuda.hpp"

#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <cstring>
#include <thread>

#include "calibration.hpp"
#include "gguf_source.hpp"
#include "hf_export.hpp"
#include "llama_hparams.hpp"
#include "safetensors_writer.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::quantize {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace {

constexpr const char* progress_name = "quantize_progress.json";
constexpr const char* state_name = "quantize_state.bin";

std::string shard_name(int i, int n) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%05d.safetensors", i, n);
  return b;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  return bytes_of(h);
}

class progress_bar {
 public:
  progress_bar(int total, bool on) : total_(total), on_(on), t0_(std::chrono::steady_clock::now()) {}
  void tick(const std::string& what) {
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
  void skip(int n) { total_ -= n; }

 private:
  int total_, done_ = 0;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

struct run_state {
  const exl3_request& req;
  json::object storage;       // tensor_storage of quantization_config.json
  json::object proxy;         // module -> proxy error
  double bits_num = 0, bits_den = 0;
};

// Quantizes one linear (w: [k0][n0], rows = inputs) into `shard` under `key`; returns W_hat.
std::vector<float> add_linear(run_state& st, safetensors_file& shard, const std::string& key,
                              const std::vector<float>& w, int k0, int n0,
                              const exl3::prepared_hessian& hp, uint64_t seed, uint64_t stream, int bits) {
  exl3::quant_options o;
  o.bits = bits;
  o.cb = st.req.cb;
  o.scales = st.req.scales;
  o.threads = st.req.threads;
  o.encoder = make_tile_encoder(st.req.device);  // empty (the CPU coder) without a GPU
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
  if (st.req.cb != exl3::codebook::inst3) {
    const bool mul1 = st.req.cb == exl3::codebook::mul1;
    const auto mult = static_cast<int32_t>(mul1 ? exl3::mul1_multiplier : exl3::mcg_multiplier);
    put(mul1 ? "mul1" : "mcg", "I32", {}, bytes_of(std::vector<int32_t>{mult}));
    entry[mul1 ? "mul1_multiplier" : "mcg_multiplier"] = mult;
  }
  entry["stored_tensors"] = std::move(stored);
  st.storage[key] = std::move(entry);
  st.proxy[key] = q.proxy_error;
  return std::move(q.w_hat);
}

json::object settings_of(const exl3_request& r, const std::string& source) {
  json::object s{{"bits", r.bits}, {"head_bits", r.head_bits}, {"codebook", std::string(exl3::name(r.cb))},
                 {"rows", r.rows}, {"cols", r.cols}, {"source", fs::absolute(source).string()},
                 {"calibration", r.calibration.empty() ? "" : fs::absolute(r.calibration).string()}};
  s["out_scales"] = r.scales == exl3::out_scales::always ? "always" : r.scales == exl3::out_scales::never ? "never" : "auto";
  return s;
}

json::value read_json_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(ss.str(), ec);
  if (ec) throw error("cannot parse " + p.string() + ": " + ec.message());
  return v;
}

void save_progress(const fs::path& dir, const json::object& settings, int done, const run_state& st,
                   const calibration_state& cal) {
  cal.save(dir / state_name);
  json::object p{{"settings", settings}, {"layers_done", done}, {"tensor_storage", st.storage},
                 {"proxy_error", st.proxy}, {"bits_num", st.bits_num}, {"bits_den", st.bits_den}};
  write_json(dir / (std::string(progress_name) + ".tmp"), p);
  fs::rename(dir / (std::string(progress_name) + ".tmp"), dir / progress_name);
}

void check_request(const exl3_request& r) {
  if (r.bits < 1 || r.bits > 8) throw error("--bits must be 1..8, got " + std::to_string(r.bits));
  if (r.head_bits != 16 && (r.head_bits < 1 || r.head_bits > 8))
    throw error("--head-bits must be 1..8 or 16, got " + std::to_string(r.head_bits));
  if (r.rows < 1 || r.cols < 16) throw error("calibration needs --rows >= 1 and --cols >= 16");
  if (r.out_dir.empty()) throw error("no output directory");
}

}  // namespace

exl3_report quantize_exl3(const weight_format& wf, const std::string& source, const exl3_request& r) {
  check_request(r);
  const model_metadata& meta = wf.meta();
  const llama_hparams hp = llama_hparams::from_metadata(meta, source);
  const int L = hp.n_layers, d = hp.hidden, nh = hp.n_heads, nkv = hp.n_kv_heads, hd = hp.head_dim;
  const bool tied = wf.find("output.weight") == nullptr;
  const tokenizer tok = tokenizer::from_metadata(meta, source);

  fs::create_directories(r.out_dir);
  const json::object settings = settings_of(r, source);
  run_state st{r, {}, {}, 0, 0};
  int start = 0;
  exl3_report rep;
  calibration_state cal;
  if (fs::exists(r.out_dir / progress_name)) {
    const json::object p = read_json_file(r.out_dir / progress_name).as_object();
    if (p.at("settings") != json::value(settings))
      throw error("output directory " + r.out_dir.string() + " holds a run with other settings (" +
                  json::serialize(p.at("settings")) + "); use an empty directory");
    start = static_cast<int>(p.at("layers_done").as_int64());
    st.storage = p.at("tensor_storage").as_object();
    st.proxy = p.at("proxy_error").as_object();
    st.bits_num = p.at("bits_num").to_number<double>();
    st.bits_den = p.at("bits_den").to_number<double>();
    cal.load(r.out_dir / state_name);
    rep.layers_skipped = start;
  } else if (!fs::is_empty(r.out_dir)) {
    throw error("output directory " + r.out_dir.string() + " is not empty and holds no quantize progress");
  } else {
    const std::vector<float> embd = load_f32(wf, source, "token_embd.weight", {hp.vocab, d});
    cal = calibration_state::from_text(r.calibration, tok, embd, d, r.rows, r.cols);
  }
  rep.calibration_tokens = cal.tokens();

  progress_bar bar(7 * L + 1, r.progress);
  bar.skip(7 * start);
  const int n_shards = L + 1;
  for (int l = start; l < L; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    safetensors_file shard;
    const std::vector<float> attn_norm = load_f32(wf, source, g + "attn_norm.weight", {d});
    const std::vector<float> ffn_norm = load_f32(wf, source, g + "ffn_norm.weight", {d});
    shard.add(h + "input_layernorm.weight", "F16", {d}, to_f16(attn_norm));
    shard.add(h + "post_attention_layernorm.weight", "F16", {d}, to_f16(ffn_norm));
    const uint64_t seed = 4ull * l;
    auto lin = [&](const std::string& gname, int out, int in, int permute_heads) {
      std::vector<float> w = load_f32(wf, source, g + gname + ".weight", {out, in});
      if (permute_heads) w = unpermute_rows(w, permute_heads, hd, in);
      return transpose(w, out, in);  // [in][out]
    };
    auto quant = [&](const std::string& key, const std::vector<float>& w, int in, int out,
                     const exl3::prepared_hessian& H, uint64_t sd, uint64_t stream) {
      auto wh = add_linear(st, shard, h + key, w, in, out, H, sd, stream, r.bits);
      st.bits_num += double{r.bits} * in * out + 16.0 * (in + out);
      st.bits_den += double{in} * out;
      bar.tick(h + key);
      return wh;
    };
    // Attention: q, k, v share the input and its Hessian.
    std::vector<float> xn = cal.normed(attn_norm, hp.rms_eps);
    auto H = cal.hessian(xn, d, seed);
    const auto wq = quant("self_attn.q_proj", lin("attn_q", nh * hd, d, nh), d, nh * hd, H, seed, 1);
    const auto wk = quant("self_attn.k_proj", lin("attn_k", nkv * hd, d, nkv), d, nkv * hd, H, seed, 2);
    const auto wv = quant("self_attn.v_proj", lin("attn_v", nkv * hd, d, 0), d, nkv * hd, H, seed, 3);
    std::vector<float> att = cal.attention(xn, wq, wk, wv, hp, r.threads);
    H = cal.hessian(att, nh * hd, seed + 1);
    const auto wo = quant("self_attn.o_proj", lin("attn_output", d, nh * hd, 0), nh * hd, d, H, seed + 1, 1);
    cal.add_linear(att, nh * hd, wo, d, r.threads);
    // MLP: gate and up share the input.
    xn = cal.normed(ffn_norm, hp.rms_eps);
    H = cal.hessian(xn, d, seed + 2);
    const auto wg = quant("mlp.gate_proj", lin("ffn_gate", hp.ffn, d, 0), d, hp.ffn, H, seed + 2, 1);
    const auto wu = quant("mlp.up_proj", lin("ffn_up", hp.ffn, d, 0), d, hp.ffn, H, seed + 2, 2);
    std::vector<float> act = cal.mlp_act(xn, wg, wu, d, hp.ffn, r.threads);
    H = cal.hessian(act, hp.ffn, seed + 3);
    const auto wdn = quant("mlp.down_proj", lin("ffn_down", d, hp.ffn, 0), hp.ffn, d, H, seed + 3, 1);
    cal.add_linear(act, hp.ffn, wdn, d, r.threads);
    shard.write(r.out_dir / shard_name(l + 1, n_shards));
    save_progress(r.out_dir, settings, l + 1, st, cal);
  }

  // Embeddings, final norm, lm_head.
  safetensors_file last;
  const std::vector<float> embd = load_f32(wf, source, "token_embd.weight", {hp.vocab, d});
  const std::vector<float> onorm = load_f32(wf, source, "output_norm.weight", {d});
  last.add("model.embed_tokens.weight", "F16", {hp.vocab, d}, to_f16(embd));
  last.add("model.norm.weight", "F16", {d}, to_f16(onorm));
  const std::vector<float> head = tied ? embd : load_f32(wf, source, "output.weight", {hp.vocab, d});
  if (r.head_bits == 16) {
    if (!tied) last.add("lm_head.weight", "F16", {hp.vocab, d}, to_f16(head));
    rep.head = tied ? "fp16 (the tied embedding, no lm_head tensor)" : "fp16 lm_head";
  } else {
    rep.head = std::to_string(r.head_bits) + "-bit lm_head" + (tied ? " quantized from the tied embedding" : "");
    const std::vector<float> xn = cal.normed(onorm, hp.rms_eps);
    const auto H = cal.hessian(xn, d, 4ull * L);
    run_state& s = st;
    add_linear(s, last, "lm_head", transpose(head, hp.vocab, d), d, hp.vocab, H, 4ull * L, 1, r.head_bits);
  }
  bar.tick("lm_head");
  last.write(r.out_dir / shard_name(n_shards, n_shards));

  // Index, configs, tokenizer.
  json::object weight_map;
  size_t total = 0;
  for (int i = 1; i <= n_shards; ++i) {
    const fs::path p = r.out_dir / shard_name(i, n_shards);
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
  write_json(r.out_dir / "model.safetensors.index.json",
             json::object{{"metadata", json::object{{"total_size", total}}}, {"weight_map", weight_map}});
  rep.bits_per_weight = st.bits_den > 0 ? st.bits_num / st.bits_den : 0;
  json::object qc{{"quant_method", "exl3"}, {"version", "tandem-" TANDEM_QUANT_VERSION},
                  {"bits", rep.bits_per_weight}, {"head_bits", r.head_bits},
                  {"calibration", json::object{{"rows", r.calibration.empty() ? 0 : r.rows}, {"cols", r.calibration.empty() ? 0 : r.cols}}},
                  {"out_scales", settings.at("out_scales")}, {"codebook", std::string(exl3::name(r.cb))}};
  json::object config = llama_config(meta, hp, true);  // §2.2: forced true when the key exists
  config["quantization_config"] = qc;
  write_json(r.out_dir / "config.json", config);
  qc["tensor_storage"] = st.storage;
  write_json(r.out_dir / "quantization_config.json", qc);
  write_json(r.out_dir / "tokenizer.json", tokenizer_json(meta));
  write_json(r.out_dir / "tokenizer_config.json", tokenizer_config(meta, hp.context));
  write_json(r.out_dir / "generation_config.json", generation_config(meta));
  for (const auto& kv : st.proxy) rep.proxy_error[kv.key()] = kv.value().to_number<double>();
  fs::remove(r.out_dir / progress_name);
  fs::remove(r.out_dir / state_name);
  return rep;
}

}  // namespace tandem::quantize
