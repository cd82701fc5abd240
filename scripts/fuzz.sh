#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in their own build directory, replays every regression input
# (tests/fuzz/regressions/<harness>/), then fuzzes each harness for a bounded time from its
# seed corpus (tests/fuzz/corpus/<harness>/). Fails on any finding: a crash, a sanitizer
# report, a broken property, a leak, a timeout (10 s per input) or memory past 2 GiB.
#
#   scripts/fuzz.sh                         # every harness, 30 s each
#   scripts/fuzz.sh fuzz_http fuzz_gguf     # some of them
#   FUZZ_SECONDS=600 scripts/fuzz.sh        # longer runs (e.g. overnight: 3600)
#   FUZZ_BUILD_DIR=build-fuzz2 scripts/fuzz.sh
#
# New inputs libFuzzer finds go to $FUZZ_BUILD_DIR/fuzz-work/<harness> (never into the
# repository); a finding is written to $FUZZ_BUILD_DIR/fuzz-artifacts/<harness>/. Once it is
# fixed, copy it to tests/fuzz/regressions/<harness>/ so every later run replays it.
# The last line is "fuzz: N passed, N failed" (one count per harness); the same results go
# to $FUZZ_BUILD_DIR/fuzz-results.xml (JUnit) for scripts/count_results.py.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-30}
rm -f "$build/fuzz-results.xml"  # a stale file must not count when this run fails early
all=(fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_pipeline fuzz_http fuzz_safetensors fuzz_hf_model fuzz_exl3)
harnesses=("$@")
((${#harnesses[@]})) || harnesses=("${all[@]}")
for h in "${harnesses[@]}"; do
  [[ " ${all[*]} " == *" $h "* ]] || { echo "fuzz: unknown harness '$h' (known: ${all[*]})" >&2; exit 2; }
done

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs clang)" >&2; exit 2; }
# shellcheck disable=SC1091
[[ -f .venv/bin/activate ]] && source .venv/bin/activate
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ meson setup "$build" --buildtype=debugoptimized -Dcuda=disabled -Dfuzz=true \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
# Only what the harnesses need, plus the small plugins fuzz_pipeline validates against.
targets=()
for h in "${harnesses[@]}"; do targets+=("tests/fuzz/$h"); done
targets+=(plugins/fcfs/scheduler.fcfs.so plugins/local/transport.local.so plugins/gguf/weights.gguf.so)
ninja -C "$build" "${targets[@]}"

export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TANDEM_SOURCE_ROOT=$root
export TANDEM_PLUGIN_PATH=$root/$build/plugins
passed=0 failed=0
cases=()
for h in "${harnesses[@]}"; do
  exe=$build/tests/fuzz/$h
  work=$build/fuzz-work/$h
  artifacts=$build/fuzz-artifacts/$h
  log=$build/fuzz-logs/$h.log
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  ok=1
  regressions=(tests/fuzz/regressions/"$h"/*)
  if [[ -e ${regressions[0]} ]]; then
    if ! "$exe" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" >"$log" 2>&1; then
      ok=0
      echo "fuzz: $h: a regression input fails again:"
      tail -n 40 "$log"
    fi
  fi
  if ((ok)); then
    dict=()
    [[ -f tests/fuzz/$h.dict ]] && dict=(-dict="tests/fuzz/$h.dict")
    max_len=16384
    # A model directory holds a tokenizer.json and a few tensors: its seeds are 5-30 KB.
    [[ $h == fuzz_hf_model || $h == fuzz_exl3 ]] && max_len=65536
    if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 \
         -artifact_prefix="$artifacts/" "${dict[@]}" "$work" "tests/fuzz/corpus/$h" >>"$log" 2>&1; then
      runs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
      echo "fuzz: $h: ok, ${runs:-?} inputs in ${seconds} s"
    else
      ok=0
      echo "fuzz: $h: FINDING (inputs in $artifacts/, log $log):"
      grep -a -m1 -B2 -A30 'ERROR\|runtime error\|violated\|Timeout\|out-of-memory' "$log" || tail -n 40 "$log"
    fi
  fi
  if ((ok)); then
    passed=$((passed + 1))
    cases+=("<testcase classname=\"fuzz\" name=\"$h\"/>")
  else
    failed=$((failed + 1))
    cases+=("<testcase classname=\"fuzz\" name=\"$h\"><failure message=\"finding, see $log\"/></testcase>")
  fi
done
{
  echo "<testsuites><testsuite name=\"fuzz\" tests=\"$((passed + failed))\" failures=\"$failed\" errors=\"0\" skipped=\"0\">"
  printf '%s\n' "${cases[@]}"
  echo "</testsuite></testsuites>"
} >"$build/fuzz-results.xml"
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
