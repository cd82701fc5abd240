#pragma once
// Picks the EXL3 tile coder for `tandem quantize --device cuda|cpu|auto`: the GPU Viterbi
// (tandem_exl3_cuda/viterbi.hpp, bit-identical to the CPU coder) when this build has CUDA
// and a GPU is present, else the CPU coder (an empty encoder: quantize_linear's default).
//
//   std::string used;
//   o.encoder = tandem::quantize::make_tile_encoder("auto", &used);   // used: "cuda" or "cpu"
#include <string>
#include <string_view>

#include "tandem_exl3/quantize_linear.hpp"

namespace tandem::quantize {

using tile_encoder = decltype(exl3::quant_options::encoder);

// device: "cuda" (tandem::error without CUDA support or a GPU), "cpu", or "auto" (cuda when
// available). `used` (optional) receives the device picked. The encoder batches all tiles of
// a call into one launch on its own stream; all encoders share one GPU
// coder (device buffers kept for the process) serialized by a mutex.
tile_encoder make_tile_encoder(std::string_view device, std::string* used = nullptr);

// Whether this build has the GPU coder and a GPU is visible.
bool cuda_tile_coder_available();

}  // namespace tandem::quantize
