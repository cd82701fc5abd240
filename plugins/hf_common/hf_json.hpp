#pragma once
// Shared by weights.exl3 and weights.safetensors (plugins/hf_common): the small JSON files of
// a Hugging Face model directory and the token-id fields they hold.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace tandem::hf {

// Reads a JSON file whose top level is an object; model_error naming the file when it is
// missing, unreadable or malformed.
boost::json::value read_json(const std::filesystem::path& file);
// The file's bytes; model_error naming it when it cannot be read.
std::string read_text(const std::filesystem::path& file);

// `o[key]` when it is a non-negative integer (a token id), else nullopt.
std::optional<int64_t> json_token_id(const boost::json::object& o, std::string_view key);
// `o[key]` as a list of token ids: an integer is a list of one, a list keeps its order;
// absent or null is empty. model_error naming `file` when it is anything else.
std::vector<int64_t> json_token_ids(const boost::json::object& o, std::string_view key,
                                    const std::string& file);

}  // namespace tandem::hf
