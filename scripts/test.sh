#!/usr/bin/env bash
# The README's test command: installs what the tests need, builds tandem, fetches the
# default model, runs every CPU suite (unit, model, e2e; gpu tests skip without a GPU)
# and ends with one line "N passed, N failed".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${TANDEM_BUILD_DIR:-build}

bash scripts/setup.sh
# shellcheck disable=SC1091
source .venv/bin/activate

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release
fi
ninja -C "$build"
"$build/cli/tandem" pull >/dev/null

set +e
meson test -C "$build" --print-errorlogs --num-processes 2 "$@"
meson_rc=$?
set -e

python3 scripts/count_results.py "$build/meson-logs/testlog.json"
counts_rc=$?
[ $meson_rc -eq 0 ] && [ $counts_rc -eq 0 ]
