// The plugin entry of backend.cuda: schema, probe (is there a GPU we have code for?), factory.
#include <cuda_runtime_api.h>

#include <iterator>
#include <string>

#include "cuda_backend.hpp"
#include "tandem/config.hpp"
#include "tandem/plugin_abi.hpp"

namespace tandem::cuda {
namespace {

const config_key keys[] = {
    {"device", config_type::integer, "0", "GPU ordinal", 0, 64},
    {"memory_mb", config_type::integer, "0",
     "memory budget for KV and workspace in MiB; 0 = memory_utilization of the free GPU memory", 0, 1 << 24},
    {"memory_utilization", config_type::number, "0.9",
     "share of the GPU memory free after the weights (less 1 GiB kept for step workspaces) that the KV "
     "pool may take when engine.kv_tokens is 0 (vLLM's --gpu-memory-utilization)",
     0.01, 1, nullptr, nullptr, "memory_mb=0"},
    {"graphs", config_type::boolean, "true", "record decode steps as CUDA graphs and replay them"},
    {"gemm", config_type::boolean, "true",
     "f16 tensor-core GEMM for steps of more tokens than the GEMV takes (32 on the q8 GEMV, 8 on the f32 one; weights dequantized once at load)",
     0, 0, nullptr, nullptr, "batch_invariant=false"},
    {"q8_activations", config_type::boolean, "true",
     "decode GEMV quantizes activations to 8 bits as backend.cpu's default linear (false: f32 dots, as linear=float); "
     "EXL3 MUL1 weights: int8 activations per 128-block, the tensor core doing the codebook's byte sums"},
    {"batch_invariant", config_type::boolean, "false",
     "every token's logits independent of the step's shape (batch size, verify rows, prompt chunking): "
     "linears always on the GEMV, attention always on the prefill kernel; makes speculative decoding "
     "token-identical to plain decoding, at a cost for long prompts and contexts; dense GQA models only"},
    {"mma_max_rows", config_type::integer, "16",
     "steps of 5 to this many token rows run their Q4_1/Q8_0 linears on the int8 tensor-core kernel (the q8 "
     "GEMV's arithmetic, one mma per weight block for 8 rows) instead of the f16 GEMM; 0 = never",
     0, 64, nullptr, nullptr, "batch_invariant=false,q8_activations=true"},
    {"linear_by_shape", config_type::boolean, "true",
     "choose each linear's kernel by the matrix's shape as well as the step's rows (measured crossovers: the "
     "tensor-core kernel from 2 rows for small matrices and vocabulary heads, the f16 GEMM from 5 rows for "
     "matrices reading 1536 or more inputs); false: by the rows alone",
     0, 0, nullptr, nullptr, "batch_invariant=false,q8_activations=true"},
};

// The module carries machine code for sm_90a (H100/H200) and sm_121a (GB10) only.
probe_result probe() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return {0, std::string("no usable CUDA driver: ") + cudaGetErrorString(e)};
  if (count == 0) return {0, "no CUDA device"};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return {0, "cannot read device 0"};
  const int cc = prop.major * 10 + prop.minor;
  if (cc != 90 && cc != 121)
    return {0, "no kernels for sm_" + std::to_string(cc) + " (built for sm_90a and sm_121a)"};
  return {10, std::string(prop.name)};
}

plugin_object* create(const plugin_context& ctx) {
  cuda_options opt;
  if (ctx.cfg != nullptr) {
    if (ctx.cfg->has("device")) opt.device = static_cast<int>(ctx.cfg->get_int("device"));
    if (ctx.cfg->has("memory_mb")) opt.memory_mb = ctx.cfg->get_int("memory_mb");
    if (ctx.cfg->has("memory_utilization")) opt.memory_utilization = ctx.cfg->get_number("memory_utilization");
    if (ctx.cfg->has("graphs")) opt.graphs = ctx.cfg->get_bool("graphs");
    if (ctx.cfg->has("gemm")) opt.gemm = ctx.cfg->get_bool("gemm");
    if (ctx.cfg->has("q8_activations")) opt.q8_activations = ctx.cfg->get_bool("q8_activations");
    if (ctx.cfg->has("batch_invariant")) opt.batch_invariant = ctx.cfg->get_bool("batch_invariant");
    if (ctx.cfg->has("mma_max_rows")) opt.mma_max_rows = ctx.cfg->get_int("mma_max_rows");
    if (ctx.cfg->has("linear_by_shape")) opt.linear_by_shape = ctx.cfg->get_bool("linear_by_shape");
  }
  auto* be = new cuda_backend(opt);
  be->log_to(ctx.log);
  if (ctx.log != nullptr) ctx.log->info(be->describe());
  return be;
}

const plugin_descriptor descriptor{plugin_api_version,
                                   "backend.cuda",
                                   plugin_interface::backend,
                                   "CUDA backend: Q4_1/Q8_0 GEMV, tensor-core prefill GEMM, paged "
                                   "attention, GPU sampling, CUDA graphs",
                                   keys,
                                   std::size(keys),
                                   &probe,
                                   &create};

}  // namespace
}  // namespace tandem::cuda

TANDEM_PLUGIN(tandem::cuda::descriptor)
