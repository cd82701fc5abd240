#pragma once
// The logger the host hands to plugins. spdlog lives only in the core; plugins format
// their own messages (fmt is fine) and pass the text here.
#include <cstdint>
#include <string_view>

#include "tandem/export.hpp"

namespace tandem {

enum class log_level : uint8_t { trace, debug, info, warn, error };

class TANDEM_API logger {
 public:
  virtual ~logger();
  virtual void log(log_level level, std::string_view message) = 0;

  void debug(std::string_view m) { log(log_level::debug, m); }
  void info(std::string_view m) { log(log_level::info, m); }
  void warn(std::string_view m) { log(log_level::warn, m); }
  void error(std::string_view m) { log(log_level::error, m); }
};

// The process-wide logger (spdlog behind it). Never null.
TANDEM_API logger& default_logger();

}  // namespace tandem
