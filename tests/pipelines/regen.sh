#!/bin/sh
# Rewrites tests/pipelines/bad/*.expected from the current validator output.
# Usage: tests/pipelines/regen.sh [BUILD_DIR]   (default: build)
# Review `git diff tests/pipelines/bad` before committing: the golden files are the spec.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build="$root/$build" ;; esac
ninja -C "$build" tests/host/test_pipeline_golden
cd "$root"
TANDEM_SOURCE_ROOT="$root" TANDEM_REGEN_GOLDEN=1 \
  "$build/tests/host/test_pipeline_golden" --run_test=golden/bad_pipelines_give_exactly_the_expected_diagnostics
git -C "$root" status --short tests/pipelines/bad
