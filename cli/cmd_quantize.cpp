// `tandem quantize --to exl3 --bits K --out DIR MODEL`: a llama GGUF, or a glm_moe_dsa Hugging
// Face directory, to an EXL3 directory (see quantize/quantize_model.hpp). Progress goes to stderr, the summary to stdout.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "parse_args.hpp"
#include "quantize_model.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/weight_format.hpp"

namespace po = boost::program_options;

namespace tandem::cli {

int run_quantize(const args& a) {
  std::string to, model, codebook = "mul1", scales = "always", calib, out;
  quantize::exl3_request r;
  po::options_description desc("tandem quantize --to exl3 --bits K --out DIR MODEL [options]\n\n"
                               "Quantizes a llama GGUF, or a glm_moe_dsa Hugging Face directory, to an\n"
                               "exllamav3 (EXL3) directory on the CPU.\nOptions");
  desc.add_options()("help,h", "this help")
      ("to", po::value(&to)->required(), "target format: exl3")
      ("bits", po::value(&r.bits)->required(), "bits per weight of the layers' linears, 1..8")
      ("head-bits", po::value(&r.head_bits)->default_value(6), "lm_head bits, 1..8, or 16 to keep it fp16")
      ("codebook", po::value(&codebook)->default_value(codebook), "mul1 | mcg | 3inst")
      ("out-scales", po::value(&scales)->default_value(scales), "always | never | auto")
      ("calibration", po::value(&calib), "text file for calibration (none: no Hessians, no LDLQ)")
      ("rows", po::value(&r.rows)->default_value(r.rows), "calibration rows")
      ("cols", po::value(&r.cols)->default_value(r.cols), "calibration tokens per row")
      ("threads", po::value(&r.threads)->default_value(0), "worker threads (0 = all cores)")
      ("device", po::value(&r.device)->default_value(r.device), "tile coder: cpu | cuda | auto (cuda when a GPU is present)")
      ("no-progress", "no progress bar")
      ("out", po::value(&out)->required(), "output directory (new or empty, or a run to resume)")
      ("model", po::value(&model)->required(), "a GGUF file, a Hugging Face model directory (glm_moe_dsa), or a manifest name (pulled if needed)");
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  const auto check = [&] {
    if (to != "exl3") throw po::error("--to: unknown target format '" + to + "' (supported: exl3)");
    if (r.bits < 1 || r.bits > 8) throw po::error("--bits must be 1..8, got " + std::to_string(r.bits));
    if (r.head_bits != 16 && (r.head_bits < 1 || r.head_bits > 8))
      throw po::error("--head-bits must be 1..8 or 16, got " + std::to_string(r.head_bits));
    auto cb = exl3::parse_codebook(codebook);
    if (!cb) throw po::error("--codebook: unknown codebook '" + codebook + "' (mul1, mcg, 3inst)");
    r.cb = *cb;
    if (scales == "always") r.scales = exl3::out_scales::always;
    else if (scales == "never") r.scales = exl3::out_scales::never;
    else if (scales == "auto") r.scales = exl3::out_scales::automatic;
    else throw po::error("--out-scales must be always, never or auto, got '" + scales + "'");
    if (r.rows < 1 || r.cols < 16) throw po::error("--rows must be >= 1 and --cols >= 16");
    if (r.threads < 0) throw po::error("--threads must be >= 0");
  };
  if (auto rc = parse_args("quantize", a, desc, vm, &pos, check)) return *rc;
  r.out_dir = out;
  r.progress = vm.count("no-progress") == 0;
  if (!calib.empty()) {
    if (!std::filesystem::is_regular_file(calib)) {
      std::cerr << "tandem quantize: error: calibration file '" << calib << "' not found\n";
      return 1;
    }
    r.calibration = calib;
  }
  try {
    const auto path = resolve_model(model, true, [](std::string_view s) { std::cerr << s << "\n"; });
    plugin_host host(plugin_host::default_search_path());
    config cfg;
    // A directory is a Hugging Face model (read as its safetensors); a file is a GGUF.
    const char* reader = std::filesystem::is_directory(path) ? "weights.safetensors" : "weights.gguf";
    for (const config_key& k : host.find(reader).keys())
      if (k.default_value) cfg.set(k.key, *parse_config_value(k.type, k.default_value));
    auto wf = host.create<weight_format>(reader, cfg);
    wf->open(path);
    const auto rep = quantize::quantize_exl3(*wf, path.string(), r);
    if (rep.layers_skipped) std::cout << "resumed after " << rep.layers_skipped << " finished layers\n";
    std::cout << "calibration tokens: " << rep.calibration_tokens << "\n";
    std::cout << "LM head: " << rep.head << "\n";
    for (const auto& [key, e] : rep.proxy_error) std::printf("proxy error %-40s %.6f\n", key.c_str(), e);
    std::printf("bits per weight (layers, incl. suh/svh): %.4f\nwrote %s\n", rep.bits_per_weight, out.c_str());
    return 0;
  } catch (const tandem::error& e) {
    std::cerr << "tandem quantize: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace tandem::cli
