#!/usr/bin/env bash
# Here (it reaches PyPI): the peer's pinned source for the GPU machine, which has no network.
# llama.cpp as vendored in the llama-cpp-python 0.3.36 source distribution on PyPI (llama.cpp
# commit 0c1e570), sha256-checked, trimmed to what the CUDA build of llama-bench,
# llama-batched-bench and llama-server needs (no models/, docs/, tests/, examples/: 176 MB
# -> ~8 MB xz), into .gpu-peers/ (git-ignored). Carry .gpu-peers in the device call.
#
#   bash bench/peers/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
version=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
url=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$version.tar.gz
sdist=${TANDEM_CACHE:-$HOME/.cache/tandem}/peers/llama_cpp_python-$version.tar.gz
mkdir -p "$(dirname "$sdist")" .gpu-peers
if ! echo "$sha  $sdist" | sha256sum -c --quiet >/dev/null 2>&1; then
  curl -fsSL -o "$sdist.part" "$url"
  echo "$sha  $sdist.part" | sha256sum -c --quiet || { echo "fetch.sh: sha256 mismatch for $url" >&2; exit 1; }
  mv "$sdist.part" "$sdist"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$sdist" -C "$tmp" "llama_cpp_python-$version/vendor/llama.cpp"
tar -C "$tmp/llama_cpp_python-$version/vendor" -cJf .gpu-peers/llama.cpp.tar.xz \
  --exclude=llama.cpp/models --exclude=llama.cpp/docs --exclude=llama.cpp/media --exclude=llama.cpp/tests \
  --exclude=llama.cpp/benches --exclude=llama.cpp/.github --exclude=llama.cpp/gguf-py \
  --exclude=llama.cpp/conversion --exclude=llama.cpp/examples llama.cpp
echo "llama.cpp from llama-cpp-python $version (sdist sha256 $sha), commit 0c1e570" > .gpu-peers/SOURCE
echo "peers: $(du -h .gpu-peers/llama.cpp.tar.xz | cut -f1) in .gpu-peers/"
