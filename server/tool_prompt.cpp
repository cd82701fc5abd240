#include "tool_prompt.hpp"

#include <boost/json.hpp>

namespace tandem::http {
namespace {

// Carries the facts of SmolLM2's documented tool prompt (tags, list format, the empty list
// for "no call"), worded for this server.
std::string tools_system_prompt(const std::string& tools_json) {
  std::string tools;
  const boost::json::value parsed = boost::json::parse(tools_json);  // outlives the loop
  for (const auto& t : parsed.as_array()) tools += boost::json::serialize(t) + "\n";
  return "You can call functions to help answer the user. The functions you may call are listed in "
         "<tools></tools>:\n<tools>\n" + tools +
         "</tools>\nTo call functions, answer with nothing but a JSON list of calls inside <tool_call></tool_call>, "
         "with arguments of the types the function declares:\n"
         "<tool_call>[\n{\"name\": \"function_name\", \"arguments\": {\"argument\": \"value\"}}\n]</tool_call>\n"
         "If no function fits, answer in plain text.";
}

// An assistant turn's calls (the JSON array parse_history_tool_calls made) as the text the
// model is asked to produce.
std::string calls_as_text(const std::string& tool_calls_json) {
  std::string out = "<tool_call>[\n";
  bool first = true;
  const boost::json::value parsed = boost::json::parse(tool_calls_json);
  for (const auto& c : parsed.as_array()) {
    const auto& fn = c.at("function").as_object();
    boost::json::object call;
    call["name"] = fn.at("name");
    call["arguments"] = fn.at("arguments");
    out += (first ? "" : ",\n") + boost::json::serialize(call);
    first = false;
  }
  return out + "\n]</tool_call>";
}

}  // namespace

std::vector<chat_message> with_tools_in_prompt(std::vector<chat_message> messages, const std::string& tools_json) {
  std::vector<chat_message> out;
  const std::string prompt = tools_system_prompt(tools_json);
  if (!messages.empty() && messages.front().role == "system") {
    messages.front().content = prompt + "\n\n" + messages.front().content;
  } else {
    out.push_back({"system", prompt});
  }
  for (auto& m : messages) {
    if (m.role == "assistant" && !m.tool_calls_json.empty()) {
      const std::string calls = calls_as_text(m.tool_calls_json);
      m.content = m.content.empty() ? calls : m.content + "\n" + calls;
      m.tool_calls_json.clear();
    } else if (m.role == "tool") {
      m = {"user", "<tool_response>\n" + m.content + "\n</tool_response>"};
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace tandem::http
