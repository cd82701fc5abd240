#include "nccl_transport.hpp"

#include <cmath>
#include <cstring>
#include <thread>

#include "tandem/error.hpp"
#include "tcp_store.hpp"

namespace tandem {
namespace {

constexpr const char* plugin = "transport.nccl";
constexpr const char* unique_id_key = "transport.nccl/unique_id";

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw plugin_error(plugin, what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(dtype t, const char* what) {
  switch (t) {
    case dtype::f32: return ncclFloat32;
    case dtype::f16: return ncclFloat16;
    case dtype::bf16: return ncclBfloat16;
    case dtype::i32: return ncclInt32;
    default:
      throw plugin_error(plugin, std::string(what) + ": " + std::string(traits(t).name) + " tensors are not taken (f32, f16, bf16, i32)");
  }
}

// A contiguous device tensor of a plain type: its element count.
size_t device_elems(const tensor_view& t, const char* what) {
  if (t.dev.kind != device_kind::cuda)
    throw plugin_error(plugin, std::string(what) + ": only CUDA tensors (transport.nccl serves backend.cuda)");
  if (!t.is_contiguous()) throw plugin_error(plugin, std::string(what) + ": the tensor must be contiguous");
  return static_cast<size_t>(t.numel());
}

}  // namespace

nccl_settings nccl_settings::from(const config& cfg) {
  nccl_settings s;
  s.rank = static_cast<int>(cfg.get_int("rank"));
  s.world_size = static_cast<int>(cfg.get_int("world_size"));
  s.device = static_cast<int>(cfg.get_int("device"));
  s.rendezvous = cfg.get_string("rendezvous");
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(cfg.get_number("timeout_s") * 1000)));
  return s;
}

nccl_transport::nccl_transport(const nccl_settings& s)
    : rank_(s.rank), world_(s.world_size), device_(s.device), timeout_(s.timeout) {
  if (rank_ < 0 || rank_ >= world_)
    throw plugin_error(plugin, "rank " + std::to_string(rank_) + " is outside a world of " + std::to_string(world_));
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "no CUDA device");
  if (device_ >= devices)
    throw plugin_error(plugin, "device " + std::to_string(device_) + " does not exist (" + std::to_string(devices) +
                                   " CUDA devices)");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  ncclUniqueId id;
  if (world_ == 1) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  } else {
    // The id travels through the Gloo store: rank 0 serves it and puts the id, the others
    // wait for the key (a plugin_error after timeout_s when rank 0 never comes).
    const auto [host, port] = gloo_detail::parse_endpoint(s.rendezvous, "rendezvous");
    if (rank_ == 0) store_server_ = std::make_unique<gloo_detail::tcp_store_server>(host, port);
    gloo_detail::tcp_store store(host, port, timeout_);
    if (rank_ == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store.set(unique_id_key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      const std::vector<char> bytes = store.get(unique_id_key);
      if (bytes.size() != sizeof(id.internal)) throw plugin_error(plugin, "rendezvous: a malformed ncclUniqueId");
      std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    }
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait below is bounded by timeout_s
  check(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config), "communicator set-up (ncclCommInitRankConfig)");
  check_cuda(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = own_stream_;
  check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
}

nccl_transport::~nccl_transport() {
  if (comm_) {
    // Finalize flushes the communicator's work with the peers; bounded like every wait, then
    // abort (which never waits on a peer) if it did not end in time.
    ncclResult_t r = ncclCommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (r == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) break;
    }
    if (r == ncclSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }
  if (staging_) cudaFree(staging_);
  if (done_) cudaEventDestroy(done_);
  if (own_stream_) cudaStreamDestroy(own_stream_);
}

void nccl_transport::bind_stream(void* stream) {
  stream_ = stream ? static_cast<cudaStream_t>(stream) : own_stream_;
}

[[noreturn]] void nccl_transport::abort_with(std::string why) {
  failure_ = why;
  // Abort frees the communicator's resources and makes kernels of it in flight return, so
  // neither this call nor a later one waits on a peer that is gone.
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
  throw plugin_error(plugin, why);
}

void nccl_transport::require_usable(const char* what) const {
  if (failure_) throw plugin_error(plugin, std::string(what) + ": the communicator was aborted: " + *failure_);
}

void nccl_transport::check(ncclResult_t r, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // A non-blocking communicator answers ncclInProgress while the call completes.
  while (r == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline)
      abort_with(std::string(what) + " on rank " + std::to_string(rank_) +
                 " did not complete within timeout_s (a rank died or stalled)");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (comm_ == nullptr || ncclCommGetAsyncError(comm_, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    abort_with(std::string(what) + " on rank " + std::to_string(rank_) + " failed: " + ncclGetErrorString(r) +
               (last && *last ? std::string(" (") + last + ")" : std::string()));
  }
}

// Collectives are asynchronous: their completion (or a peer's failure) is seen by polling the
// stream and the communicator, so a dead peer is an error after timeout_s, not a hang.
void nccl_transport::finish(const char* what) {
  check_cuda(cudaEventRecord(done_, stream_), std::string(what) + ": cudaEventRecord");
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) abort_with(std::string(what) + ": " + cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      abort_with(std::string(what) + " on rank " + std::to_string(rank_) + " failed: " + ncclGetErrorString(async));
    if (std::chrono::steady_clock::now() > deadline)
      abort_with(std::string(what) + " on rank " + std::to_string(rank_) +
                 " did not complete within timeout_s (a rank died or stalled)");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void* nccl_transport::staging(size_t bytes) {
  if (bytes > staging_bytes_) {
    if (staging_) check_cuda(cudaFree(staging_), "cudaFree");
    staging_ = nullptr;
    staging_bytes_ = 0;
    check_cuda(cudaMalloc(&staging_, bytes), "broadcast staging buffer");
    staging_bytes_ = bytes;
  }
  return staging_;
}

void nccl_transport::broadcast(std::vector<uint8_t>& bytes, int root) {
  require_usable("broadcast");
  if (root < 0 || root >= world_) throw plugin_error(plugin, "broadcast: root " + std::to_string(root) + " is not a rank");
  // The size first, then the bytes, both through the device staging buffer.
  uint64_t n = rank_ == root ? bytes.size() : 0;
  void* dev = staging(std::max<size_t>(sizeof n, 256));
  check_cuda(cudaMemcpyAsync(dev, &n, sizeof n, cudaMemcpyHostToDevice, stream_), "broadcast");
  check(ncclBroadcast(dev, dev, sizeof n, ncclUint8, root, comm_, stream_), "broadcast");
  check_cuda(cudaMemcpyAsync(&n, dev, sizeof n, cudaMemcpyDeviceToHost, stream_), "broadcast");
  finish("broadcast");
  if (n > (uint64_t{1} << 32)) throw plugin_error(plugin, "broadcast: " + std::to_string(n) + " bytes from the root");
  bytes.resize(n);
  if (n == 0) return;
  dev = staging(n);
  if (rank_ == root) check_cuda(cudaMemcpyAsync(dev, bytes.data(), n, cudaMemcpyHostToDevice, stream_), "broadcast");
  check(ncclBroadcast(dev, dev, n, ncclUint8, root, comm_, stream_), "broadcast");
  check_cuda(cudaMemcpyAsync(bytes.data(), dev, n, cudaMemcpyDeviceToHost, stream_), "broadcast");
  finish("broadcast");
}

void nccl_transport::all_reduce_sum(tensor_view inout) {
  require_usable("all_reduce_sum");
  const size_t n = device_elems(inout, "all_reduce_sum");
  check(ncclAllReduce(inout.data, inout.data, n, nccl_type(inout.type, "all_reduce_sum"), ncclSum, comm_, stream_),
        "all_reduce_sum");
  finish("all_reduce_sum");
}

void nccl_transport::all_gather(tensor_view in, tensor_view out) {
  require_usable("all_gather");
  const size_t n = device_elems(in, "all_gather"), total = device_elems(out, "all_gather");
  if (in.type != out.type || total != n * static_cast<size_t>(world_))
    throw plugin_error(plugin, "all_gather: out must hold world_size x in of the same type");
  check(ncclAllGather(in.data, out.data, n, nccl_type(in.type, "all_gather"), comm_, stream_), "all_gather");
  finish("all_gather");
}

// One group of point-to-point calls, as NCCL's own alltoall example does: a send and a receive
// per peer (this rank's own part is a device copy), all issued at ncclGroupEnd.
void nccl_transport::all_to_all(tensor_view in, std::span<const int64_t> send_rows, tensor_view out,
                                std::span<const int64_t> recv_rows) {
  require_usable("all_to_all");
  device_elems(in, "all_to_all");
  device_elems(out, "all_to_all");
  const size_t row = all_to_all_row_bytes(plugin, rank_, world_, in, send_rows, out, recv_rows);
  auto* src = static_cast<char*>(in.data);
  auto* dst = static_cast<char*>(out.data);
  check(ncclGroupStart(), "all_to_all");
  for (int r = 0; r < world_; ++r) {
    const size_t sent = static_cast<size_t>(send_rows[r]) * row, got = static_cast<size_t>(recv_rows[r]) * row;
    if (r == rank_) {
      if (sent > 0) check_cuda(cudaMemcpyAsync(dst, src, sent, cudaMemcpyDeviceToDevice, stream_), "all_to_all");
    } else {
      if (sent > 0) check(ncclSend(src, sent, ncclUint8, r, comm_, stream_), "all_to_all");
      if (got > 0) check(ncclRecv(dst, got, ncclUint8, r, comm_, stream_), "all_to_all");
    }
    src += sent;
    dst += got;
  }
  check(ncclGroupEnd(), "all_to_all");
  finish("all_to_all");
}

void nccl_transport::send(tensor_view t, int peer) {
  require_usable("send");
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw plugin_error(plugin, "send: peer " + std::to_string(peer) + " is not another rank of " + std::to_string(world_));
  check(ncclSend(t.data, device_elems(t, "send"), nccl_type(t.type, "send"), peer, comm_, stream_), "send");
  finish("send");
}

void nccl_transport::recv(tensor_view t, int peer) {
  require_usable("recv");
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw plugin_error(plugin, "recv: peer " + std::to_string(peer) + " is not another rank of " + std::to_string(world_));
  check(ncclRecv(t.data, device_elems(t, "recv"), nccl_type(t.type, "recv"), peer, comm_, stream_), "recv");
  finish("recv");
}

void nccl_transport::barrier() {
  require_usable("barrier");
  void* dev = staging(256);
  check(ncclAllReduce(dev, dev, 1, ncclInt32, ncclSum, comm_, stream_), "barrier");
  finish("barrier");
}

}  // namespace tandem
