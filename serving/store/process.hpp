#pragma once
// Running a helper program (pip, python) without a shell: argv goes to posix_spawnp as
// an array, so no model name or path is ever parsed as shell syntax.
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::store {

struct process_result {
  int exit_code = 0;         // exit status, or 128 + signal when the child was killed
  std::string stderr_tail;   // the last lines the child wrote to stderr
};

// Runs argv (argv[0] searched in PATH) with the current environment, waits for it, and
// sends its stdout to `stdout_log` and stderr to `stderr_log`. Throws tandem::error when
// the program cannot be started (not found, not executable).
process_result run_process(const std::vector<std::string>& argv,
                           const std::filesystem::path& stdout_log,
                           const std::filesystem::path& stderr_log);

// The last `max_lines` lines (at most `max_bytes` bytes) of a text file; "" when unreadable.
std::string file_tail(const std::filesystem::path& p, size_t max_lines = 15,
                      size_t max_bytes = 2000);

}  // namespace tandem::store
