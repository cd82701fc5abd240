#pragma once
// JSON text -> template values, for what a request hands the template as data (tools,
// tool calls): objects become insertion-ordered dicts, arrays lists, numbers int or float
// as Python's json.loads would make them.
#include <string_view>

#include "value.hpp"

namespace tandem::chat_detail {

// Throws chat_template_error for invalid JSON.
value from_json(std::string_view text);

}  // namespace tandem::chat_detail
