// drafter.test_ok: a valid drafter with a required setting (no default).
#include <iterator>

#include "test_objects.hpp"

namespace {

const tandem::config_key keys[] = {
    {"k", tandem::config_type::integer, nullptr, "tokens proposed per step", 1, 16},
    {"mode", tandem::config_type::string, "greedy", "how drafts are picked", 0, 0,
     "greedy|sample"},
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem_test::test_drafter(*ctx.cfg);
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, "drafter.test_ok", tandem::plugin_interface::drafter,
    "test drafter: repeats the last token", keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(desc)
