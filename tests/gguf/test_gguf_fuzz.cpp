#define BOOST_TEST_MODULE gguf_fuzz
#include <boost/test/unit_test.hpp>

// Mutation fuzzing of the GGUF parser under a fixed seed: every mutated file must either
// parse (and then every tensor byte must be readable) or throw tandem::model_error.
// Anything else — another exception, a crash, a sanitizer report, a hang — fails.
// Build once with -Db_sanitize=address,undefined to check memory safety.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gguf_file.hpp"
#include "gguf_sample.hpp"
#include "tandem/error.hpp"

using namespace tandem;
using namespace tandem::test;
using tandem::gguf::gguf_file;

namespace {

struct fuzz_stats {
  int parsed = 0;
  int rejected = 0;
};

// Reads every tensor byte and dequantizes every tensor's first row, so an out-of-bounds
// data pointer shows up under AddressSanitizer.
uint64_t touch(const gguf_file& f) {
  uint64_t sum = 0;
  std::vector<float> row;
  for (const auto& t : f.tensors()) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    if (t.nbytes == 0 || cols > (1 << 20)) continue;
    row.resize(static_cast<size_t>(cols));
    dequantize_row(t.type, t.data, row.data(), cols);
  }
  return sum;
}

class mutator {
 public:
  mutator(const std::vector<std::byte>& seed, std::vector<size_t> length_fields, uint64_t rng_seed)
      : seed_(seed), fields_(std::move(length_fields)), rng_(rng_seed) {}

  // One to three random mutations of the seed file; `what` describes them.
  std::vector<std::byte> next(std::string& what) {
    auto b = seed_;
    what.clear();
    const int n = 1 + static_cast<int>(rng_() % 3);
    for (int i = 0; i < n && !b.empty(); ++i) mutate(b, what);
    return b;
  }

 private:
  size_t pos(size_t size) { return static_cast<size_t>(rng_() % size); }

  void mutate(std::vector<std::byte>& b, std::string& what) {
    switch (rng_() % 6) {
      case 0: {
        const size_t at = pos(b.size());
        b[at] ^= std::byte{static_cast<unsigned char>(1u << (rng_() % 8))};
        what += " flip@" + std::to_string(at);
        break;
      }
      case 1: {
        const size_t at = pos(b.size());
        const unsigned choice = rng_() % 3;
        b[at] = std::byte{static_cast<unsigned char>(choice == 0 ? 0 : choice == 1 ? 0xff : rng_())};
        what += " set@" + std::to_string(at);
        break;
      }
      case 2: {
        const size_t at = pos(b.size());
        b.resize(at);
        what += " cut@" + std::to_string(at);
        break;
      }
      case 3:
      case 4: huge_length(b, what); break;
      default: {
        // A random 8-byte word anywhere: hits counts, dims, offsets and type ids.
        const size_t at = pos(b.size());
        const uint64_t v = rng_() >> (rng_() % 64);
        for (size_t i = 0; i < 8 && at + i < b.size(); ++i) b[at + i] = std::byte(v >> (8 * i));
        what += " word@" + std::to_string(at);
      }
    }
  }

  void huge_length(std::vector<std::byte>& b, std::string& what) {
    const size_t at = fields_[pos(fields_.size())];
    if (at + 8 > b.size()) return;
    const uint64_t choices[] = {~uint64_t{0}, uint64_t{1} << 63, uint64_t{1} << 32, b.size(),
                                b.size() - at, static_cast<uint64_t>(rng_())};
    const uint64_t v = choices[rng_() % std::size(choices)];
    std::memcpy(b.data() + at, &v, 8);
    what += " len@" + std::to_string(at) + "=" + std::to_string(v);
  }

  const std::vector<std::byte>& seed_;
  std::vector<size_t> fields_;
  std::mt19937_64 rng_;
};

fuzz_stats run_fuzz(const std::vector<std::byte>& seed, std::vector<size_t> fields, int iterations,
                    uint64_t rng_seed) {
  mutator m(seed, std::move(fields), rng_seed);
  fuzz_stats stats;
  std::string what;
  for (int i = 0; i < iterations; ++i) {
    const auto bytes = m.next(what);
    try {
      auto f = gguf_file::parse(bytes, "fuzz.gguf");
      touch(f);
      ++stats.parsed;
    } catch (const model_error& e) {
      BOOST_TEST_REQUIRE(e.file() == "fuzz.gguf");
      ++stats.rejected;
    } catch (const std::exception& e) {
      BOOST_ERROR("iteration " << i << " (" << what << "): " << typeid(e).name() << ": " << e.what());
    }
  }
  return stats;
}

// Offsets of the u64 length fields in a real file's header (counts, key lengths, string
// values, array lengths, array string items), computed from the parsed metadata.
std::vector<size_t> real_length_fields(const gguf_file& f, size_t limit) {
  std::vector<size_t> out{8, 16};
  size_t pos = 24;
  for (const auto& kv : f.kvs()) {
    if (pos >= limit) break;
    out.push_back(pos);
    pos += 8 + kv.key.size() + 4;
    const meta_value& v = *f.metadata().find(kv.key);
    if (kv.type == gguf::value_type::string) {
      out.push_back(pos);
      pos += 8 + std::get<std::string>(v).size();
    } else if (kv.type == gguf::value_type::array) {
      out.push_back(pos += 4);
      pos += 8;
      if (auto* strings = std::get_if<std::vector<std::string>>(&v)) {
        for (size_t i = 0; i < strings->size() && pos < limit; ++i) {
          out.push_back(pos);
          pos += 8 + (*strings)[i].size();
        }
      } else {
        const uint64_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        pos += kv.count * size[static_cast<uint32_t>(kv.elem_type)];
      }
    } else {
      const uint64_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
      pos += size[static_cast<uint32_t>(kv.type)];
    }
  }
  std::erase_if(out, [limit](size_t o) { return o + 8 > limit; });
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(synthetic_file) {
  const auto start = std::chrono::steady_clock::now();
  gguf_writer w;
  const auto seed = sample_file(w);
  const auto stats = run_fuzz(seed, w.length_fields(), 20000, 0x7a6e6465u);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST_MESSAGE("synthetic: " << stats.parsed << " parsed, " << stats.rejected
                                   << " rejected in " << secs << " s");
  BOOST_TEST(stats.parsed + stats.rejected == 20000);
  BOOST_TEST(stats.parsed > 0);   // some mutations (e.g. in tensor data) leave it valid
  BOOST_TEST(stats.rejected > 10000);
  BOOST_TEST(secs < 30.0);
}

// Suite 'model': the first 64 KB of the real model (header, general.*, llama.*, and the
// start of the tokenizer arrays), mutated.
BOOST_AUTO_TEST_CASE(real_header) {
  const char* model = std::getenv("TANDEM_TEST_MODEL");
  BOOST_TEST_REQUIRE(model != nullptr);
  BOOST_TEST_REQUIRE(std::filesystem::exists(model), "model file missing: " << model);
  const auto start = std::chrono::steady_clock::now();
  const auto real = gguf_file::open(model);
  const size_t limit = 64 * 1024;
  std::ifstream in(model, std::ios::binary);
  std::vector<std::byte> head(limit);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(limit));
  auto fields = real_length_fields(real, limit);
  BOOST_TEST_REQUIRE(fields.size() > 100u);
  const auto stats = run_fuzz(head, std::move(fields), 10000, 0x5eed0001u);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST_MESSAGE("real header: " << stats.parsed << " parsed, " << stats.rejected
                                     << " rejected in " << secs << " s");
  BOOST_TEST(stats.parsed + stats.rejected == 10000);
  BOOST_TEST(secs < 30.0);
}
