// tandem worker: one rank other than 0 of a pipeline with topology.ranks > 1. It loads its
// share of the model and computes what rank 0 (`tandem serve` or `tandem run`) sends, until
// rank 0 stops (exit 0) or is lost (exit 1, after the transport's timeout at most).
#include <boost/program_options.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "parse_args.hpp"
#include "tandem/worker.hpp"

namespace po = boost::program_options;

namespace tandem::cli {

int run_worker(const args& a) {
  std::string pipeline;
  int rank = -1;
  std::vector<std::string> sets;
  bool quiet = false;
  po::options_description d("tandem worker --pipeline P --rank R [options]");
  d.add_options()
      ("help,h", "this help")
      ("pipeline,p", po::value(&pipeline)->required(), "the pipeline rank 0 runs (the same file and settings)")
      ("rank,r", po::value(&rank)->required(), "this worker's rank: 1 to topology.ranks - 1")
      ("set", po::value(&sets)->composing(), "override a pipeline setting: section.key=value (as rank 0 does)")
      ("quiet,q", po::bool_switch(&quiet), "no progress lines");
  po::variables_map vm;
  if (auto done = parse_args("worker", a, d, vm, nullptr, [&] {
        if (rank < 1) throw po::error("--rank must be 1 or more (rank 0 is `tandem serve` or `tandem run`)");
      }))
    return *done;
  runtime_options opt;
  opt.overrides = sets;
  if (!quiet) opt.progress = [](std::string_view s) { std::fprintf(stderr, "%.*s\n", int(s.size()), s.data()); };
  tandem::run_worker(pipeline, rank, opt);
  if (!quiet) std::fprintf(stderr, "rank %d: rank 0 stopped; exiting\n", rank);
  return 0;
}

}  // namespace tandem::cli
