// The plugin entry of backend.cpu.
#include <iterator>

#include "cpu_backend.hpp"
#include "tandem/config.hpp"
#include "tandem/plugin_abi.hpp"

namespace tandem::cpu {
namespace {

const config_key keys[] = {
    {"threads", config_type::integer, "0", "worker threads; 0 = every core this process may use",
     0, 256},
    {"memory_mb", config_type::integer, "0",
     "memory budget for KV and workspace in MiB; 0 = half of MemAvailable", 0, 1 << 24},
    {"linear", config_type::string, "q8",
     "quantized linears: q8 = activations quantized to 8 bits, integer dots (fast); "
     "float = weights dequantized, f32 dots (exact reference)", 0, 0, "q8|float"},
    {"exl3", config_type::string, "reconstruct",
     "EXL3 linears: reconstruct = decoded once at load to f32 in the original basis (fast); "
     "exact = kept as trellises, each call runs the rotated-space reference with the GPU's "
     "fp16 roundings", 0, 0, "reconstruct|exact"},
};

plugin_object* create(const plugin_context& ctx) {
  cpu_options opt;
  if (ctx.cfg != nullptr) {
    if (ctx.cfg->has("threads")) opt.threads = static_cast<int>(ctx.cfg->get_int("threads"));
    if (ctx.cfg->has("memory_mb")) opt.memory_mb = ctx.cfg->get_int("memory_mb");
    if (ctx.cfg->has("linear")) opt.float_linear = ctx.cfg->get_string("linear") == "float";
    if (ctx.cfg->has("exl3")) opt.exl3_exact = ctx.cfg->get_string("exl3") == "exact";
  }
  auto* be = new cpu_backend(opt);
  if (ctx.log != nullptr) ctx.log->info(be->describe());
  return be;
}

const plugin_descriptor descriptor{plugin_api_version,
                                   "backend.cpu",
                                   plugin_interface::backend,
                                   "CPU backend: f32 activations, Q4/Q8 integer-dot linears",
                                   keys,
                                   std::size(keys),
                                   nullptr,
                                   &create};

}  // namespace
}  // namespace tandem::cpu

TANDEM_PLUGIN(tandem::cpu::descriptor)
