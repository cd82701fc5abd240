#!/usr/bin/env bash
# On the GPU machine, from the carried checkout's root: unpacks .gpu-src/src.tar.gz (made by
# scripts/gpu-snapshot.sh) into /tmp/src and links the carried .gpu-deps, .gpu-model* and
# .gpu-exllamav3 into it. Only files whose contents changed since the last unpack are
# rewritten (git archive stamps every file with the commit time, older than the objects an
# earlier call built there, so ninja would miss the changes otherwise). Then: cd /tmp/src.
set -euo pipefail
root=$PWD
[ -f .gpu-src/src.tar.gz ] || { echo "no .gpu-src/src.tar.gz: run scripts/gpu-snapshot.sh and carry .gpu-src"; exit 1; }
rm -rf /tmp/src-new && mkdir -p /tmp/src-new /tmp/src
tar xzf .gpu-src/src.tar.gz -C /tmp/src-new
changed=0
while IFS= read -r -d '' f; do
  rel=${f#/tmp/src-new/}
  if ! cmp -s "$f" "/tmp/src/$rel"; then
    mkdir -p "$(dirname "/tmp/src/$rel")" && cp -p "$f" "/tmp/src/$rel" && touch "/tmp/src/$rel"
    changed=$((changed + 1))
  fi
done < <(find /tmp/src-new -type f -print0)
for d in .gpu-deps .gpu-model* .gpu-exllamav3; do [ -e "$root/$d" ] && ln -sfn "$root/$d" "/tmp/src/$d"; done
echo "unpacked $(cat .gpu-src/COMMIT 2>/dev/null) into /tmp/src ($changed files changed)"
