#define BOOST_TEST_MODULE gguf_parse
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "gguf_file.hpp"
#include "gguf_sample.hpp"
#include "tandem/error.hpp"

using namespace tandem;
using namespace tandem::test;
using tandem::gguf::gguf_file;
using vt = gguf_writer::vt;

namespace {

std::vector<float> dequant(const tensor_info& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> y(n);
  dequantize_row(t.type, t.data, y.data(), n);
  return y;
}

template <class Block>
std::vector<float> expected_quant(const std::vector<float>& x,
                                  void (*quantize)(const float*, void*, int64_t), dtype t) {
  auto bytes = quantized<Block>(x, quantize);
  std::vector<float> y(x.size());
  dequantize_row(t, bytes.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

void expect_error(const std::vector<std::byte>& bytes, const std::string& needle) {
  try {
    gguf_file::parse(bytes, "bad.gguf");
    BOOST_ERROR("parsed a file that should fail with: " << needle);
  } catch (const model_error& e) {
    BOOST_TEST(e.file() == "bad.gguf");
    BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos,
               "message '" << e.what() << "' lacks '" << needle << "'");
  }
}

template <class T>
void poke(std::vector<std::byte>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

struct temp_file {
  std::filesystem::path path;
  explicit temp_file(const std::vector<std::byte>& bytes)
      : path(std::filesystem::temp_directory_path() /
             ("tandem_gguf_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".gguf")) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ~temp_file() { std::filesystem::remove(path); }
  static inline int counter = 0;
};

}  // namespace

BOOST_AUTO_TEST_CASE(metadata_round_trip) {
  gguf_writer w;
  auto bytes = sample_file(w);
  auto f = gguf_file::parse(bytes, "sample");
  const auto& m = f.metadata();
  BOOST_TEST(f.version() == 3u);
  BOOST_TEST(f.alignment() == 32u);
  BOOST_TEST(*m.get_string("general.architecture") == "llama");
  BOOST_TEST(std::get<int64_t>(*m.find("t.u8")) == 200);
  BOOST_TEST(std::get<int64_t>(*m.find("t.i8")) == -100);
  BOOST_TEST(std::get<int64_t>(*m.find("t.u16")) == 60000);
  BOOST_TEST(std::get<int64_t>(*m.find("t.i16")) == -30000);
  BOOST_TEST(std::get<int64_t>(*m.find("t.u32")) == 4000000000ll);
  BOOST_TEST(std::get<int64_t>(*m.find("t.i32")) == -2000000000ll);
  BOOST_TEST(std::get<double>(*m.find("t.f32")) == 0.25);
  BOOST_TEST(*m.get_bool("t.bool"));
  BOOST_TEST(std::get<uint64_t>(*m.find("t.u64")) == 18000000000000000000ull);
  BOOST_TEST(std::get<int64_t>(*m.find("t.i64")) == -9000000000000000000ll);
  BOOST_TEST(std::get<double>(*m.find("t.f64")) == 1e300);
  const std::vector<std::string> strings{"a", "bc", "", "\xff\xfe not utf-8"};
  BOOST_TEST(*m.get_strings("t.strings") == strings, boost::test_tools::per_element());
  BOOST_TEST(*m.get_ints("t.i32s") == (std::vector<int64_t>{1, -2, 3}), boost::test_tools::per_element());
  BOOST_TEST(*m.get_numbers("t.f32s") == (std::vector<double>{0.5, -1.25}), boost::test_tools::per_element());
  BOOST_TEST(*m.get_ints("t.bools") == (std::vector<int64_t>{1, 0, 1}), boost::test_tools::per_element());
  BOOST_TEST(*m.get_ints("t.u64s") == (std::vector<int64_t>{7, 1ll << 40}), boost::test_tools::per_element());
  BOOST_TEST(m.get_ints("t.empty")->empty());
  BOOST_TEST(m.values().size() == 18u);
  BOOST_TEST_REQUIRE(f.kvs().size() == 18u);
  BOOST_TEST(f.kvs()[0].key == "general.architecture");
  BOOST_TEST(f.kvs()[12].key == "t.strings");
  BOOST_TEST((f.kvs()[12].type == gguf::value_type::array));
  BOOST_TEST((f.kvs()[12].elem_type == gguf::value_type::string));
  BOOST_TEST(f.kvs()[12].count == 4u);
}

BOOST_AUTO_TEST_CASE(tensor_round_trip) {
  gguf_writer w;
  auto bytes = sample_file(w);
  auto f = gguf_file::parse(bytes, "sample");
  BOOST_TEST_REQUIRE(f.tensors().size() == 7u);
  BOOST_TEST(f.tensors()[0].name == "f32");
  BOOST_TEST(f.tensors()[6].name == "blk.0.four_d");
  BOOST_TEST(f.find("nope") == nullptr);

  const tensor_info& a = *f.find("f32");
  BOOST_TEST(a.shape == (std::vector<int64_t>{3, 4}), boost::test_tools::per_element());
  BOOST_TEST(a.nbytes == 48u);
  BOOST_TEST(f.offset_of(a) == 0u);
  BOOST_TEST(dequant(a) == ramp(12, 0.5f), boost::test_tools::per_element());

  const tensor_info& h = *f.find("f16");
  BOOST_TEST((h.type == dtype::f16));
  BOOST_TEST(f.offset_of(h) == 64u);  // 48 bytes rounded up to the 32-byte alignment
  BOOST_TEST(dequant(h) == ramp(8, 0.25f), boost::test_tools::per_element());
  const tensor_info& b = *f.find("bf16");
  BOOST_TEST(b.shape == (std::vector<int64_t>{2, 2, 2}), boost::test_tools::per_element());
  BOOST_TEST(dequant(b) == ramp(8, 1.5f), boost::test_tools::per_element());

  const tensor_info& q40 = *f.find("q4_0");
  BOOST_TEST((q40.type == dtype::q4_0));
  BOOST_TEST(q40.nbytes == 36u);
  BOOST_TEST(dequant(q40) == expected_quant<block_q4_0>(ramp(64, 0.1f), quantize_row_q4_0, dtype::q4_0),
             boost::test_tools::per_element());
  const tensor_info& q41 = *f.find("q4_1");
  BOOST_TEST(q41.shape == (std::vector<int64_t>{2, 1, 64}), boost::test_tools::per_element());
  BOOST_TEST(dequant(q41) == expected_quant<block_q4_1>(ramp(128, 0.01f), quantize_row_q4_1, dtype::q4_1),
             boost::test_tools::per_element());
  const tensor_info& q8 = *f.find("q8_0");
  BOOST_TEST(q8.nbytes == 3u * 34u);
  BOOST_TEST(dequant(q8) == expected_quant<block_q8_0>(ramp(96, 0.02f), quantize_row_q8_0, dtype::q8_0),
             boost::test_tools::per_element());
  const tensor_info& d4 = *f.find("blk.0.four_d");
  BOOST_TEST(d4.shape == (std::vector<int64_t>{2, 1, 2, 1}), boost::test_tools::per_element());
  for (const auto& t : f.tensors()) {
    BOOST_TEST(f.offset_of(t) % 32 == 0u);
    BOOST_TEST(reinterpret_cast<const std::byte*>(t.data) ==
               bytes.data() + f.data_offset() + f.offset_of(t));
  }
}

BOOST_AUTO_TEST_CASE(custom_alignment_version_2_and_no_tensors) {
  gguf_writer w;
  w.version = 2;
  w.alignment = 64;
  w.kv("general.alignment", vt::u32, uint32_t{64});
  w.tensor("a", F32, {3}, as_bytes(std::vector<float>{1, 2, 3}));
  w.tensor("b", F32, {1}, as_bytes(std::vector<float>{4}));
  auto bytes = w.build();
  auto f = gguf_file::parse(bytes, "aligned");
  BOOST_TEST(f.version() == 2u);
  BOOST_TEST(f.alignment() == 64u);
  BOOST_TEST(f.data_offset() % 64 == 0u);
  BOOST_TEST(f.offset_of(*f.find("b")) == 64u);
  BOOST_TEST(*static_cast<const float*>(f.find("b")->data) == 4.0f);

  gguf_writer empty;
  empty.kv_string("general.name", "x");
  auto eb = empty.build();
  auto e = gguf_file::parse(eb, "empty");
  BOOST_TEST(e.tensors().empty());
  BOOST_TEST(*e.metadata().get_string("general.name") == "x");
}

BOOST_AUTO_TEST_CASE(empty_tensor_is_valid) {
  gguf_writer w;
  w.tensor("empty", Q8_0, {64, 0}, {});
  w.tensor("after", F32, {1}, as_bytes(std::vector<float>{5}));
  auto bytes = w.build();
  auto f = gguf_file::parse(bytes, "empty_tensor");
  BOOST_TEST(f.find("empty")->nbytes == 0u);
  BOOST_TEST(f.find("empty")->shape == (std::vector<int64_t>{0, 64}), boost::test_tools::per_element());
  BOOST_TEST(*static_cast<const float*>(f.find("after")->data) == 5.0f);
}

BOOST_AUTO_TEST_CASE(open_from_disk_both_modes) {
  gguf_writer w;
  temp_file tmp(sample_file(w));
  for (auto mode : {gguf::load_mode::mmap, gguf::load_mode::read}) {
    auto f = gguf_file::open(tmp.path, mode);
    BOOST_TEST(f.label() == tmp.path.string());
    BOOST_TEST(dequant(*f.find("f32")) == ramp(12, 0.5f), boost::test_tools::per_element());
    auto moved = std::move(f);  // tensor data stays where it was
    BOOST_TEST(dequant(*moved.find("f16")) == ramp(8, 0.25f), boost::test_tools::per_element());
  }
  BOOST_CHECK_THROW(gguf_file::open(tmp.path.string() + ".missing"), model_error);
  BOOST_CHECK_THROW(gguf_file::open(std::filesystem::temp_directory_path()), model_error);
  temp_file empty(std::vector<std::byte>{});
  BOOST_CHECK_THROW(gguf_file::open(empty.path), model_error);
}

BOOST_AUTO_TEST_CASE(header_errors) {
  expect_error({}, "file is empty");
  gguf_writer w;
  auto good = sample_file(w);
  auto b = good;
  b[0] = std::byte{'X'};
  expect_error(b, "not a GGUF file");
  for (uint32_t v : {0u, 1u, 4u, 0x7fffffffu}) {
    b = good;
    poke(b, 4, v);
    expect_error(b, "unsupported GGUF version " + std::to_string(v));
  }
  b = good;
  poke(b, 4, uint32_t{0x03000000});
  expect_error(b, "big-endian");
  expect_error(std::vector<std::byte>(good.begin(), good.begin() + 10), "truncated");
  b = good;
  poke(b, 16, uint64_t{1} << 40);
  expect_error(b, "metadata count");
  b = good;
  poke(b, 8, ~uint64_t{0});
  expect_error(b, "tensor count");
}

BOOST_AUTO_TEST_CASE(every_truncation_fails) {
  gguf_writer w;
  auto good = sample_file(w);
  for (size_t n = 0; n < good.size(); ++n) {
    BOOST_CHECK_THROW(gguf_file::parse(std::span(good.data(), n), "cut"), model_error);
  }
}

BOOST_AUTO_TEST_CASE(every_huge_length_fails) {
  gguf_writer w;
  auto good = sample_file(w);
  BOOST_TEST_REQUIRE(w.length_fields().size() > 20u);
  for (size_t at : w.length_fields()) {
    for (uint64_t v : {uint64_t{good.size()}, uint64_t{1} << 62, ~uint64_t{0}}) {
      auto b = good;
      poke(b, at, v);
      BOOST_CHECK_THROW(gguf_file::parse(b, "huge"), model_error);
    }
  }
}

BOOST_AUTO_TEST_CASE(metadata_errors) {
  auto one = [](auto add) {
    gguf_writer w;
    add(w);
    return w.build();
  };
  expect_error(one([](gguf_writer& w) { w.kv("k", static_cast<vt>(13), uint32_t{0}); }),
               "'k' has unknown value type id 13");
  expect_error(one([](gguf_writer& w) { w.kv_array("k", static_cast<vt>(99), std::vector<uint8_t>{1}); }),
               "unknown element type id 99");
  expect_error(one([](gguf_writer& w) { w.kv_array("k", vt::array, std::vector<uint8_t>{}); }),
               "array of arrays");
  expect_error(one([](gguf_writer& w) { w.kv("k", vt::u8, uint8_t{1}); w.kv("k", vt::u8, uint8_t{2}); }),
               "metadata key 'k' appears twice");
  expect_error(one([](gguf_writer& w) { w.kv_array("k", vt::u64, std::vector<uint64_t>{~uint64_t{0}}); }),
               "beyond the int64 range");
  gguf_writer w;
  w.kv_array("k", vt::u32, std::vector<uint32_t>{1, 2});
  auto b = w.build();
  poke(b, w.length_fields().back(), uint64_t{1} << 40);
  expect_error(b, "metadata array 'k' claims 1099511627776 items of type u32");
  for (uint32_t a : {0u, 24u, 1u << 31}) {
    expect_error(one([a](gguf_writer& w) { w.kv("general.alignment", vt::u32, a); }), "power-of-two");
  }
  expect_error(one([](gguf_writer& w) { w.kv_string("general.alignment", "32"); }), "power-of-two");
}

BOOST_AUTO_TEST_CASE(tensor_errors) {
  auto one = [](uint32_t type, std::vector<uint64_t> ne, size_t bytes, int64_t offset = -1) {
    gguf_writer w;
    w.tensor("blk.0.w", type, std::move(ne), std::vector<std::byte>(bytes), offset);
    return w.build();
  };
  expect_error(one(F32, {1, 1, 1, 1, 1}, 4), "tensor 'blk.0.w' has 5 dimensions");
  expect_error(one(F32, {1ull << 40, 1ull << 40}, 4), "overflow");
  expect_error(one(F32, {1ull << 63}, 4), "overflow");
  expect_error(one(F32, {0, 1ull << 40, 1ull << 40}, 0), "overflow");  // empty, yet absurd
  expect_error(one(Q8_0, {0x7fffffffffffffe0ull}, 34), "overflow");  // element count fits, bytes do not
  expect_error(one(99, {32}, 4), "tensor 'blk.0.w' has unknown GGML type id 99");
  expect_error(one(12, {256}, 144), "tensor 'blk.0.w' has type Q4_K, which tandem does not support");
  expect_error(one(Q8_0, {33}, 34), "rows of 33 elements, not a multiple of the block size 32");
  expect_error(one(F32, {8}, 16), "runs past the end of the file");
  expect_error(one(F32, {2}, 8, 16), "not a multiple of the alignment 32");
  expect_error(one(F32, {2}, 8, 1ll << 62), "runs past the end");
  gguf_writer w;
  w.tensor("t", F32, {1}, std::vector<std::byte>(4));
  w.tensor("t", F32, {1}, std::vector<std::byte>(4));
  expect_error(w.build(), "tensor 't' appears twice");
}
