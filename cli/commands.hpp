#pragma once
// The subcommands of `tandem`. Each takes the arguments after its name and returns the
// process exit status (0 ok, 1 failure the user can fix, 2 bad usage).
#include <string>
#include <vector>

namespace tandem::cli {

using args = std::vector<std::string>;

int run_run(const args& a);       // tandem run --pipeline P --prompt "..."
int run_validate(const args& a);  // tandem validate P [--set k=v ...]
int run_plugins(const args& a);   // tandem plugins [--schema]
int run_inspect(const args& a);   // tandem inspect MODEL
int run_pull(const args& a);      // tandem pull [NAME]
int run_serve(const args& a);     // tandem serve [--pipeline P] [--host H] [--port N] [--set k=v]
int run_quantize(const args& a);  // tandem quantize --to exl3 --bits K --out DIR MODEL
int run_worker(const args& a);    // tandem worker --pipeline P --rank R [--set k=v]

}  // namespace tandem::cli
