#include "tandem/error.hpp"

#include <utility>

namespace tandem {

// Out-of-line destructors anchor each type's vtable and typeinfo in libtandem_core.so,
// so catch and dynamic_cast agree across every plugin.
error::~error() = default;

config_error::config_error(std::string key_path, const std::string& message)
    : error(key_path.empty() ? message : key_path + ": " + message),
      key_path_(std::move(key_path)) {}
config_error::~config_error() = default;

plugin_error::plugin_error(std::string plugin, const std::string& message)
    : error(plugin + ": " + message), plugin_(std::move(plugin)) {}
plugin_error::~plugin_error() = default;

model_error::model_error(std::string file, const std::string& message)
    : error(file + ": " + message), file_(std::move(file)) {}
model_error::~model_error() = default;

request_error::request_error(uint64_t request_id, const std::string& message)
    : error("request " + std::to_string(request_id) + ": " + message), request_id_(request_id) {}
request_error::~request_error() = default;

device_error::device_error(std::string op, int status, const std::string& message)
    : error(op + ": " + message), op_(std::move(op)), status_(status) {}
device_error::~device_error() = default;

}  // namespace tandem
