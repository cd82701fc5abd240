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
# Tests whose code the fuzz harnesses already built: only their own files compile.
ci_subset=(tokenizer_text_primitives tokenizer_encode_decode tokenizer_metadata_errors tokenizer_literal_ranges
           tokenizer_hf_glm chat_template chat_template_fuzz chat_prompt gguf_parse gguf_fuzz)
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
# Build only the executables of the chosen tests (a plain `meson test` would build everything).
mapfile -t targets < <(meson introspect --tests "$build" | python3 -c '
import json, os, sys
build, names = os.path.abspath(sys.argv[1]), sys.argv[2:]
for t in json.load(sys.stdin):
    chosen = t["name"] in names if names else "unit" in t["suite"] or any(s.endswith(":unit") for s in t["suite"])
    exe = os.path.abspath(t["cmd"][0])
    if chosen and exe.startswith(build + os.sep):
        print(os.path.relpath(exe, build))
' "$build" "${tests[@]}" | sort -u)
((${#targets[@]})) || { echo "sanitize: no such tests: ${tests[*]}" >&2; exit 2; }
ninja -C "$build" "${targets[@]}"
if ((${#tests[@]})); then
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 "${tests[@]}"
else
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 --suite unit
fi
