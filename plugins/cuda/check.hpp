#pragma once
// CUDA and cuBLAS status codes -> tandem::device_error naming the op that failed.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tandem/error.hpp"

namespace tandem::cuda {

inline void check(cudaError_t e, const char* op) {
  if (e != cudaSuccess)
    throw device_error(op, static_cast<int>(e), std::string("backend.cuda: ") + op + ": " +
                                                    cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

// After a kernel launch: a bad launch configuration or an earlier asynchronous fault.
inline void check_launch(const char* op) { check(cudaGetLastError(), op); }

inline void check(cublasStatus_t s, const char* op) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw device_error(op, static_cast<int>(s), std::string("backend.cuda: ") + op + ": cuBLAS " +
                                                    cublasGetStatusName(s) + ": " + cublasGetStatusString(s));
}

}  // namespace tandem::cuda
