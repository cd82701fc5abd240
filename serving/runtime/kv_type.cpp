#include "kv_type.hpp"

#include <algorithm>
#include <string>

#include "tandem/error.hpp"

namespace tandem {

void apply_kv_dtype(const config& engine, const backend& be, std::string_view backend_name, model& m) {
  const std::string want = engine.get_string("kv_dtype");
  if (want == "auto") return;
  const std::vector<dtype> can = be.kv_types();
  const auto it = std::find_if(can.begin(), can.end(), [&](dtype t) { return name(t) == want; });
  if (it == can.end()) {
    std::string list;
    for (dtype t : can) list += (list.empty() ? "" : ", ") + std::string(name(t));
    throw config_error("engine.kv_dtype", std::string(backend_name) + " cannot keep the KV cache in " + want +
                                              " (its attention reads " + list + ")");
  }
  m.set_kv_type(*it);
}

}  // namespace tandem
