#include "dflash2_config.hpp"

#include <boost/json.hpp>
#include <cmath>
#include <set>
#include <string_view>

#include "hf_json.hpp"
#include "tandem/error.hpp"

namespace tandem {
namespace json = boost::json;

namespace {

// Reads the keys of one JSON object, each exactly once; finish() refuses the ones nobody
// asked for, so a typo or a key of a newer trainer is an error and not silently ignored.
class strict_object {
 public:
  strict_object(const json::object& o, std::string source, std::string prefix)
      : o_(o), source_(std::move(source)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view key, const std::string& why) const {
    throw model_error(source_, "key '" + prefix_ + std::string(key) + "' " + why);
  }

  const json::value& get(std::string_view key) {
    seen_.insert(std::string(key));
    const json::value* v = o_.if_contains(key);
    if (!v) fail(key, "is missing (every key of a dflash2 config.json is required)");
    return *v;
  }

  int64_t integer(std::string_view key, int64_t lo, int64_t hi) {
    const json::value& v = get(key);
    int64_t x = 0;
    if (v.is_int64()) x = v.get_int64();
    else if (v.is_uint64() && v.get_uint64() <= static_cast<uint64_t>(hi)) x = static_cast<int64_t>(v.get_uint64());
    else fail(key, "must be an integer, not " + json::serialize(v));
    if (x < lo || x > hi)
      fail(key, "is " + std::to_string(x) + ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
  }

  double positive_number(std::string_view key) {
    const json::value& v = get(key);
    if (!v.is_number()) fail(key, "must be a number, not " + json::serialize(v));
    const double x = v.to_number<double>();
    if (!std::isfinite(x) || x <= 0) fail(key, "must be a positive number, not " + json::serialize(v));
    return x;
  }

  std::string string(std::string_view key) {
    const json::value& v = get(key);
    if (!v.is_string()) fail(key, "must be a string, not " + json::serialize(v));
    return std::string(v.get_string());
  }

  const json::object& object(std::string_view key) {
    const json::value& v = get(key);
    if (!v.is_object()) fail(key, "must be an object, not " + json::serialize(v));
    return v.get_object();
  }

  std::vector<int> int_list(std::string_view key, int lo, int hi) {
    const json::value& v = get(key);
    if (!v.is_array() || v.get_array().empty()) fail(key, "must be a non-empty list of integers");
    std::vector<int> out;
    for (const json::value& e : v.get_array()) {
      if (!e.is_int64() || e.get_int64() < lo || e.get_int64() > hi)
        fail(key, "holds " + json::serialize(e) + ", not an integer in " + std::to_string(lo) + ".." +
                      std::to_string(hi));
      out.push_back(static_cast<int>(e.get_int64()));
    }
    return out;
  }

  void finish() const {
    for (const auto& kv : o_)
      if (!seen_.contains(std::string(kv.key())))
        throw model_error(source_, "key '" + prefix_ + std::string(kv.key()) +
                                       "' is not a dflash2 config key (ARCHITECTURE.md lists them)");
  }

 private:
  const json::object& o_;
  std::string source_, prefix_;
  std::set<std::string> seen_;
};

constexpr int64_t max_dim = int64_t(1) << 24;  // far above any drafter; keeps products in range

dflash2_config from_json(const json::value& root, const std::string& source) {
  if (!root.is_object()) throw model_error(source, "is not a JSON object");
  strict_object o(root.get_object(), source, "");
  dflash2_config c;
  if (const std::string a = o.string("architecture"); a != "dflash2")
    o.fail("architecture", "is '" + a + "'; this plugin reads 'dflash2'");

  strict_object t(o.object("target"), source, "target.");
  c.target.arch = t.string("arch");
  c.target.hidden_size = t.integer("hidden_size", 1, max_dim);
  c.target.vocab_size = t.integer("vocab_size", 1, max_dim);
  c.target.num_layers = static_cast<int>(t.integer("num_layers", 1, 4096));
  t.finish();

  c.hidden_size = o.integer("hidden_size", 1, max_dim);
  c.num_layers = static_cast<int>(o.integer("num_layers", 1, 256));
  c.num_heads = static_cast<int>(o.integer("num_heads", 1, 1024));
  c.num_kv_heads = static_cast<int>(o.integer("num_kv_heads", 1, 1024));
  c.head_dim = static_cast<int>(o.integer("head_dim", 2, 4096));
  c.intermediate_size = o.integer("intermediate_size", 1, max_dim);
  c.rms_norm_eps = static_cast<float>(o.positive_number("rms_norm_eps"));
  c.rope_theta = static_cast<float>(o.positive_number("rope_theta"));
  c.target_layers = o.int_list("target_layers", 0, c.target.num_layers - 1);
  c.block_size = static_cast<int>(o.integer("block_size", 2, 64));
  c.conv_group_size = static_cast<int>(o.integer("conv_group_size", 1, max_dim));
  c.selector_top_k = static_cast<int>(o.integer("selector_top_k", 1, c.target.vocab_size));
  c.selector_rank = static_cast<int>(o.integer("selector_rank", 1, 4096));
  c.context_window = o.integer("context_window", 1, max_dim);
  o.finish();

  // The drafter reads the target's embedding rows and feeds its head: one width.
  if (c.hidden_size != c.target.hidden_size)
    o.fail("hidden_size", "is " + std::to_string(c.hidden_size) + " but target.hidden_size is " +
                              std::to_string(c.target.hidden_size) + " (the drafter shares the target's embedding and head)");
  if (c.num_heads % c.num_kv_heads != 0)
    o.fail("num_heads", "(" + std::to_string(c.num_heads) + ") is not a multiple of num_kv_heads (" +
                            std::to_string(c.num_kv_heads) + ")");
  if (c.head_dim % 2 != 0) o.fail("head_dim", "must be even (rope rotates its two halves)");
  if (c.hidden_size % c.conv_group_size != 0)
    o.fail("conv_group_size", "(" + std::to_string(c.conv_group_size) + ") does not divide hidden_size (" +
                                  std::to_string(c.hidden_size) + ")");
  if (std::set<int>(c.target_layers.begin(), c.target_layers.end()).size() != c.target_layers.size())
    o.fail("target_layers", "lists a layer twice");
  return c;
}

}  // namespace

dflash2_config dflash2_config::parse(const std::string& text, const std::string& source) {
  json::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec) throw model_error(source, "is not valid JSON: " + ec.message());
  return from_json(v, source);
}

dflash2_config dflash2_config::read(const std::filesystem::path& file) {
  return from_json(hf::read_json(file), file.string());
}

}  // namespace tandem
