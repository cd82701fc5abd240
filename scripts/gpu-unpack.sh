#!/usr/bin/env bash
# On the GPU machine, from the carried checkout's root: unpacks .gpu-src/src.tar.gz (made by
# scripts/gpu-snapshot.sh) into /tmp/src, keeping an earlier build there, and links the
# carried .gpu-deps, .gpu-model* and .gpu-exllamav3 into it. Then: cd /tmp/src && ...
set -euo pipefail
root=$PWD
[ -f .gpu-src/src.tar.gz ] || { echo "no .gpu-src/src.tar.gz: run scripts/gpu-snapshot.sh and carry .gpu-src"; exit 1; }
mkdir -p /tmp/src
find /tmp/src -mindepth 1 -maxdepth 1 ! -name 'build-gpu' -exec rm -rf {} +
tar xzf .gpu-src/src.tar.gz -C /tmp/src
for d in .gpu-deps .gpu-model* .gpu-exllamav3; do [ -e "$root/$d" ] && ln -sfn "$root/$d" "/tmp/src/$d"; done
echo "unpacked $(cat .gpu-src/COMMIT 2>/dev/null) into /tmp/src"
