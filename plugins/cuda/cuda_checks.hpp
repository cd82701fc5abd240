#pragma once
// The argument checks backend.cuda's ops share: every bad argument is a tandem::error that
// names the backend, the op and what is wrong with it.
#include <string>

#include "tandem/error.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem::cuda {

[[noreturn]] inline void bad(const char* op, const std::string& what) {
  throw error(std::string("backend.cuda: ") + op + ": " + what);
}

// A tensor the op reads or writes in place: in device memory, of element type t, contiguous.
inline void check_view(const tensor_view& v, dtype t, const char* op, const char* what) {
  if (v.dev.kind != device_kind::cuda) bad(op, std::string(what) + " is not in device memory");
  if (v.type != t) bad(op, std::string(what) + " is " + std::string(name(v.type)) + ", expected " + std::string(name(t)));
  if (!v.is_contiguous()) bad(op, std::string(what) + " is not contiguous");
}

}  // namespace tandem::cuda
