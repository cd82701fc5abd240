#pragma once
// tool_prompt: tools for a chat template that has no place for them. SmolLM2's template
// (the default model's) ignores `tools`, so a request's tools would never reach the model.
// As llama.cpp's generic handler and Ollama's SmolLM2 template do, the server then writes
// the tools into the conversation itself, in the format SmolLM2's documentation teaches:
//   - a system message listing the tools in <tools></tools> and asking for
//     <tool_call>[{"name": ..., "arguments": {...}}, ...]</tool_call> (prepended to the
//     conversation's own system message, if it has one);
//   - assistant turns that called tools rewritten as that text;
//   - tool results as user turns holding <tool_response>...</tool_response>.
// The output is then parsed with tool_format::hermes, which reads this list form.
#include <string>
#include <vector>

#include "tandem/chat_template.hpp"

namespace tandem::http {

// `tools_json`: the request's tools (a JSON array). Messages keep their order.
std::vector<chat_message> with_tools_in_prompt(std::vector<chat_message> messages, const std::string& tools_json);

}  // namespace tandem::http
