#define BOOST_TEST_MODULE gguf_model
#include <boost/test/unit_test.hpp>

// The parser and the dequantization against the `gguf` Python package, on the default
// model: tests/fixtures/gguf/smollm2_reference.json (tools/fixtures/gguf_reference.py).
#include <openssl/evp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>

#include "gguf_file.hpp"
#include "gguf_types.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;
using tandem::gguf::gguf_file;
namespace json = boost::json;

namespace {

struct model_fixture {
  json::object ref;
  gguf_file file;

  model_fixture() : ref(load_json()), file(gguf_file::open(model_path())) {}

  static std::string model_path() {
    const char* m = std::getenv("TANDEM_TEST_MODEL");
    if (!m) throw std::runtime_error("TANDEM_TEST_MODEL is not set");
    return m;
  }
  static json::object load_json() {
    const char* dir = std::getenv("TANDEM_FIXTURES");
    if (!dir) throw std::runtime_error("TANDEM_FIXTURES is not set");
    std::ifstream in(std::string(dir) + "/gguf/smollm2_reference.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str()).as_object();
  }
};

// The fixture's hash encoding: strings as u64 LE length + bytes, integers as i64 LE,
// floats as f64 LE.
class sha256 {
 public:
  sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~sha256() { EVP_MD_CTX_free(ctx_); }
  void add(const void* p, size_t n) { EVP_DigestUpdate(ctx_, p, n); }
  void add(const std::string& s) {
    const uint64_t n = s.size();
    add(&n, 8);
    add(s.data(), s.size());
  }
  void add(int64_t v) { add(&v, 8); }
  void add(double v) { add(&v, 8); }
  std::string hex() {
    unsigned char md[32];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) (out += digits[md[i] >> 4]) += digits[md[i] & 15];
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

bool same(const json::value& ref, const std::string& v) { return ref.as_string() == v; }
bool same(const json::value& ref, int64_t v) { return ref.to_number<int64_t>() == v; }
bool same(const json::value& ref, double v) { return ref.to_number<double>() == v; }

template <class T>
void check_array(const std::string& key, const json::object& ref, const std::vector<T>& items) {
  if (auto* small = ref.if_contains("value")) {
    const auto& a = small->as_array();
    BOOST_TEST_REQUIRE(a.size() == items.size(), key);
    for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(same(a[i], items[i]), key << "[" << i << "]");
    return;
  }
  BOOST_TEST_REQUIRE(ref.at("length").to_number<uint64_t>() == items.size(), key);
  const auto& first = ref.at("first").as_array();
  const auto& last = ref.at("last").as_array();
  for (size_t i = 0; i < 5; ++i) {
    BOOST_TEST(same(first[i], items[i]), key << " first " << i);
    BOOST_TEST(same(last[i], items[items.size() - 5 + i]), key << " last " << i);
  }
  sha256 h;
  for (const auto& v : items) h.add(v);
  BOOST_TEST(h.hex() == std::string(ref.at("sha256").as_string()), key << " hash");
}

void check_scalar(const std::string& key, const json::value& ref, const meta_value& v) {
  if (auto* s = std::get_if<std::string>(&v)) BOOST_TEST(same(ref, *s), key);
  else if (auto* i = std::get_if<int64_t>(&v)) BOOST_TEST(same(ref, *i), key);
  else if (auto* u = std::get_if<uint64_t>(&v)) BOOST_TEST(ref.to_number<uint64_t>() == *u, key);
  else if (auto* d = std::get_if<double>(&v)) BOOST_TEST(same(ref, *d), key);
  else if (auto* b = std::get_if<bool>(&v)) BOOST_TEST(ref.as_bool() == *b, key);
  else BOOST_ERROR(key << ": scalar parsed as an array");
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(model, model_fixture)

BOOST_AUTO_TEST_CASE(header) {
  BOOST_TEST(file.version() == ref.at("version").to_number<uint32_t>());
  BOOST_TEST(file.alignment() == ref.at("alignment").to_number<uint64_t>());
  BOOST_TEST(file.data_offset() == ref.at("data_offset").to_number<uint64_t>());
  BOOST_TEST(file.file_size() == ref.at("file_size").to_number<uint64_t>());
}

BOOST_AUTO_TEST_CASE(metadata_matches) {
  const auto& entries = ref.at("metadata").as_array();
  BOOST_TEST_REQUIRE(file.kvs().size() == entries.size());
  BOOST_TEST(file.metadata().values().size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i].as_object();
    const auto& kv = file.kvs()[i];
    const std::string key(e.at("key").as_string());
    BOOST_TEST_REQUIRE(kv.key == key);
    BOOST_TEST(gguf::name(kv.type) == std::string_view(e.at("type").as_string()), key);
    const meta_value& v = *file.metadata().find(key);
    if (kv.type != gguf::value_type::array) {
      check_scalar(key, e.at("value"), v);
      continue;
    }
    BOOST_TEST(gguf::name(kv.elem_type) == std::string_view(e.at("elem_type").as_string()), key);
    if (auto* s = std::get_if<std::vector<std::string>>(&v)) check_array(key, e, *s);
    else if (auto* n = std::get_if<std::vector<int64_t>>(&v)) check_array(key, e, *n);
    else if (auto* d = std::get_if<std::vector<double>>(&v)) check_array(key, e, *d);
    else BOOST_ERROR(key << ": array parsed as a scalar");
  }
  // What the engine reads first, through the typed getters.
  BOOST_TEST(*file.metadata().get_string("general.architecture") == "llama");
  BOOST_TEST(*file.metadata().get_int("llama.block_count") == 30);
  BOOST_TEST(*file.metadata().get_number("llama.rope.freq_base") == 100000.0);
}

BOOST_AUTO_TEST_CASE(tensor_table_matches) {
  const auto& table = ref.at("tensors").as_array();
  BOOST_TEST_REQUIRE(file.tensors().size() == table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& r = table[i].as_object();
    const tensor_info& t = file.tensors()[i];
    BOOST_TEST_REQUIRE(t.name == std::string_view(r.at("name").as_string()));
    BOOST_TEST(gguf::ggml_type_name(*gguf::to_ggml_type(t.type)) == std::string_view(r.at("type").as_string()), t.name);
    std::vector<int64_t> shape;
    for (const auto& d : r.at("shape").as_array()) shape.push_back(d.to_number<int64_t>());
    BOOST_TEST(t.shape == shape, boost::test_tools::per_element());
    BOOST_TEST(file.offset_of(t) == r.at("offset").to_number<uint64_t>(), t.name);
    BOOST_TEST(file.find(t.name) == &t);
  }
  BOOST_TEST((file.find("token_embd.weight")->type == dtype::q8_0));
}

BOOST_AUTO_TEST_CASE(dequantized_rows_match) {
  int rows = 0;
  std::vector<float> y;
  for (const auto& rv : ref.at("rows").as_array()) {
    const auto& r = rv.as_object();
    const std::string name(r.at("tensor").as_string());
    const tensor_info* t = file.find(name);
    BOOST_TEST_REQUIRE(t != nullptr, name);
    const int64_t cols = t->shape.back();
    const int64_t row = r.at("row").to_number<int64_t>();
    const auto* src = static_cast<const std::byte*>(t->data) + row * *row_bytes(t->type, cols);
    y.assign(static_cast<size_t>(cols), 0.0f);
    dequantize_row(t->type, src, y.data(), cols);
    const auto& values = r.at("values").as_array();
    BOOST_TEST_REQUIRE(values.size() == y.size(), name);
    for (int64_t i = 0; i < cols; ++i) {
      const double want = values[i].to_number<double>();
      BOOST_TEST_REQUIRE(std::fabs(y[i] - want) <= 1e-6 * std::fabs(want) + 1e-30,
                         name << " row " << row << " col " << i << ": " << y[i] << " vs " << want);
    }
    ++rows;
  }
  BOOST_TEST(rows >= 14);
}

BOOST_AUTO_TEST_CASE(read_mode_sees_the_same_bytes) {
  auto read = gguf_file::open(model_path(), gguf::load_mode::read);
  BOOST_TEST_REQUIRE(read.tensors().size() == file.tensors().size());
  for (size_t i = 0; i < file.tensors().size(); i += 37) {
    const auto& a = file.tensors()[i];
    const auto& b = read.tensors()[i];
    BOOST_TEST_REQUIRE(a.nbytes == b.nbytes);
    BOOST_TEST(std::memcmp(a.data, b.data, a.nbytes) == 0, a.name);
    BOOST_TEST(reinterpret_cast<uintptr_t>(b.data) % 32 == 0u, b.name);
  }
}

BOOST_AUTO_TEST_SUITE_END()
