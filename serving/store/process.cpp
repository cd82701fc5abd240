#include "process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tandem/error.hpp"

extern char** environ;

namespace tandem::store {
namespace {

// posix_spawn file actions are a C resource; this frees them on every path out.
class spawn_actions {
 public:
  spawn_actions() { posix_spawn_file_actions_init(&a_); }
  ~spawn_actions() { posix_spawn_file_actions_destroy(&a_); }
  spawn_actions(const spawn_actions&) = delete;
  spawn_actions& operator=(const spawn_actions&) = delete;
  posix_spawn_file_actions_t* get() { return &a_; }

 private:
  posix_spawn_file_actions_t a_;
};

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw error(std::string("waitpid: ") + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

}  // namespace

process_result run_process(const std::vector<std::string>& argv,
                           const std::filesystem::path& stdout_log,
                           const std::filesystem::path& stderr_log) {
  if (argv.empty()) throw error("run_process: empty argv");
  spawn_actions actions;
  // No O_CLOEXEC here: these descriptors are the child's stdout and stderr.
  constexpr int flags = O_WRONLY | O_CREAT | O_TRUNC;
  posix_spawn_file_actions_addopen(actions.get(), 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(actions.get(), 1, stdout_log.c_str(), flags, 0644);
  posix_spawn_file_actions_addopen(actions.get(), 2, stderr_log.c_str(), flags, 0644);

  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);

  pid_t pid = 0;
  if (int rc = posix_spawnp(&pid, cargv[0], actions.get(), nullptr, cargv.data(), environ)) {
    throw error("cannot run '" + argv[0] + "': " + std::strerror(rc));
  }
  process_result r;
  r.exit_code = wait_for(pid);
  r.stderr_tail = file_tail(stderr_log);
  return r;
}

std::string file_tail(const std::filesystem::path& p, size_t max_lines, size_t max_bytes) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  // Walk back over max_lines newlines: the tail starts just after the last one passed.
  size_t start = text.size();
  for (size_t lines = 0; lines < max_lines; ++lines) {
    size_t nl = start == 0 ? std::string::npos : text.rfind('\n', start - 1);
    if (nl == std::string::npos) {
      start = 0;
      break;
    }
    start = nl;
  }
  std::string tail = text.substr(start < text.size() && text[start] == '\n' ? start + 1 : start);
  if (tail.size() > max_bytes) tail = "..." + tail.substr(tail.size() - max_bytes);
  return tail;
}

}  // namespace tandem::store
