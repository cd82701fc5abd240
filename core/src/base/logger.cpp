#include "tandem/logger.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace tandem {
namespace {

// Logs go to stderr so that generated text on stdout stays clean for pipes.
class spdlog_logger final : public logger {
 public:
  spdlog_logger() : log_(spdlog::stderr_color_mt("tandem")) {
    log_->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  }
  void log(log_level level, std::string_view message) override {
    log_->log(to_spdlog(level), "{}", message);
  }

 private:
  static spdlog::level::level_enum to_spdlog(log_level l) {
    switch (l) {
      case log_level::trace: return spdlog::level::trace;
      case log_level::debug: return spdlog::level::debug;
      case log_level::info:  return spdlog::level::info;
      case log_level::warn:  return spdlog::level::warn;
      case log_level::error: return spdlog::level::err;
    }
    return spdlog::level::info;
  }
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace

logger& default_logger() {
  static spdlog_logger instance;
  return instance;
}

}  // namespace tandem
