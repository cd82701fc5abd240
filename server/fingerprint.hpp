#pragma once
// system_fingerprint: OpenAI's identifier of the configuration that produced an answer,
// sent on every completion and chunk. It changes when the tandem version, the model, or
// the serving set-up (plugins, backend, KV pool: the source's start-up summary) changes,
// so a client comparing answers across runs can tell when the set-up moved.
#include <string>

#include "completion_source.hpp"

namespace tandem::http {

// "fp_" and 16 hex digits of FNV-1a over the version, model name and summary.
std::string system_fingerprint(const completion_source& src);

}  // namespace tandem::http
