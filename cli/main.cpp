// tandem: the command-line entry. Subcommands live in cmd_*.cpp.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "commands.hpp"
#include "tandem/error.hpp"

namespace {

struct command {
  const char* name;
  int (*run)(const tandem::cli::args&);
  const char* summary;
};

const command commands[] = {
    {"run", tandem::cli::run_run, "generate from a prompt with a pipeline, streamed to stdout"},
    {"validate", tandem::cli::run_validate, "check a pipeline file; every error at once"},
    {"plugins", tandem::cli::run_plugins, "list the plugins found and their settings"},
    {"inspect", tandem::cli::run_inspect, "print a model file's metadata and tensor table"},
    {"pull", tandem::cli::run_pull, "fetch and verify a model named by a manifest"},
    {"serve", tandem::cli::run_serve, "serve the OpenAI-compatible HTTP API"},
    {"quantize", tandem::cli::run_quantize, "quantize a llama GGUF or a glm_moe_dsa HF directory to EXL3 (exllamav3) on the CPU"},
    {"worker", tandem::cli::run_worker, "run one rank (1 or more) of a pipeline with topology.ranks > 1"},
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: tandem <command> [options]\n\ncommands:\n");
  for (const command& c : commands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`tandem <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("tandem %s\n", TANDEM_VERSION);
    return 0;
  }
  for (const command& c : commands) {
    if (name != c.name) continue;
    try {
      return c.run(tandem::cli::args(argv + 2, argv + argc));
    } catch (const tandem::error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "tandem: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
