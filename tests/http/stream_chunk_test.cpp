// stream_chunk: the text-delta events written without a JSON DOM must be byte for byte what
// completion_job's DOM path (chunk_base + choice_json + sse_event) writes.
#define BOOST_TEST_MODULE http_stream_chunk
#include <boost/test/unit_test.hpp>

#include <random>
#include <string>
#include <vector>

#include "sse.hpp"
#include "stream_chunk.hpp"

using namespace tandem::http;

namespace {

boost::json::object base(bool chat, bool usage) {  // as completion_job::chunk_base
  boost::json::object o;
  o["id"] = chat ? "chatcmpl-0123456789abcdef01234567" : "cmpl-0123456789abcdef01234567";
  o["object"] = chat ? "chat.completion.chunk" : "text_completion";
  o["created"] = int64_t{1796424668};
  o["model"] = "some/model \"quoted\" \xc3\xa9";
  o["system_fingerprint"] = "fp_19d62b9559c4d28b";
  if (usage) o["usage"] = nullptr;
  return o;
}

std::string dom_event(bool chat, bool usage, size_t index, const std::string& text) {  // as choice_json
  boost::json::object choice;
  choice["index"] = index;
  if (chat) {
    boost::json::object delta;
    delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  boost::json::object chunk = base(chat, usage);
  boost::json::array arr;
  arr.push_back(std::move(choice));
  chunk["choices"] = std::move(arr);
  return sse_event(boost::json::serialize(chunk));
}

std::vector<std::string> texts() {
  std::vector<std::string> t = {"a", " the", "\n", "\n\n", "\"quoted\"", "back\\slash", "tab\there", "\r\n",
                                std::string("nul\0byte", 8), "\x01\x1f\x7f", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                                "\xef\xbf\xbd", "</script>", "data: [DONE]\n\n", "{\"json\":[1,2]}", "\xe2\x80\xa8"};
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {  // arbitrary bytes, control characters and invalid UTF-8 included
    std::string s(1 + rng() % 12, ' ');
    for (char& ch : s) ch = static_cast<char>(rng() % 256);
    t.push_back(s);
  }
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(text_deltas_match_the_dom_byte_for_byte) {
  for (bool chat : {false, true})
    for (bool usage : {false, true}) {
      const std::string head = chunk_head(base(chat, usage));
      for (size_t index : {size_t{0}, size_t{1}, size_t{17}})
        for (const auto& text : texts()) {
          const std::string fast = text_delta_event(head, index, chat, text);
          BOOST_REQUIRE_EQUAL(fast, dom_event(chat, usage, index, text));
        }
    }
}

BOOST_AUTO_TEST_CASE(each_delta_is_one_whole_event) {
  const std::string head = chunk_head(base(false, true));
  const std::string ev = text_delta_event(head, 0, false, "line one\n\nline two\n");
  BOOST_TEST(ev.rfind("data: ", 0) == 0u);
  BOOST_TEST(ev.find("\n\n") == ev.size() - 2);  // one event: the text's newlines are escaped
  BOOST_TEST(boost::json::parse(ev.substr(6)).at("choices").at(0).at("text").as_string() == "line one\n\nline two\n");
}
