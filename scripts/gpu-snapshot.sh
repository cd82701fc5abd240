#!/usr/bin/env bash
# Packs the committed tree (HEAD) into .gpu-src/src.tar.gz (git-ignored) for the GPU machine,
# so a device call builds exactly a commit even while the working tree has edits in flight.
# On the GPU machine, scripts/gpu-unpack.sh (from the same tarball's tree) unpacks it into
# /tmp/src with the carried .gpu-deps and .gpu-model* linked in.
#
#   bash scripts/gpu-snapshot.sh      # here, then carry .gpu-src with the call
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-src
git archive --format=tar.gz -o .gpu-src/src.tar.gz HEAD
git rev-parse --short HEAD > .gpu-src/COMMIT
echo "snapshot of $(cat .gpu-src/COMMIT): $(du -h .gpu-src/src.tar.gz | cut -f1)"
