// backend.cuda: device set-up, memory, weights and recorded steps (ops are in cuda_ops.cpp).
#include "cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check.hpp"
#include "cuda_weights.hpp"
#include "exl3_weights.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::cuda {

namespace {
constexpr size_t cublas_workspace_bytes = size_t{32} << 20;
constexpr size_t max_graphs = 128;
}  // namespace

cuda_backend::cuda_backend(const cuda_options& opt) : opt_(opt) {
  check(cudaSetDevice(opt_.device), "init");
  check(cudaGetDeviceProperties(&prop_, opt_.device), "init");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "init");
  check(cublasCreate(&cublas_), "init");
  check(cublasSetStream(cublas_, stream_), "init");
  // An explicit workspace keeps cuBLAS from allocating inside a graph capture.
  cublas_ws_ = std::make_unique<cuda_buffer>(cublas_workspace_bytes);
  check(cublasSetWorkspace(cublas_, cublas_ws_->data(), cublas_workspace_bytes), "init");
  check(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH), "init");
  if (const char* p = std::getenv("TANDEM_CUDA_PROFILE"); p != nullptr && std::string(p) == "1") prof_.enable(true);
  if (const char* p = std::getenv("TANDEM_CUDA_GRAPH_STATS"); p != nullptr && std::string(p) == "1")
    log_graph_stats_ = true;
}

cuda_backend::~cuda_backend() {
  if (log_graph_stats_) (log_ ? *log_ : default_logger()).info(graph_stats_.describe(graphs_.size()));
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

bool cuda_backend::supports(backend_op op) const {
  // The batch-invariant mode covers the dense ops and GQA attention only (cuda_backend.hpp).
  if (opt_.batch_invariant && family(op) != "dense" && op != backend_op::attention_gqa) return false;
  switch (op) {
    case backend_op::moe_route:
    case backend_op::moe_experts:
      return true;  // cuda_moe.cpp
    case backend_op::layer_norm:
    case backend_op::attention_mla:
    case backend_op::dsa_indexer:
      return true;  // cuda_mla.cpp
    default:
      return backend::supports(op);
  }
}

std::string cuda_backend::describe() const {
  size_t free_b = 0, total_b = 0;
  device_memory(&free_b, &total_b);
  char line[512];
  std::snprintf(line, sizeof line,
                "CUDA %s (sm_%d%d, %d SMs, %.1f of %.1f GiB free): f32 activations, "
                "Q4_1/Q8_0 GEMV (%s activations), %s, CUDA graphs %s",
                prop_.name, prop_.major, prop_.minor, prop_.multiProcessorCount,
                static_cast<double>(free_b) / (1 << 30), static_cast<double>(total_b) / (1 << 30),
                opt_.q8_activations ? "q8" : "f32",
                opt_.batch_invariant ? "batch-invariant (GEMV and prefill attention for every row; dense GQA ops only)"
                : opt_.mma_max_rows > gemv_q8_preferred_max_tokens && opt_.q8_activations
                    ? ("int8 tensor-core linears for " + std::to_string(gemv_q8_preferred_max_tokens + 1) + "-" +
                       std::to_string(std::min(opt_.mma_max_rows, gemv_q8_mma_max_tokens)) +
                       " rows, f16 tensor-core GEMM above")
                          .c_str()
                    : "f16 tensor-core GEMM for prefill",
                opt_.graphs ? "on" : "off");
  return line;
}

size_t cuda_backend::memory_budget() const {
  if (opt_.memory_mb > 0) return static_cast<size_t>(opt_.memory_mb) << 20;
  size_t free_b = 0, total_b = 0;
  device_memory(&free_b, &total_b);
  // The runtime asks after the weights are loaded; keep 1 GiB for step workspaces, cuBLAS
  // and graphs, which are allocated later.
  const size_t reserve = size_t{1} << 30;
  return free_b > reserve ? static_cast<size_t>(static_cast<double>(free_b - reserve) * opt_.memory_utilization) : 0;
}

std::unique_ptr<device_buffer> cuda_backend::alloc(size_t bytes) {
  if (capturing_) throw error("backend.cuda: alloc while recording a step");
  return std::make_unique<cuda_buffer>(bytes);
}

void cuda_backend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "copy_to_device");
}

void cuda_backend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy_to_host");
}

void cuda_backend::synchronize() { check(cudaStreamSynchronize(stream_), "synchronize"); }

// The f16 copy for the GEMM is not made in the batch-invariant mode: every row takes the GEMV.
bool cuda_backend::uses_gemm() const { return opt_.gemm && !opt_.batch_invariant; }

std::unique_ptr<linear_weight> cuda_backend::load_linear(const tensor_info& w) {
  // EXL3, the one opaque format backend.cuda loads (cuda_exl3_linear checks the tag).
  if (w.type == dtype::opaque) {
    if (opt_.batch_invariant)
      throw config_error("backend", "backend.cuda: batch_invariant covers Q4_1/Q8_0/float linears, not the " +
                                        w.type_name() + " tensor " + w.name + " (its kernels choose by row count)");
    return std::make_unique<cuda_exl3_linear>(w, stream_);
  }
  return std::make_unique<cuda_linear>(w, uses_gemm(), stream_);
}

std::unique_ptr<linear_weight> cuda_backend::load_linear_group(std::span<const tensor_info* const> parts) {
  // One matrix when the parts can be concatenated (same type and width); else the
  // default group of separate linears (always for EXL3: trellises are not concatenated).
  for (const tensor_info* p : parts)
    if (p->type == dtype::opaque || p->type != parts.front()->type || p->shape.size() != 2 ||
        parts.front()->shape.size() != 2 ||
        p->shape[1] != parts.front()->shape[1] || parts.size() > 4)
      return backend::load_linear_group(parts);
  return std::make_unique<cuda_linear>(parts, uses_gemm(), stream_);
}

std::unique_ptr<device_buffer> cuda_backend::load_tensor(const tensor_info& t, dtype as) {
  if (as != dtype::f32) throw error("backend.cuda: load_tensor converts to f32 only, asked for " + std::string(name(as)));
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> host(static_cast<size_t>(n));
  if (t.type == dtype::f32) {
    if (t.nbytes < host.size() * 4) throw error("backend.cuda: tensor " + t.name + " is truncated");
    std::copy_n(static_cast<const float*>(t.data), host.size(), host.data());
  } else {
    dequantize_row(t.type, t.data, host.data(), n);
  }
  auto b = std::make_unique<cuda_buffer>(host.size() * 4);
  check(cudaMemcpyAsync(b->data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream_), "load_tensor");
  synchronize();
  return b;
}

std::unique_ptr<kv_storage> cuda_backend::alloc_kv(const kv_layout& layout) {
  return std::make_unique<cuda_kv>(layout);
}

void* cuda_backend::grow(scratch& s, size_t bytes, const char* op) {
  if (capturing_) {
    // The eager run before a capture sized every scratch; growing now would be a bug.
    if (s.grow(bytes)) throw error(std::string("backend.cuda: ") + op + " needs more scratch while recording");
  } else if (s.grow(bytes)) {
    drop_graphs(graph_drop::scratch);
  }
  return s.data();
}

void cuda_backend::drop_graphs(graph_drop why) {
  graph_stats_.drop(why, graphs_.size());
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

void cuda_backend::run_recorded(uint64_t owner, uint64_t step, const std::function<void()>& body) {
  const std::pair<uint64_t, uint64_t> key{owner, step};
  if (!opt_.graphs || capturing_ || prof_.enabled()) {
    ++graph_stats_.eager;
    return body();
  }
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    check(cudaGraphLaunch(it->second, stream_), "graph replay");
    ++graph_stats_.replays;
    return;
  }
  // First sight of this key: run it for real (its results are this step's, and it sizes
  // every scratch buffer), then record the same ops for later steps.
  body();
  if (graphs_.size() >= max_graphs) drop_graphs(graph_drop::max_graphs);
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture");
  capturing_ = true;
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    capturing_ = false;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is what was thrown
    throw;
  }
  capturing_ = false;
  check(cudaStreamEndCapture(stream_, &graph), "graph capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "graph instantiate");
  graphs_.emplace(key, exec);
  ++graph_stats_.captures;
}

}  // namespace tandem::cuda
