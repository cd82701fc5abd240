// The broken plugins the host must reject with a clear reason, one per build flag:
//   BROKEN_NO_ENTRY       no tandem_plugin_descriptor symbol
//   BROKEN_VERSION        api_version 999
//   BROKEN_NAME           descriptor name differs from the file name
//   BROKEN_IFACE          scheduler.* name, backend interface
//   BROKEN_ONLY_IF        a config_key::only_if with a value its sibling cannot take
#include <iterator>

#include "test_objects.hpp"

namespace {

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem_test::test_scheduler(*ctx.cfg);
}

#if defined(BROKEN_VERSION)
const tandem::plugin_descriptor desc{999, "scheduler.test_bad_version",
                                     tandem::plugin_interface::scheduler, "", nullptr, 0,
                                     nullptr, &create};
#elif defined(BROKEN_NAME)
const tandem::plugin_descriptor desc{tandem::plugin_api_version, "scheduler.other_name",
                                     tandem::plugin_interface::scheduler, "", nullptr, 0,
                                     nullptr, &create};
#elif defined(BROKEN_ONLY_IF)
const tandem::config_key keys[] = {
    {"max_batch", tandem::config_type::integer, "8", "most requests per step", 1, 64},
    {"preempt", tandem::config_type::boolean, "false", "may evict running requests"},
    {"victims", tandem::config_type::integer, "1", "requests one preemption evicts", 1, 8, nullptr, nullptr,
     "max_batch!=1,preempt=sometimes"},
};
const tandem::plugin_descriptor desc{tandem::plugin_api_version, "scheduler.test_bad_only_if",
                                     tandem::plugin_interface::scheduler, "", keys, std::size(keys),
                                     nullptr, &create};
#elif defined(BROKEN_IFACE)
const tandem::plugin_descriptor desc{tandem::plugin_api_version, "scheduler.test_wrong_iface",
                                     tandem::plugin_interface::backend, "", nullptr, 0,
                                     nullptr, &create};
#endif

}  // namespace

#if defined(BROKEN_NO_ENTRY)
// Something exported, so the library is a normal one that just lacks the entry.
extern "C" __attribute__((visibility("default"))) int tandem_test_not_an_entry() {
  return create(tandem::plugin_context{}) != nullptr;
}
#else
TANDEM_PLUGIN(desc)
#endif
