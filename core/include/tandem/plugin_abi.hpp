#pragma once
// The binary contract between the host and a plugin shared library.
//
// A plugin library is named after its registry name (`scheduler.fcfs.so`) and exports
// exactly one C symbol, `tandem_plugin_descriptor`, that returns a pointer to a static
// descriptor. No self-registering statics: the host asks, the plugin answers.
//
//   namespace { tandem::plugin_object* create(const tandem::plugin_context& ctx) {
//     return new my_scheduler(ctx.cfg); } }
//   static const tandem::plugin_descriptor desc{
//       tandem::plugin_api_version, "scheduler.fcfs", tandem::plugin_interface::scheduler,
//       "first come, first served", keys, std::size(keys), nullptr, &create};
//   TANDEM_PLUGIN(desc)
//
// Exceptions thrown by `create` and by the created object are C++ exceptions between
// C++ frames; the extern "C" entry itself is noexcept and only returns the pointer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tandem/config.hpp"
#include "tandem/export.hpp"
#include "tandem/logger.hpp"

namespace tandem {

// Bumped whenever a descriptor field or an interface's virtual table changes.
inline constexpr uint32_t plugin_api_version = 12;  // 2: backend::linear_fused; 3: backend op families (supports, MLA, DSA, MoE); 4: drafter::limits, release(output); 5: sched_decision::draft_budget, backend::native_stream, transport::all_to_all / identity; 6: drafter::target_layers / bind / observe (hidden-state drafters); 7: dtype::opaque (format-owned descriptors) replaces a format-specific dtype; 8: config_key::only_if (the schema array's stride); 9: drafter::propose_batch, draft_limits::batched; 10: backend::add_rms_norm_keep, backend::linear_swiglu; 11: backend::run_recorded's owner; 12: attention_batch::max_query_len, backend::linear_add_rms_norm

enum class plugin_interface : uint8_t { weight_format, backend, scheduler, drafter, transport };

constexpr std::string_view name(plugin_interface i) {
  switch (i) {
    case plugin_interface::weight_format: return "weights";
    case plugin_interface::backend:       return "backend";
    case plugin_interface::scheduler:     return "scheduler";
    case plugin_interface::drafter:       return "drafter";
    case plugin_interface::transport:     return "transport";
  }
  return "?";
}

// Base of every object a plugin creates; the host casts it to the interface named in
// the descriptor with dynamic_cast (hence exported typeinfo).
class TANDEM_API plugin_object {
 public:
  virtual ~plugin_object();
};

// What the host hands to a plugin's factory.
struct plugin_context {
  logger* log = nullptr;         // never null when called by the host
  const config* cfg = nullptr;   // validated against the descriptor's schema
};

// Whether the plugin can run on this machine. score 0 = cannot (reason says why);
// higher scores win when the pipeline asks for `auto`.
struct probe_result {
  int score = 1;
  std::string reason;
};

struct plugin_descriptor {
  uint32_t api_version;
  const char* name;              // dotted registry name: "backend.cpu"
  plugin_interface interface;
  const char* description;       // one line for `tandem plugins`
  const config_key* schema;      // settings the plugin accepts
  size_t schema_size;
  probe_result (*probe)();       // nullptr = always runnable, score 1
  plugin_object* (*create)(const plugin_context& ctx);  // caller takes ownership

  config_schema keys() const { return {schema, schema_size}; }
};

}  // namespace tandem

// The one exported entry of a plugin library.
#define TANDEM_PLUGIN_ENTRY_SYMBOL "tandem_plugin_descriptor"
#define TANDEM_PLUGIN(descriptor)                                                     \
  extern "C" __attribute__((visibility("default"))) const ::tandem::plugin_descriptor* \
  tandem_plugin_descriptor() noexcept {                                               \
    return &(descriptor);                                                             \
  }
