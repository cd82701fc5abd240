#pragma once
// `tandem quantize --to exl3`: a llama GGUF, or a glm_moe_dsa Hugging Face directory, to an
// exllamav3 (EXL3) model directory.
//
//   tandem::quantize::exl3_request r;
//   r.bits = 4; r.out_dir = "out"; r.calibration = "calib.txt";
//   auto rep = tandem::quantize::quantize_exl3(*wf, "model.gguf", r);
//
// Calibration is sequential (GPTQ-style): each layer's Hessians are collected from
// activations that already went through the quantized layers before it, and within a layer
// o_proj / gate,up / down see the outputs of the already-quantized q,k,v / o / gate,up.
// Without a calibration file every linear uses the fallback (H = I, no LDLQ).
//
// A tied source (no output.weight, as SmolLM2) gets lm_head quantized from the embedding at
// head_bits (exllamav3 does the same), or with head_bits 16 no lm_head tensor at all: the
// loader then uses the fp16 embedding, as the source did.
//
// Output: model-0000i-of-0000N.safetensors (one shard per layer, the last one holding
// embeddings, the final norm and lm_head), model.safetensors.index.json, config.json with
// quantization_config, quantization_config.json with tensor_storage, tokenizer.json,
// tokenizer_config.json, generation_config.json. quantize_progress.json and
// quantize_state.bin make a rerun resume after the last finished layer.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "tandem/weight_format.hpp"
#include "tandem_exl3/quantize_linear.hpp"

namespace tandem::quantize {

struct exl3_request {
  int bits = 4;                        // 1..8
  int head_bits = 6;                   // 1..8, or 16 = keep lm_head fp16
  exl3::codebook cb = exl3::codebook::mul1;
  exl3::out_scales scales = exl3::out_scales::always;
  std::filesystem::path calibration;   // text file; empty = fallback (no Hessians)
  int rows = 16, cols = 512;           // calibration rows x tokens per row
  std::filesystem::path out_dir;
  int threads = 0;                     // 0 = hardware threads
  // Tile coder: cpu | cuda | auto (cuda when present). cpu by default until the CUDA coder
  // has been checked bit for bit against the CPU one on a GPU (tests/gpu/test_gpu_viterbi).
  std::string device = "cpu";
  bool progress = true;                // progress bar with ETA on stderr
};

struct exl3_report {
  std::map<std::string, double> proxy_error;  // HF module key -> tr(EᵀHE)/tr(WᵀHW)
  double bits_per_weight = 0;                 // over the layers' linears, incl. suh/svh
  int layers_skipped = 0;                     // finished in an earlier run
  int64_t calibration_tokens = 0;
  // What became of the LM head: "fp16 (the tied embedding, no lm_head tensor)",
  // "fp16 lm_head", "K-bit lm_head quantized from the tied embedding" or "K-bit lm_head".
  std::string head;
};

// Throws tandem::error / model_error with a message naming the problem (bad settings,
// unsupported architecture, missing tensors, unreadable calibration file, a non-empty
// output directory that holds another run).
// Dispatches on general.architecture: llama (a GGUF, below) or glm_moe_dsa.
exl3_report quantize_exl3(const weight_format& wf, const std::string& source, const exl3_request& r);

// quantize_glm.cpp: a glm_moe_dsa Hugging Face directory (weights.safetensors) in exllamav3's
// layout -- every attention / indexer-query / MLP / expert linear EXL3, routed experts one
// linear per expert (experts.E.{gate,up,down}_proj, fused source tensors split), kv_b_proj,
// the router, the indexer's weights_proj and the norms fp16, the correction bias f32, the
// embedding fp16 and the head per head_bits. No calibration yet (tandem::error if asked).
exl3_report quantize_glm_exl3(const weight_format& wf, const std::string& source, const exl3_request& r);

}  // namespace tandem::quantize
