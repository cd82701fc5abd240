#pragma once
// A worker rank: `tandem worker --pipeline P --rank R` on every rank but 0. It opens the
// pipeline's weights, backend and transport (no scheduler, tokenizer or server), joins the
// rendezvous, loads its share of the model and runs rank 0's step plans until rank 0 stops.
#include <filesystem>

#include "tandem/runtime.hpp"

namespace tandem {

// Returns when rank 0 says stop. Throws config_error for a bad pipeline or rank, or ranks
// that disagree; plugin_error when rank 0 goes away or stalls (the transport's timeout).
void run_worker(const std::filesystem::path& pipeline, int rank, const runtime_options& opt = {});

}  // namespace tandem
