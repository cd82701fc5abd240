// tandem inspect: a model file's metadata and tensor table, read through its weights plugin.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <map>

#include "commands.hpp"
#include "model_option.hpp"
#include "parse_args.hpp"
#include "tandem/model_store.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/weight_format.hpp"

namespace po = boost::program_options;

namespace tandem::cli {
namespace {

// Long arrays (the vocabulary, merges) are summarised: length and the first few items.
template <class T>
std::string summarize(const std::vector<T>& v, std::string (*one)(const T&)) {
  std::string s = "[" + std::to_string(v.size()) + " items:";
  for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : " ") + one(v[i]);
  return s + (v.size() > 5 ? ", ...]" : "]");
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
  return out + "\"";
}

std::string show(const meta_value& v, bool full) {
  struct visitor {
    bool full;
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(uint64_t u) const { return std::to_string(u); }
    std::string operator()(double d) const { return std::to_string(d); }
    std::string operator()(const std::string& s) const {
      return quote(full || s.size() <= 120 ? s : s.substr(0, 117) + "...");
    }
    std::string operator()(const std::vector<int64_t>& v) const {
      return summarize<int64_t>(v, [](const int64_t& x) { return std::to_string(x); });
    }
    std::string operator()(const std::vector<double>& v) const {
      return summarize<double>(v, [](const double& x) { return std::to_string(x); });
    }
    std::string operator()(const std::vector<std::string>& v) const {
      return summarize<std::string>(v, [](const std::string& x) { return quote(x); });
    }
  };
  return std::visit(visitor{full}, v);
}

std::string shape_of(const std::vector<int64_t>& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? " x " : "") + std::to_string(s[i]);
  return r;
}

}  // namespace

int run_inspect(const args& a) {
  std::string model, plugin = "weights.gguf";
  bool full = false, no_tensors = false;
  po::options_description desc("tandem inspect MODEL [options]");
  desc.add_options()("help,h", "this help")
      ("model", po::value(&model)->required(), "a model file, or a manifest name (pulled if needed)")
      ("weights", po::value(&plugin)->default_value(plugin),
       "the weights plugin that reads it (a directory: weights.exl3 for an EXL3 model, else weights.safetensors)")
      ("full", po::bool_switch(&full), "print long strings (the chat template) in full")
      ("no-tensors", po::bool_switch(&no_tensors), "metadata only");
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  if (auto rc = parse_args("inspect", a, desc, vm, &pos)) return *rc;

  auto path = resolve_model(model, true, [](std::string_view s) { std::cerr << s << "\n"; });
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && vm["weights"].defaulted())
    plugin = is_exl3_directory(path) ? "weights.exl3" : "weights.safetensors";
  plugin_host host(plugin_host::default_search_path());
  config cfg;
  for (const config_key& k : host.find(plugin).keys())
    if (k.default_value) cfg.set(k.key, *parse_config_value(k.type, k.default_value));
  auto wf = host.create<weight_format>(plugin, cfg);
  wf->open(path);

  std::cout << "file: " << path.string() << "\nmetadata (" << wf->meta().values().size() << " keys):\n";
  for (const auto& [key, value] : wf->meta().values()) std::cout << "  " << key << " = " << show(value, full) << "\n";
  std::map<std::string, std::pair<int, size_t>> by_type;
  size_t total = 0;
  if (!no_tensors) std::cout << "tensors (" << wf->tensors().size() << "):\n";
  for (const tensor_info& t : wf->tensors()) {
    auto& [count, bytes] = by_type[t.type_name()];  // an opaque tensor shows its format tag (EXL3)
    ++count, bytes += t.nbytes, total += t.nbytes;
    if (!no_tensors)
      std::printf("  %-32s %-5s %-16s %10zu bytes\n", t.name.c_str(), t.type_name().c_str(),
                  shape_of(t.shape).c_str(), t.nbytes);
  }
  std::cout << "summary: " << wf->tensors().size() << " tensors, " << total << " bytes;";
  for (const auto& [type, cb] : by_type) std::cout << " " << type << ": " << cb.first;
  std::cout << "\n";
  return 0;
}

}  // namespace tandem::cli
