// The quantizer's I/O pieces: the safetensors writer (read back by a tiny parser) and the
// GGUF q/k row (un)permutation.
#define BOOST_TEST_MODULE exl3_quantize_io
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "gguf_source.hpp"
#include "safetensors_writer.hpp"
#include "tandem/error.hpp"

using namespace tandem::quantize;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(safetensors_round_trip) {
  const fs::path p = fs::temp_directory_path() / "tandem_st_test.safetensors";
  safetensors_file f;
  f.add("b.f16", "F16", {3}, {1, 0, 2, 0, 3, 0});
  f.add("a.i32", "I32", {}, {0x2d, 0xd1, 0xdc, 0x83});
  f.add("c.i16", "I16", {1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  BOOST_CHECK_THROW(f.add("b.f16", "F16", {1}, {0, 0}), tandem::error);   // duplicate
  BOOST_CHECK_THROW(f.add("x", "F16", {2}, {0, 0}), tandem::error);       // size mismatch
  BOOST_CHECK_THROW(f.add("y", "Q4", {1}, {0}), tandem::error);           // unknown dtype
  f.write(p);
  std::ifstream in(p, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(all[i]);
  BOOST_TEST((8 + n) % 8 == 0u);  // data starts 8-byte aligned
  const auto hdr = boost::json::parse(all.substr(8, n)).as_object();
  BOOST_TEST(hdr.at("__metadata__").at("format").as_string() == "pt");
  const std::string data = all.substr(8 + n);
  BOOST_TEST(data.size() == 4u + 6 + 8);
  // Offsets are contiguous, cover the data, and hold the bytes given.
  auto bytes = [&](const char* name) {
    const auto& o = hdr.at(name).at("data_offsets").as_array();
    return data.substr(o[0].to_number<size_t>(), o[1].to_number<size_t>() - o[0].to_number<size_t>());
  };
  BOOST_TEST(bytes("a.i32") == std::string("\x2d\xd1\xdc\x83"));
  BOOST_TEST(bytes("b.f16") == std::string("\x01\x00\x02\x00\x03\x00", 6));
  BOOST_TEST(bytes("c.i16") == std::string("\x01\x02\x03\x04\x05\x06\x07\x08"));
  BOOST_TEST(hdr.at("a.i32").at("shape").as_array().empty());
  BOOST_TEST(hdr.at("a.i32").at("data_offsets").as_array()[0].to_number<int>() == 0);  // 4-byte first
  BOOST_TEST(hdr.at("c.i16").at("dtype").as_string() == "I16");
  fs::remove(p);
  BOOST_CHECK_THROW(f.write("/nonexistent_dir/x.safetensors"), tandem::error);
}

// llama.cpp's permute on 2 heads of dim 4, 1 column: HF rows [h0: 0 1 2 3 | h1: 4 5 6 7]
// become GGUF rows [0 2 1 3 | 4 6 5 7] (pairs (i, i + d/2) made adjacent).
BOOST_AUTO_TEST_CASE(qk_permutation) {
  const std::vector<float> hf{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> gg = permute_rows(hf, 2, 4, 1);
  BOOST_TEST(gg == (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}), boost::test_tools::per_element());
  BOOST_TEST(unpermute_rows(gg, 2, 4, 1) == hf, boost::test_tools::per_element());
  std::vector<float> big(3 * 8 * 5);
  std::iota(big.begin(), big.end(), 0.0f);
  BOOST_TEST(unpermute_rows(permute_rows(big, 3, 8, 5), 3, 8, 5) == big, boost::test_tools::per_element());
  BOOST_CHECK_THROW(unpermute_rows(big, 4, 8, 5), tandem::error);
}
