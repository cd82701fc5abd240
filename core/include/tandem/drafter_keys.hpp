#pragma once
// The settings of the engine's part of a drafter (draft_limits), which every drafter plugin
// offers under the same names in its schema:
//   const tandem::config_key keys[] = {{"k", ...}, tandem::draft_adaptive_key, tandem::draft_disable_above_batch_key};
#include "tandem/config.hpp"

namespace tandem {

inline constexpr config_key draft_adaptive_key{
    "adaptive", config_type::boolean, "true",
    "the engine picks each sequence's draft length (0..k) from its acceptance and measured step times; "
    "false = always up to k"};

inline constexpr config_key draft_disable_above_batch_key{
    "disable_above_batch", config_type::integer, "0", "no drafts in a step of more sequences than this; 0 = always draft",
    0, 1 << 20};

}  // namespace tandem
