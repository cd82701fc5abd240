// tandem's EXL3 code against exllamav3 itself (PyPI exllamav3 1.6.5, its CUDA kernels run on an
// H200): the fixtures in tests/fixtures/exl3/exllamav3/ (exllamav3_fixtures.safetensors, made by
// tools/exl3/make_exllamav3_fixtures.py through scripts/gpu-exllamav3.sh). One case per codebook
// (3inst, mcg, mul1) and K = 1..8, a 128x128 layer each, tensors "K{K}.{cb}.{what}":
//
//  - decode: tandem's trellis decode (decode_rotated) of exllamav3's trellis (its Viterbi's
//    indices, packed by its pack_trellis) equals exllamav3's reconstruct() fp16 bit for bit, and
//    unpack_tile_states/pack_tile_states round-trip exllamav3's words;
//  - linear: tandem's linear_ref (rotated space, rounding::gpu: x·suh, input Hadamard, fp16 Ŵ
//    products in f32, output Hadamard, ·svh) against exllamav3's EXL3 GEMM kernel (fp16 output) on
//    8 rows and on 1 row. The orders of accumulation differ, and the GEMM passes its split-k partial
//    sums through fp16 (the output buffer), so the check is |diff| <= max|y| * 2^-8 per case (a
//    wrong tile, codebook or rotation is off by O(max|y|));
//  - viterbi: tandem's tile coder (tile_coder::encode) on the tiles exllamav3's quantize_tiles saw
//    (fp16, trellis position order) against its output. The count of identical tiles is printed;
//    a case passes when all are identical, or else when tandem's MSE is within 1% of exllamav3's
//    (the two can differ where fp16 path costs tie: pass 1's argmin over final edges breaks ties
//    by exllamav3's thread-slot rank, tandem's by lowest edge).
//
// Exits 77 (meson: skipped) when the fixture file is missing: the fixtures need a GPU to make.
// $TANDEM_EXL3_EXLLAMAV3_FIXTURES (a directory) overrides $TANDEM_FIXTURES/exl3/exllamav3.
#define BOOST_TEST_MODULE exl3_exllamav3_fixtures
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "safetensors_file.hpp"
#include "tandem_exl3/codebook.hpp"
#include "tandem_exl3/hadamard.hpp"
#include "tandem_exl3/linear.hpp"
#include "tandem_exl3/trellis.hpp"
#include "tandem_exl3/viterbi.hpp"

using namespace tandem::exl3;
namespace st = tandem::safetensors;

namespace {

std::filesystem::path fixture_file() {
  std::filesystem::path dir;
  if (const char* d = std::getenv("TANDEM_EXL3_EXLLAMAV3_FIXTURES")) dir = d;
  else if (const char* f = std::getenv("TANDEM_FIXTURES")) dir = std::filesystem::path(f) / "exl3" / "exllamav3";
  else dir = "tests/fixtures/exl3/exllamav3";
  return dir / "exllamav3_fixtures.safetensors";
}

std::unique_ptr<st::safetensors_file> g_file;

struct fixture_case {
  int K;
  codebook cb;
  std::string prefix;  // "K4.mul1."
};

std::vector<fixture_case> cases() {
  std::vector<fixture_case> out;
  for (codebook cb : {codebook::inst3, codebook::mcg, codebook::mul1})
    for (int K = 1; K <= 8; ++K) {
      std::string p = "K" + std::to_string(K) + "." + std::string(name(cb)) + ".";
      if (g_file->find(p + "trellis")) out.push_back({K, cb, p});
    }
  return out;
}

// The tensor, or null when absent; a present tensor of another dtype fails the test.
const st::tensor_entry* get(const std::string& name, st::st_dtype type) {
  const st::tensor_entry* t = g_file->find(name);
  if (t && t->type != type) {
    BOOST_ERROR(name << " has dtype " << st::dtype_name(t->type) << ", expected " << st::dtype_name(type));
    return nullptr;
  }
  return t;
}

const uint16_t* u16(const st::tensor_entry* t) { return reinterpret_cast<const uint16_t*>(t->data); }

// The layer of a case: k, n from w_hat (or suh/svh), the trellis shape checked against them.
struct layer {
  int64_t k = 0, n = 0;
  exl3_matrix m;
  bool ok = false;
};

layer layer_of(const fixture_case& c) {
  layer L;
  const auto* tr = get(c.prefix + "trellis", st::st_dtype::i16);
  const auto* suh = get(c.prefix + "suh", st::st_dtype::f16);
  const auto* svh = get(c.prefix + "svh", st::st_dtype::f16);
  if (!tr || !suh || !svh) {
    BOOST_ERROR(c.prefix << ": trellis, suh or svh missing");
    return L;
  }
  L.k = suh->numel();
  L.n = svh->numel();
  const std::vector<int64_t> want{L.k / 16, L.n / 16, tile_words(c.K)};
  if (tr->shape != want) {
    BOOST_ERROR(c.prefix << "trellis has the wrong shape for k=" << L.k << " n=" << L.n << " K=" << c.K);
    return L;
  }
  L.m = {c.K, c.cb, L.k, L.n, u16(tr), u16(suh), u16(svh), nullptr};
  L.ok = true;
  return L;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fixture_is_complete) {
  const auto cs = cases();
  BOOST_TEST_MESSAGE(fixture_file().string() << ": " << g_file->tensors().size() << " tensors, " << cs.size()
                                              << " cases");
  BOOST_TEST(!cs.empty());
  auto it = g_file->metadata().find("manifest");
  if (it != g_file->metadata().end()) {
    const std::string& m = it->second;
    const auto p = m.find("\"exllamav3\": \"");
    if (p != std::string::npos) BOOST_TEST_MESSAGE("made with " << m.substr(p + 14, m.find('"', p + 14) - p - 14));
  }
  int missing = 0;
  for (const auto& c : cs)
    for (const char* what : {"w_hat", "tiles_in", "x", "y1", "y8"})
      if (!g_file->find(c.prefix + what)) {
        BOOST_TEST_MESSAGE(c.prefix << what << " missing");
        ++missing;
      }
  BOOST_TEST(missing == 0);
}

BOOST_AUTO_TEST_CASE(trellis_decode_equals_reconstruct) {
  for (const auto& c : cases()) {
    const layer L = layer_of(c);
    const auto* wh = get(c.prefix + "w_hat", st::st_dtype::f16);
    if (!L.ok || !wh) continue;
    BOOST_TEST_REQUIRE((wh->shape == std::vector<int64_t>{L.k, L.n}));
    std::vector<uint16_t> mine(static_cast<size_t>(L.k * L.n));
    decode_rotated(L.m, mine.data());
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < L.k * L.n; ++i)
      if (mine[i] != u16(wh)[i]) {
        if (first < 0) first = i;
        ++bad;
      }
    if (bad)
      BOOST_ERROR(c.prefix << ": " << bad << " of " << L.k * L.n << " values differ from exllamav3's reconstruct; first ["
                           << first / L.n << "][" << first % L.n << "] tandem 0x" << std::hex << mine[first]
                           << " exllamav3 0x" << u16(wh)[first] << std::dec);
    // unpack -> pack gives back exllamav3's words (its Viterbi output is tail-biting).
    int64_t bad_tiles = 0;
    const int64_t tiles = L.k / 16 * (L.n / 16);
    for (int64_t t = 0; t < tiles; ++t) {
      const uint16_t* words = L.m.trellis + t * tile_words(c.K);
      uint16_t s[tile_positions], w[16 * max_bits];
      unpack_tile_states(words, c.K, s);
      pack_tile_states(s, c.K, w);
      if (!is_tail_biting(s, c.K) || !std::equal(w, w + tile_words(c.K), words)) ++bad_tiles;
    }
    BOOST_TEST(bad_tiles == 0, c.prefix << ": " << bad_tiles << " tiles do not round-trip unpack/pack");
  }
}

BOOST_AUTO_TEST_CASE(linear_matches_exllamav3_gemm) {
  int checked = 0;
  for (const auto& c : cases()) {
    const layer L = layer_of(c);
    const auto* x = get(c.prefix + "x", st::st_dtype::f16);
    if (!L.ok || !x) continue;
    for (const char* yname : {"y1", "y8"}) {
      const auto* y = get(c.prefix + yname, st::st_dtype::f16);
      if (!y) continue;
      const int64_t rows = y->shape.at(0);
      BOOST_TEST_REQUIRE((y->shape == std::vector<int64_t>{rows, L.n}));
      BOOST_TEST_REQUIRE((x->shape.at(1) == L.k && x->shape.at(0) >= rows));
      std::vector<float> xf(static_cast<size_t>(rows * L.k)), yt(static_cast<size_t>(rows * L.n));
      for (size_t i = 0; i < xf.size(); ++i) xf[i] = f16_to_f32(u16(x)[i]);
      linear_ref(L.m, xf.data(), rows, yt.data(), rounding::gpu);
      double maxd = 0, maxy = 0, se = 0, sy = 0;
      for (int64_t i = 0; i < rows * L.n; ++i) {
        const double ye = f16_to_f32(u16(y)[i]), d = std::fabs(double{yt[i]} - ye);
        maxd = std::max(maxd, std::isnan(d) ? INFINITY : d);
        maxy = std::max(maxy, std::fabs(ye));
        se += d * d;
        sy += ye * ye;
      }
      const double tol = maxy * std::ldexp(1.0, -8);
      BOOST_TEST_MESSAGE(c.prefix << yname << ": max|diff| " << maxd << " (" << maxd / maxy << " of max|y| " << maxy
                                  << "), rel rms " << std::sqrt(se / sy));
      BOOST_TEST(maxd <= tol, c.prefix << yname << ": max|diff| " << maxd << " > tolerance " << tol);
      ++checked;
    }
  }
  BOOST_TEST_MESSAGE(checked << " GEMM outputs compared");
}

BOOST_AUTO_TEST_CASE(viterbi_matches_exllamav3_quantize_tiles) {
  int total = 0, identical_total = 0, cases_identical = 0, cases_checked = 0;
  std::ostringstream table;
  for (const auto& c : cases()) {
    const layer L = layer_of(c);
    const auto* tin = get(c.prefix + "tiles_in", st::st_dtype::f16);
    if (!L.ok || !tin) continue;
    const int64_t T = tin->shape.at(0);
    BOOST_TEST_REQUIRE((tin->shape.at(1) == 256 && T <= L.k / 16 * (L.n / 16)));
    std::vector<float> in(static_cast<size_t>(T * 256)), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = f16_to_f32(u16(tin)[i]);
    std::vector<uint16_t> states(in.size());
    const tile_coder coder(c.cb, c.K);
    encode_tiles(coder, in.data(), static_cast<size_t>(T), states.data(), out.data(), 0);
    int identical = 0;
    double se_mine = 0, se_exl = 0;
    for (int64_t t = 0; t < T; ++t) {
      const uint16_t* words = L.m.trellis + t * tile_words(c.K);  // trellis order [tk][tn] = tile order
      uint16_t w[16 * max_bits], s_exl[tile_positions];
      pack_tile_states(states.data() + t * 256, c.K, w);
      if (std::equal(w, w + tile_words(c.K), words)) ++identical;
      unpack_tile_states(words, c.K, s_exl);
      for (int p = 0; p < 256; ++p) {
        const double v = in[t * 256 + p];
        const double de = decode(c.cb, s_exl[p]) - v, dm = double{out[t * 256 + p]} - v;
        se_exl += de * de;
        se_mine += dm * dm;
      }
    }
    const double mse_exl = se_exl / double(T * 256), mse_mine = se_mine / double(T * 256);
    table << "\n  " << c.prefix << " identical " << identical << "/" << T << ", mse tandem " << mse_mine
          << " exllamav3 " << mse_exl << " (ratio " << (mse_exl > 0 ? mse_mine / mse_exl : 1.0) << ")";
    total += static_cast<int>(T);
    identical_total += identical;
    ++cases_checked;
    if (identical == T) {
      ++cases_identical;
    } else {
      BOOST_TEST(mse_mine <= 1.01 * mse_exl, c.prefix << ": " << identical << "/" << T
                                                      << " tiles identical and tandem's MSE " << mse_mine
                                                      << " is not within 1% of exllamav3's " << mse_exl);
    }
  }
  BOOST_TEST_MESSAGE("Viterbi vs exllamav3 quantize_tiles: " << identical_total << "/" << total
                                                              << " tiles identical, " << cases_identical << "/"
                                                              << cases_checked << " cases all identical"
                                                              << table.str());
  std::printf("exl3_exllamav3_fixtures: Viterbi: %d/%d tiles identical to exllamav3, %d/%d cases all identical\n",
              identical_total, total, cases_identical, cases_checked);
}

int main(int argc, char* argv[]) {
  const std::filesystem::path f = fixture_file();
  if (!std::filesystem::exists(f)) {
    std::fprintf(stderr,
                 "%s not found: skipped (the exllamav3 fixtures are made on a GPU by scripts/gpu-exllamav3.sh,"
                 " then copied to tests/fixtures/exl3/exllamav3/)\n",
                 f.string().c_str());
    return 77;
  }
  try {
    g_file = std::make_unique<st::safetensors_file>(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot read %s: %s\n", f.string().c_str(), e.what());
    return 1;
  }
  return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
