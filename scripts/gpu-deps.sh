#!/usr/bin/env bash
# Fills .gpu-deps/ with the Debian 12 packages scripts/gpu-build-test.sh unpacks on the GPU
# machine, which has Boost's headers but no compiled Boost libraries, no PCRE2 headers and no
# pkg-config. Run here (it reaches Debian's mirrors), then carry .gpu-deps in the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  libboost1.81-dev libboost-atomic1.81-dev libboost-atomic1.81.0
  libboost-container1.81-dev libboost-container1.81.0
  libboost-filesystem1.81-dev libboost-filesystem1.81.0 libboost-json1.81-dev libboost-json1.81.0
  libboost-program-options1.81-dev libboost-program-options1.81.0
  libboost-system1.81-dev libboost-system1.81.0 libboost-test1.81-dev libboost-test1.81.0
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libssl-dev libssl3 libxxhash-dev pkgconf pkgconf-bin libpkgconf3
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
)
mkdir -p .gpu-deps
# The wraps' pinned archives (subprojects/*.wrap: xgrammar's PyPI sdist), which meson
# would download at configure time: the GPU machine has no network.
if ! ls subprojects/packagecache/xgrammar-*.tar.gz >/dev/null 2>&1; then
  meson=$(command -v meson || echo .venv/bin/meson)
  "$meson" subprojects download xgrammar
fi
cp subprojects/packagecache/*.tar.gz .gpu-deps/
cd .gpu-deps
apt-get download "${packages[@]}"
echo "gpu-deps: $(ls ./*.deb | wc -l) packages and $(ls ./*.tar.gz | wc -l) wrap archives in .gpu-deps/"
