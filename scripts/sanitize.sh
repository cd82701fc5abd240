#!/usr/bin/env bash
# Runs tests under AddressSanitizer + UndefinedBehaviorSanitizer (clang), in the fuzzers'
# build directory (scripts/fuzz.sh: the same configuration, so the libraries are built once).
#
#   scripts/sanitize.sh              # the whole unit suite (builds most of tandem: long on 2 cores)
#   scripts/sanitize.sh --ci         # the subset .ci/run affords: the parsers' and tokenizer's tests
#   scripts/sanitize.sh chat_prompt tokenizer_literal_ranges   # named tests
#
# A sanitizer report fails the test (halt_on_error). Ends with meson's summary.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${FUZZ_BUILD_DIR:-build-fuzz}
# Tests whose code the fuzz harnesses already built: only their own files compile (the
# safetensors / EXL3 readers' tests came with fuzz_safetensors, fuzz_hf_model and fuzz_exl3:
# about 3 minutes of compiling and 2.5 s of running here). Not yet: the HTTP tests (the
# server library comes with fuzz_http, but they were not timed), and the engine and model
# tests (they need the CPU backend and the models built with sanitizers: the whole-suite run).
ci_subset=(tokenizer_text_primitives tokenizer_encode_decode tokenizer_metadata_errors tokenizer_literal_ranges
           tokenizer_hf_glm chat_template chat_template_fuzz chat_prompt gguf_parse gguf_fuzz
           exl3_safetensors exl3_loader safetensors_plugin)
tests=("$@")
if [[ ${1:-} == --ci ]]; then tests=("${ci_subset[@]}"); fi

rm -f "$build/meson-logs/testlog.json"  # a stale log must not count when this run fails early
command -v clang++ >/dev/null || { echo "sanitize: clang++ not found (scripts/setup.sh installs clang)" >&2; exit 2; }
# shellcheck disable=SC1091
[[ -f .venv/bin/activate ]] && source .venv/bin/activate
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ meson setup "$build" --buildtype=debugoptimized -Dcuda=disabled -Dfuzz=true \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Build only the executables of the chosen tests and what they depend on (plugin modules
# they load); a plain `meson test` would build everything.
mapfile -t targets < <(python3 - "$build" "${tests[@]}" <<'PY' | sort -u
import json, os, subprocess, sys
build, names = os.path.abspath(sys.argv[1]), sys.argv[2:]
def introspect(what):
    return json.loads(subprocess.run(["meson", "introspect", what, build], capture_output=True, text=True,
                                     check=True).stdout)
files = {t["id"]: t["filename"] for t in introspect("--targets")}
for t in introspect("--tests"):
    chosen = t["name"] in names if names else "unit" in t["suite"] or any(s.endswith(":unit") for s in t["suite"])
    if not chosen:
        continue
    for path in [t["cmd"][0]] + [f for d in t.get("depends", []) for f in files.get(d, [])]:
        path = os.path.abspath(path)
        if path.startswith(build + os.sep):
            print(os.path.relpath(path, build))
PY
)
((${#targets[@]})) || { echo "sanitize: no such tests: ${tests[*]}" >&2; exit 2; }
ninja -C "$build" "${targets[@]}"
if ((${#tests[@]})); then
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 "${tests[@]}"
else
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 --suite unit
fi
