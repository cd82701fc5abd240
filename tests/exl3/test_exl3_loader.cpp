// weights.exl3's loader on a tiny directory built here: names, metadata, descriptors, and
// one broken directory per error class, each with a message naming what is wrong.
#define BOOST_TEST_MODULE exl3_loader
#include <boost/test/unit_test.hpp>

#include <functional>

#include "exl3_model.hpp"
#include "st_writer.hpp"
#include "tandem/error.hpp"
#include "tandem_exl3/tensor.hpp"

using namespace exl3_test;
using tandem::exl3_plugin::exl3_model;

namespace {

struct model_dir {
  std::string config =
      R"({"model_type":"llama","hidden_size":128,"num_hidden_layers":1,"num_attention_heads":2,)"
      R"("num_key_value_heads":1,"head_dim":64,"intermediate_size":192,"rms_norm_eps":1e-5,)"
      R"("rope_theta":10000.0,"vocab_size":8,"max_position_embeddings":64,"tie_word_embeddings":false,)"
      R"("bos_token_id":0,"quantization_config":{"quant_method":"exl3","bits":4.0,"head_bits":16}})";
  std::string tokenizer =
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"abc":4,"\u0120":5},"merges":["a b",["ab","c"]]},)"
      R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)"
      R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true}]},)"
      R"("added_tokens":[{"id":6,"content":"<|im_start|>","special":true},{"id":7,"content":"<|im_end|>","special":true}]})";
  std::string tokenizer_config =
      R"({"bos_token":"<|im_start|>","eos_token":"<|im_end|>","add_bos_token":false,"chat_template":"{{ x }}"})";
  std::vector<st_tensor> tensors;

  model_dir() {
    auto f16 = [](const std::string& n, std::vector<int64_t> s) {
      int64_t c = 1;
      for (auto d : s) c *= d;
      return st_tensor{n, "F16", s, std::vector<uint8_t>(c * 2, 0x3c)};
    };
    auto quant = [&](const std::string& key, int64_t k, int64_t n, int K, const char* marker) {
      std::vector<uint8_t> tr(k / 16 * (n / 16) * 16 * K * 2);
      for (size_t i = 0; i < tr.size(); ++i) tr[i] = static_cast<uint8_t>(i * 37);
      tensors.push_back({key + ".trellis", "I16", {k / 16, n / 16, 16 * K}, tr});
      tensors.push_back(f16(key + ".suh", {k}));
      tensors.push_back(f16(key + ".svh", {n}));
      if (marker) tensors.push_back({key + "." + marker, "I32", {}, as_bytes(std::vector<int32_t>{1})});
    };
    tensors.push_back(f16("model.embed_tokens.weight", {8, 128}));
    tensors.push_back(f16("model.norm.weight", {128}));
    tensors.push_back(f16("model.layers.0.input_layernorm.weight", {128}));
    tensors.push_back(f16("model.layers.0.post_attention_layernorm.weight", {128}));
    quant("model.layers.0.self_attn.q_proj", 128, 128, 4, "mul1");
    quant("model.layers.0.self_attn.k_proj", 128, 128, 2, "mcg");
    quant("model.layers.0.self_attn.v_proj", 128, 128, 8, nullptr);
    quant("model.layers.0.self_attn.o_proj", 128, 128, 1, "mul1");
    quant("model.layers.0.mlp.gate_proj", 128, 256, 3, "mul1");
    quant("model.layers.0.mlp.up_proj", 128, 256, 5, "mul1");
    quant("model.layers.0.mlp.down_proj", 256, 128, 6, "mul1");
    // An unquantized q-like tensor would be permuted; lm_head stays fp16 (head_bits 16).
    tensors.push_back(f16("lm_head.weight", {8, 128}));
  }
  st_tensor* find(const std::string& n) {
    for (auto& t : tensors)
      if (t.name == n) return &t;
    return nullptr;
  }
  void erase(const std::string& n) {
    std::erase_if(tensors, [&](const st_tensor& t) { return t.name == n; });
  }
  std::filesystem::path write(const std::string& tag) const {
    const auto dir = temp_dir(tag);
    write_text(dir / "config.json", config);
    write_text(dir / "tokenizer.json", tokenizer);
    write_text(dir / "tokenizer_config.json", tokenizer_config);
    const auto b = st_bytes(tensors);
    write_file(dir / "model.safetensors", b.data(), b.size());
    return dir;
  }
};

std::string load_error(const model_dir& m) {
  const auto dir = m.write("bad");
  std::string err;
  try {
    exl3_model model(dir);
  } catch (const tandem::model_error& e) {
    err = e.what();
  }
  std::filesystem::remove_all(dir);
  return err;
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_metadata_and_descriptors) {
  model_dir m;
  const auto dir = m.write("good");
  exl3_model model(dir);
  const auto& meta = model.meta();
  BOOST_TEST(*meta.get_string("general.architecture") == "llama");
  BOOST_TEST(*meta.get_int("llama.block_count") == 1);
  BOOST_TEST(*meta.get_int("llama.embedding_length") == 128);
  BOOST_TEST(*meta.get_int("llama.attention.head_count_kv") == 1);
  BOOST_TEST(*meta.get_int("llama.attention.key_length") == 64);
  BOOST_TEST(*meta.get_number("llama.attention.layer_norm_rms_epsilon") == 1e-5);
  BOOST_TEST(*meta.get_string("tokenizer.ggml.model") == "gpt2");
  BOOST_TEST(*meta.get_string("tokenizer.ggml.pre") == "smollm");
  BOOST_TEST(meta.get_strings("tokenizer.ggml.tokens")->size() == 8u);
  BOOST_TEST((*meta.get_strings("tokenizer.ggml.merges"))[1] == "ab c");
  BOOST_TEST((*meta.get_ints("tokenizer.ggml.token_type"))[6] == 3);  // control
  BOOST_TEST(*meta.get_int("tokenizer.ggml.bos_token_id") == 6);
  BOOST_TEST(*meta.get_int("tokenizer.ggml.eos_token_id") == 7);
  BOOST_TEST(*meta.get_string("tokenizer.chat_template") == "{{ x }}");

  for (const char* n : {"token_embd.weight", "output_norm.weight", "output.weight", "blk.0.attn_norm.weight",
                        "blk.0.ffn_norm.weight"})
    BOOST_TEST((model.find(n) && model.find(n)->type == tandem::dtype::f16), n);
  struct want { const char* name; int64_t out, in, k, n; int bits, cb; bool perm; };
  const want ws[] = {{"blk.0.attn_q.weight", 128, 128, 128, 128, 4, 2, true},
                     {"blk.0.attn_k.weight", 64, 128, 128, 128, 2, 1, true},
                     {"blk.0.attn_v.weight", 64, 128, 128, 128, 8, 0, false},
                     {"blk.0.attn_output.weight", 128, 128, 128, 128, 1, 2, false},
                     {"blk.0.ffn_gate.weight", 192, 128, 128, 256, 3, 2, false},
                     {"blk.0.ffn_down.weight", 128, 192, 256, 128, 6, 2, false}};
  for (const want& w : ws) {
    const tandem::tensor_info* t = model.find(w.name);
    BOOST_TEST_REQUIRE(t != nullptr, w.name);
    BOOST_TEST((t->type == tandem::dtype::opaque));
    BOOST_TEST(tandem::opaque_tag(t->type, t->data, t->nbytes) == tandem::exl3::exl3_tensor::tag_value);
    BOOST_TEST(t->type_name() == "EXL3");
    BOOST_TEST((t->shape == std::vector<int64_t>{w.out, w.in}));
    const tandem::exl3::exl3_tensor* e = tandem::exl3::exl3_tensor::of(t->type, t->data, t->nbytes);
    BOOST_TEST_REQUIRE(e != nullptr);
    BOOST_TEST(e->k == w.k);
    BOOST_TEST(e->n == w.n);
    BOOST_TEST(e->bits == w.bits);
    BOOST_TEST(e->codebook == w.cb);
    BOOST_TEST((e->out_perm != nullptr) == w.perm);
  }
  // q: head_dim 64, GGUF row 2i+j of head h is HF row h*64 + j*32 + i.
  const auto* q = tandem::exl3::exl3_tensor::of(tandem::dtype::opaque, model.find("blk.0.attn_q.weight")->data,
                                                sizeof(tandem::exl3::exl3_tensor));
  BOOST_TEST(q->out_perm[0] == 0);
  BOOST_TEST(q->out_perm[1] == 32);
  BOOST_TEST(q->out_perm[2] == 1);
  BOOST_TEST(q->out_perm[65] == 96);
  BOOST_TEST(!tandem::row_bytes(tandem::dtype::opaque, 128).has_value());
  BOOST_TEST(model.find("model.layers.0.self_attn.q_proj.suh") == nullptr);  // companions fold in
  BOOST_TEST(model.tensors().size() == 12u);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(legacy_sign_vectors) {
  model_dir m;
  m.erase("model.layers.0.self_attn.v_proj.suh");
  std::vector<uint16_t> signs(8, 0);
  signs[0] = 0x0005;  // channels 0 and 2 negative
  m.tensors.push_back({"model.layers.0.self_attn.v_proj.su", "I16", {8}, as_bytes(signs)});
  const auto dir = m.write("legacy");
  exl3_model model(dir);
  const auto* t = model.find("blk.0.attn_v.weight");
  const auto* e = tandem::exl3::exl3_tensor::of(t->type, t->data, t->nbytes);
  BOOST_TEST(e->suh[0] == 0xbc00);
  BOOST_TEST(e->suh[1] == 0x3c00);
  BOOST_TEST(e->suh[2] == 0xbc00);
  std::filesystem::remove_all(dir);
}

// The seam: the core sees an opaque tensor and its tag; only the EXL3 header knows the rest.
BOOST_AUTO_TEST_CASE(opaque_descriptor_seam) {
  using tandem::dtype;
  const tandem::exl3::exl3_tensor e;
  BOOST_TEST(tandem::opaque_tag(dtype::opaque, &e, sizeof e) == tandem::fourcc("EXL3"));
  BOOST_TEST(tandem::type_name(dtype::opaque, &e, sizeof e) == "EXL3");
  BOOST_TEST(tandem::exl3::exl3_tensor::of(dtype::opaque, &e, sizeof e) == &e);
  BOOST_TEST(tandem::exl3::exl3_tensor::of(dtype::f16, &e, sizeof e) == nullptr);       // not opaque
  BOOST_TEST(tandem::exl3::exl3_tensor::of(dtype::opaque, &e, sizeof e - 1) == nullptr);  // wrong size
  BOOST_TEST(tandem::exl3::exl3_tensor::tagged(dtype::opaque, &e, 4));
  const uint32_t other = tandem::fourcc("ABCD");  // another format's tag (only the tag is read)
  BOOST_TEST(!tandem::exl3::exl3_tensor::tagged(dtype::opaque, &other, sizeof other));
  BOOST_TEST(tandem::type_name(dtype::opaque, &other, sizeof other) == "ABCD");
  const uint32_t unprintable = 1;
  BOOST_TEST(tandem::type_name(dtype::opaque, &unprintable, 4) == "opaque");
  BOOST_TEST(tandem::type_name(dtype::opaque, nullptr, 0) == "opaque");
  BOOST_TEST(tandem::opaque_tag(dtype::opaque, &e, 3) == 0u);  // too short for a tag
  BOOST_TEST(tandem::type_name(dtype::f16, nullptr, 0) == "f16");
  BOOST_TEST(!tandem::row_bytes(dtype::opaque, 128).has_value());
  BOOST_TEST(tandem::is_quantized(dtype::opaque));
}

// One broken directory per error class; the message names the tensor or key at fault.
BOOST_AUTO_TEST_CASE(golden_bad_directories) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  const struct {
    const char* what;
    std::function<void(model_dir&)> breakit;
    std::string expect;
  } cases[] = {
      {"missing svh", [&](model_dir& m) { m.erase(q + ".svh"); }, q + ".trellis: has no companion " + q + ".svh"},
      {"orphan companion", [&](model_dir& m) { m.erase(q + ".trellis"); }, "has no " + q + ".trellis"},
      {"suh length", [&](model_dir& m) { m.find(q + ".suh")->shape = {64}; m.find(q + ".suh")->bytes.resize(128); },
       q + ".suh: is F16 [64], expected F16 [128]"},
      {"trellis vs config",
       [&](model_dir& m) {
         auto* t = m.find("model.layers.0.mlp.gate_proj.trellis");
         t->shape = {8, 8, 48};
         t->bytes.resize(8 * 8 * 48 * 2);
         m.find("model.layers.0.mlp.gate_proj.svh")->shape = {128};
         m.find("model.layers.0.mlp.gate_proj.svh")->bytes.resize(256);
       },
       "gate_proj.trellis: covers 128 x 128 (in x out, padded) but config.json makes blk.0.ffn_gate.weight 128 x 192"},
      {"K out of range",
       [&](model_dir& m) { auto* t = m.find(q + ".trellis"); t->shape = {8, 8, 144}; t->bytes.resize(8 * 8 * 144 * 2); },
       "K = 9 bits per weight"},
      {"trellis not /16", [&](model_dir& m) { auto* t = m.find(q + ".trellis"); t->shape = {8, 8, 60}; t->bytes.resize(8 * 8 * 60 * 2); },
       "an EXL3 trellis is I16 [k/16, n/16, 16*K]"},
      {"dims not /128",
       [&](model_dir& m) { auto* t = m.find(q + ".trellis"); t->shape = {4, 8, 64}; t->bytes.resize(4 * 8 * 64 * 2); },
       "covers 64 x 128 weights; both must be positive multiples of 128"},
      {"marker dtype", [&](model_dir& m) { auto* t = m.find(q + ".mul1"); t->dtype = "F32"; }, q + ".mul1: is F32 []; a codebook marker is a 0-d I32"},
      {"two markers", [&](model_dir& m) { m.tensors.push_back({q + ".mcg", "I32", {}, {0, 0, 0, 0}}); }, "both codebook markers"},
      {"not exl3", [&](model_dir& m) { m.config.replace(m.config.find("\"exl3\""), 6, "\"gptq\""); }, "quant_method is not \"exl3\""},
      {"not llama", [&](model_dir& m) { m.config.replace(m.config.find("\"llama\""), 7, "\"qwen2\""); }, "model_type is \"qwen2\""},
      {"missing config key", [&](model_dir& m) { m.config.replace(m.config.find("\"hidden_size\""), 13, "\"hidden_sz\""); }, "hidden_size is missing"},
      {"tokenizer vocab", [&](model_dir& m) { m.config.replace(m.config.find("\"vocab_size\":8"), 14, "\"vocab_size\":7"); }, "config.json's vocab_size is 7"},
      {"tokenizer kind", [&](model_dir& m) { m.tokenizer.replace(m.tokenizer.find("\"BPE\""), 5, "\"WordPiece\""); }, "model.type is not \"BPE\""},
  };
  for (const auto& c : cases) {
    model_dir m;
    c.breakit(m);
    const std::string err = load_error(m);
    BOOST_TEST_INFO(c.what);
    BOOST_TEST(err.find(c.expect) != std::string::npos, c.what << ": got '" << err << "'");
  }
}

BOOST_AUTO_TEST_CASE(gguf_names) {
  using tandem::exl3_plugin::gguf_name;
  BOOST_TEST(gguf_name("model.layers.12.mlp.down_proj") == "blk.12.ffn_down.weight");
  BOOST_TEST(gguf_name("model.layers.3.self_attn.o_proj") == "blk.3.attn_output.weight");
  BOOST_TEST(gguf_name("model.layers.0.post_attention_layernorm.weight") == "blk.0.ffn_norm.weight");
  BOOST_TEST(gguf_name("lm_head") == "output.weight");
  BOOST_TEST(gguf_name("model.embed_tokens.weight") == "token_embd.weight");
  BOOST_TEST(gguf_name("model.rotary_emb.inv_freq") == "");
}
