// The safetensors reader: valid files, one case per validation rule, sharded directories,
// and mutation fuzzing (every result is a parse or a model_error, never a crash).
#define BOOST_TEST_MODULE exl3_safetensors
#include <boost/test/unit_test.hpp>

#include <random>

#include "safetensors_file.hpp"
#include "st_writer.hpp"
#include "tandem/error.hpp"

using namespace tandem::safetensors;
using namespace exl3_test;

namespace {

std::vector<st_tensor> sample() {
  return {{"a", "F16", {2, 3}, as_bytes(std::vector<uint16_t>{1, 2, 3, 4, 5, 6})},
          {"b", "I32", {}, as_bytes(std::vector<int32_t>{7})},
          {"c", "F32", {0}, {}},
          {"d", "U8", {3}, {9, 8, 7}}};
}

// The error message of parsing `bytes`, or "" when it parses.
std::string parse_error(std::vector<std::byte> bytes) {
  try {
    safetensors_file f(std::move(bytes), "mem");
    return "";
  } catch (const tandem::model_error& e) {
    return e.what();
  }
}

std::vector<std::byte> with_header(const std::string& h, size_t data_bytes = 16) {
  std::vector<std::byte> out(8 + h.size() + data_bytes);
  for (int i = 0; i < 8; ++i) out[i] = std::byte((uint64_t(h.size()) >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, h.data(), h.size());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(valid_file) {
  safetensors_file f(st_bytes(sample(), R"({"format":"pt"})"), "mem");
  BOOST_TEST(f.tensors().size() == 4u);
  const tensor_entry* a = f.find("a");
  BOOST_TEST_REQUIRE(a != nullptr);
  BOOST_TEST((a->type == st_dtype::f16));
  BOOST_TEST(a->numel() == 6);
  BOOST_TEST(reinterpret_cast<const uint16_t*>(a->data)[5] == 6);
  BOOST_TEST(f.find("b")->shape.empty());
  BOOST_TEST(*reinterpret_cast<const int32_t*>(f.find("b")->data) == 7);
  BOOST_TEST(f.find("c")->nbytes == 0u);
  BOOST_TEST(f.metadata().at("format") == "pt");
  BOOST_TEST(f.find("zz") == nullptr);
}

BOOST_AUTO_TEST_CASE(misaligned_tensors_are_copied_aligned) {
  // U8 [3] first puts the F16 tensor at an odd offset.
  std::vector<st_tensor> ts = {{"d", "U8", {3}, {9, 8, 7}},
                               {"a", "F16", {2}, as_bytes(std::vector<uint16_t>{0x1234, 0x5678})}};
  safetensors_file f(st_bytes(ts), "mem");
  const tensor_entry* a = f.find("a");
  BOOST_TEST(reinterpret_cast<uintptr_t>(a->data) % 2 == 0u);
  BOOST_TEST(reinterpret_cast<const uint16_t*>(a->data)[1] == 0x5678);
}

BOOST_AUTO_TEST_CASE(each_rule_has_a_clean_error) {
  const auto entry = [](const std::string& body) { return "{\"t\":" + body + "}"; };
  const struct { std::string header; std::string expect; } cases[] = {
      {"[1,2]", "not a JSON object"},
      {"{\"t\":", "not valid JSON"},
      {entry(R"({"dtype":"F17","shape":[1],"data_offsets":[0,2]})"), "unknown dtype 'F17'"},
      {entry(R"({"dtype":"F16","shape":[-1],"data_offsets":[0,2]})"), "is not a dimension"},
      {entry(R"({"dtype":"F16","shape":[1.5],"data_offsets":[0,2]})"), "is not a dimension"},
      {entry(R"({"dtype":"F16","shape":"x","data_offsets":[0,2]})"), "shape is not an array"},
      {entry(R"({"dtype":"F16","shape":[1],"data_offsets":[0,99]})"), "are not inside"},
      {entry(R"({"dtype":"F16","shape":[1],"data_offsets":[4,2]})"), "are not inside"},
      {entry(R"({"dtype":"F16","shape":[1],"data_offsets":[0]})"), "not [begin, end]"},
      {entry(R"({"dtype":"F16","shape":[3],"data_offsets":[0,2]})"), "need 6"},
      {entry(R"({"dtype":"F16","shape":[1],"data_offsets":[0,2],"x":1})"), "unknown field 'x'"},
      {entry(R"({"dtype":"F16","shape":[1]})"), "needs dtype, shape and data_offsets"},
      {entry("3"), "entry is not an object"},
      {R"({"__metadata__":{"a":1}})", "is not a string"},
      {R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}})",
       "overlap"},
      {R"({"a":{"dtype":"F16","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", "too many elements"},
  };
  for (const auto& c : cases) {
    const std::string err = parse_error(with_header(c.header));
    BOOST_TEST_INFO(c.header);
    BOOST_TEST(err.find(c.expect) != std::string::npos, err);
  }
  BOOST_TEST(parse_error({}).find("too short") != std::string::npos);
  auto huge = with_header("{}");
  huge[5] = std::byte{1};  // header length 2^40
  BOOST_TEST(parse_error(huge).find("does not fit") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(mutations_never_crash) {
  const auto good = st_bytes(sample(), R"({"format":"pt"})");
  size_t errors = 0, parsed = 0;
  for (size_t len = 0; len < good.size(); ++len) {  // every truncation
    const std::string e = parse_error(std::vector<std::byte>(good.begin(), good.begin() + len));
    BOOST_TEST_REQUIRE(!e.empty());
    ++errors;
  }
  std::mt19937 rng(42);
  const size_t header_end = 8 + static_cast<size_t>(good[0]);
  for (int trial = 0; trial < 20000; ++trial) {
    auto m = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % header_end;  // the length and the JSON
      m[at] = rng() % 3 == 0 ? std::byte(rng()) : std::byte("{}[]\",:0123456789-e."[rng() % 20]);
    }
    try {
      safetensors_file f(std::move(m), "mem");
      for (const auto& t : f.tensors())  // whatever parsed is inside the buffer and consistent
        BOOST_TEST_REQUIRE(t.nbytes == static_cast<size_t>(t.numel()) * dtype_size(t.type));
      ++parsed;
    } catch (const tandem::model_error&) {
      ++errors;
    }
  }
  BOOST_TEST_MESSAGE("mutations: " << parsed << " parsed, " << errors << " rejected");
  BOOST_TEST(errors > 0u);
}

BOOST_AUTO_TEST_CASE(sharded_directory) {
  const auto dir = temp_dir("shards");
  const auto s1 = st_bytes({{"x", "F32", {1}, as_bytes(std::vector<float>{1.5f})}});
  const auto s2 = st_bytes({{"y", "F32", {1}, as_bytes(std::vector<float>{2.5f})},
                            {"stray", "F32", {1}, as_bytes(std::vector<float>{0})}});
  write_file(dir / "model-00001-of-00002.safetensors", s1.data(), s1.size());
  write_file(dir / "model-00002-of-00002.safetensors", s2.data(), s2.size());
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
  {
    model_files m(dir);
    BOOST_TEST(m.tensors().size() == 2u);
    BOOST_TEST(*reinterpret_cast<const float*>(m.find("y")->data) == 2.5f);
    BOOST_TEST(m.find("stray") == nullptr);  // the index decides
  }
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map":{"x":"model-00001-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})");
  BOOST_CHECK_EXCEPTION(model_files{dir}, tandem::model_error, [](const auto& e) {
    return std::string(e.what()).find("names tensor 'z'") != std::string::npos;
  });
  write_text(dir / "model.safetensors.index.json", R"({"weight_map":{"x":"missing.safetensors"}})");
  BOOST_CHECK_EXCEPTION(model_files{dir}, tandem::model_error, [](const auto& e) {
    return std::string(e.what()).find("cannot open") != std::string::npos;
  });
  write_text(dir / "model.safetensors.index.json", R"({"weight_map":{"x":"../etc/passwd"}})");
  BOOST_CHECK_THROW(model_files{dir}, tandem::model_error);
  std::filesystem::remove(dir / "model.safetensors.index.json");
  BOOST_CHECK_EXCEPTION(model_files{dir}, tandem::model_error, [](const auto& e) {
    return std::string(e.what()).find("neither") != std::string::npos;
  });
  std::filesystem::remove_all(dir);
}
