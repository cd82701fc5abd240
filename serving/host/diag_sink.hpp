#pragma once
// Collects diagnostics from every stage of pipeline loading and hands them back in the
// order a user reads them: the file top to bottom, then the environment, then the command
// line (internal to the host).
#include <string>
#include <vector>

#include "tandem/pipeline.hpp"

namespace tandem::host_detail {

inline constexpr const char* environment_file = "<environment>";
inline constexpr const char* command_line_file = "<command line>";

class diag_sink {
 public:
  void error(source_pos pos, std::string key_path, std::string message, std::string hint = {});
  void warning(source_pos pos, std::string key_path, std::string message, std::string hint = {});
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }  // errors
  // Sorted: file diagnostics by line and column, then the environment's in the order
  // reported, then the command line's by argument (source_pos::col).
  std::vector<diagnostic> sorted() const;
  std::vector<diagnostic> sorted_warnings() const;

 private:
  static void add(std::vector<diagnostic>& to, diagnostic d);  // once: stages may find one fault twice
  static std::vector<diagnostic> in_reading_order(std::vector<diagnostic> v);
  std::vector<diagnostic> items_, warnings_;
};

}  // namespace tandem::host_detail
