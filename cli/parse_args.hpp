#pragma once
// The option parsing every subcommand shares: --help prints the usage and exits 0; a bad
// option or a failed check prints the error and the usage and exits 2.
#include <boost/program_options.hpp>
#include <functional>
#include <iostream>
#include <optional>

#include "commands.hpp"

namespace tandem::cli {

// nullopt: go on with the parsed options; otherwise the exit status to return now.
// `check` may throw boost::program_options::error for values out of range.
inline std::optional<int> parse_args(const char* command, const args& a,
                                     const boost::program_options::options_description& desc,
                                     boost::program_options::variables_map& vm,
                                     const boost::program_options::positional_options_description* pos = nullptr,
                                     const std::function<void()>& check = {}) {
  namespace po = boost::program_options;
  try {
    po::command_line_parser parser(a);
    parser.options(desc);
    if (pos) parser.positional(*pos);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (check) check();
  } catch (const po::error& e) {
    std::cerr << "tandem " << command << ": " << e.what() << "\n\n" << desc << "\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace tandem::cli
