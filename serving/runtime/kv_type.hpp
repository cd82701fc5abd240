#pragma once
// engine.kv_dtype: the element type of the model's K/V cache, chosen before the pool is
// sized (a bf16 pool holds twice the tokens of an f32 one in the same memory).
//
//   std::unique_ptr<model> m = create_model(be, weights, file);
//   apply_kv_dtype(spec.engine, be, "backend.cuda", *m);   // then kv_needs(), allocate_kv()
#include <string_view>

#include "tandem/backend.hpp"
#include "tandem/config.hpp"
#include "tandem/model.hpp"

namespace tandem {

// `auto` keeps the model's own choice (the backend's preferred type where the model can
// take it). An explicit type must be one the backend's attention reads (config_error
// naming engine.kv_dtype, the backend and the types it reads) and one the model keeps its
// caches in (model::set_kv_type refuses it otherwise).
void apply_kv_dtype(const config& engine, const backend& be, std::string_view backend_name, model& m);

}  // namespace tandem
