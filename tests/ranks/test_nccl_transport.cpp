// transport.nccl on a one-rank communicator (suite 'gpu'): the single H200 runs the same
// code path two GPUs would (the communicator, the stream binding, every collective, the
// bounded waits). Exits 77 (meson: skipped) without a CUDA device.
#define BOOST_TEST_MODULE nccl_transport
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <vector>

#include "nccl_transport.hpp"
#include "tandem/error.hpp"

using namespace tandem;

namespace {

// Device memory holding a copy of `host`.
template <class T>
struct device_copy {
  void* ptr = nullptr;
  size_t n;
  explicit device_copy(const std::vector<T>& host) : n(host.size()) {
    BOOST_REQUIRE(cudaMalloc(&ptr, n * sizeof(T)) == cudaSuccess);
    BOOST_REQUIRE(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~device_copy() { cudaFree(ptr); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    BOOST_REQUIRE(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  tensor_view view(dtype t) const {
    return tensor_view::contiguous(ptr, t, {static_cast<int64_t>(n)}, device{device_kind::cuda, 0});
  }
};

nccl_settings one_rank() {
  nccl_settings s;
  s.timeout = std::chrono::milliseconds(20000);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_one_rank_world_runs_every_collective) {
  nccl_transport t(one_rank());
  BOOST_TEST(t.world_size() == 1);
  BOOST_TEST(t.rank() == 0);
  std::vector<float> x(1000);
  std::iota(x.begin(), x.end(), -3.5f);
  device_copy<float> d(x);
  t.all_reduce_sum(d.view(dtype::f32));  // the sum over one rank is the tensor itself
  BOOST_TEST(d.host() == x, boost::test_tools::per_element());

  std::vector<float> out(1000, -1.0f);
  device_copy<float> g(out);
  t.all_gather(d.view(dtype::f32), g.view(dtype::f32));
  BOOST_TEST(g.host() == x, boost::test_tools::per_element());

  std::vector<uint8_t> bytes{1, 2, 3, 250};
  t.broadcast(bytes, 0);
  BOOST_TEST(bytes == (std::vector<uint8_t>{1, 2, 3, 250}), boost::test_tools::per_element());
  std::vector<uint8_t> big(1 << 20);
  std::iota(big.begin(), big.end(), uint8_t{7});
  const std::vector<uint8_t> want = big;
  t.broadcast(big, 0);  // past the first staging buffer
  BOOST_TEST(big == want);
  std::vector<uint8_t> none;
  t.broadcast(none, 0);
  BOOST_TEST(none.empty());
  t.barrier();
}

BOOST_AUTO_TEST_CASE(collectives_run_on_the_bound_stream) {
  nccl_transport t(one_rank());
  cudaStream_t s = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  t.bind_stream(s);
  BOOST_TEST(t.stream() == s);
  // Work queued on the bound stream before the collective is ordered before it: the
  // all-gather reads what the copy on that stream wrote.
  std::vector<int32_t> src(4096), zeros(4096, 0), out(4096, -1);
  std::iota(src.begin(), src.end(), 11);
  device_copy<int32_t> in(zeros), gathered(out);
  BOOST_REQUIRE(cudaMemcpyAsync(in.ptr, src.data(), src.size() * 4, cudaMemcpyHostToDevice, s) == cudaSuccess);
  t.all_gather(in.view(dtype::i32), gathered.view(dtype::i32));
  BOOST_TEST(gathered.host() == src, boost::test_tools::per_element());
  t.bind_stream(nullptr);
  BOOST_TEST(t.stream() != s);
  cudaStreamDestroy(s);
}

BOOST_AUTO_TEST_CASE(what_it_cannot_take_is_a_plugin_error) {
  nccl_transport t(one_rank());
  std::vector<float> host(8, 1.0f);
  const tensor_view on_host = tensor_view::contiguous(host.data(), dtype::f32, {8}, device{});
  BOOST_CHECK_THROW(t.all_reduce_sum(on_host), plugin_error);
  device_copy<float> d(host);
  BOOST_CHECK_THROW(t.send(d.view(dtype::f32), 0), plugin_error);  // no other rank
  BOOST_CHECK_THROW(t.recv(d.view(dtype::f32), 1), plugin_error);
  std::vector<float> small(4);
  device_copy<float> wrong(small);
  BOOST_CHECK_THROW(t.all_gather(d.view(dtype::f32), wrong.view(dtype::f32)), plugin_error);
  std::vector<uint8_t> b;
  BOOST_CHECK_THROW(t.broadcast(b, 1), plugin_error);
  t.barrier();  // still usable: none of these reached the communicator
}

BOOST_AUTO_TEST_CASE(a_rank_whose_rank_0_never_comes_fails_within_the_timeout) {
  nccl_settings s;
  s.rank = 1;
  s.world_size = 2;
  s.rendezvous = "127.0.0.1:29597";
  s.timeout = std::chrono::milliseconds(1500);
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_CHECK_THROW(nccl_transport{s}, plugin_error);
  const bool bounded = std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10);
  BOOST_TEST(bounded);
}

int main(int argc, char* argv[]) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
