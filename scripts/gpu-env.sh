# Sourced by the GPU machine's scripts (gpu-build-test.sh, gpu-scenarios.sh), never run: the
# part they share. It moves to the repository root and sets
#   OUT     where logs and tables go (default ./gpu-out; created)
#   BUILD   the meson build directory (default build-gpu)
#   MODEL   the default model file when its pieces were carried (.gpu-model*/model.partNN),
#           else $TANDEM_GPU_MODEL, else empty
# unpacks the carried Debian packages (.gpu-deps/*.deb, from scripts/gpu-deps.sh) into a
# private prefix and points pkg-config, Boost and the linkers at it, writes $OUT/machine.txt,
# and defines step, gpu_configure (meson setup once, -Dcuda=enabled, release) and
# gpu_build TARGET... (ninja on those of the targets this configuration has).
#
# That machine has Boost's headers but no compiled Boost libraries and no PCRE2 headers:
# Debian 12's packages of what the project's configure step needs are carried in
# .gpu-deps/ (*.deb, git-ignored; scripts/gpu-deps.sh fills it) and unpacked into a private
# prefix, never into /.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# ARCH90_ONLY=1: sm_90a machine code only (halves the CUDA compile). It edits the copy's
# kernels/*/meson.build (never commit that), so every call of a lease must set it: a call
# without it would restore both architectures and rebuild every CUDA object.
if [ -n "${ARCH90_ONLY:-}" ]; then
  sed -i '/compute_121a/d' kernels/exl3/cuda/meson.build
  sed -i "/compute_121a/d; s/code=sm_90a',\$/code=sm_90a']/" kernels/cuda/meson.build
fi
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
PREFIX=/tmp/tandem-gpu-deps
export PATH=/usr/local/cuda/bin:$PATH

if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
  if [ ! -d "$PREFIX/usr" ]; then
    for f in .gpu-deps/*.deb; do dpkg -x "$f" "$PREFIX"; done
    # The .pc files name /usr; point them at the prefix.
    sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|" "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  fi
  export PKG_CONFIG_PATH=$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export BOOST_ROOT=$PREFIX/usr BOOST_INCLUDEDIR=$PREFIX/usr/include
  export BOOST_LIBRARYDIR=$PREFIX/usr/lib/x86_64-linux-gnu
  # Gloo (transport.gloo, and transport.nccl's rendezvous) has no .pc file: its headers and
  # its library (in usr/lib, not the multiarch folder) are found through the compiler's paths.
  export CPATH=$PREFIX/usr/include${CPATH:+:$CPATH}
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/usr/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  command -v pkg-config >/dev/null || { export PATH=$PATH:$PREFIX/usr/bin; ln -sf pkgconf "$PREFIX/usr/bin/pkg-config"; }
fi

# The default model (98 MB) travels in pieces over back-to-back calls (64 MiB each, with
# everything else carried): .gpu-model*/model.partNN (scripts/gpu-model-pieces.sh makes
# two) are collected in /tmp and joined, in name order, once their sha256 is the model's.
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ls .gpu-model*/model.part* >/dev/null 2>&1; then
  cp .gpu-model*/model.part* /tmp/
  if [ ! -f /tmp/tandem-model.gguf ] || ! echo "$MODEL_SHA  /tmp/tandem-model.gguf" | sha256sum -c --quiet 2>/dev/null; then
    cat /tmp/model.part* > /tmp/tandem-model.gguf
  fi
  if echo "$MODEL_SHA  /tmp/tandem-model.gguf" | sha256sum -c --quiet 2>/dev/null; then
    TANDEM_GPU_MODEL=/tmp/tandem-model.gguf
  else
    echo "model pieces so far ($(ls /tmp/model.part* | wc -l)) do not make the model (sha256 $MODEL_SHA) yet"
  fi
fi
MODEL=${TANDEM_GPU_MODEL:-}
model_opt=()
[ -n "$MODEL" ] && model_opt=(-Dtest_model="$MODEL")
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1; } \
  > "$OUT/machine.txt" 2>&1

step() { echo "== $*"; }

gpu_configure() {
  # The GPU machine reaches no network: meson takes the wraps' pinned archives (xgrammar's
  # sdist) from subprojects/packagecache, filled from the carried .gpu-deps.
  if ls .gpu-deps/*.tar.gz >/dev/null 2>&1; then
    mkdir -p subprojects/packagecache
    cp -n .gpu-deps/*.tar.gz subprojects/packagecache/
  fi
  if [ ! -f "$BUILD/build.ninja" ]; then
    # g++ 13 there includes less transitively than g++ 12 here (<cstdint>).
    CXXFLAGS="${CXXFLAGS:-} -include cstdint" meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release "${model_opt[@]}" > "$OUT/configure.log" 2>&1 \
      || { tail -40 "$OUT/configure.log"; exit 1; }
  fi
}

# Builds those of the given targets this configuration has, all it can (-k 0: one target
# that fails to build costs only the tests that need it); on failure prints the errors and
# returns 1.
gpu_build() {
  local have=() t
  for t in "$@"; do ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1 && have+=("$t"); done
  ninja -C "$BUILD" -j"$(nproc)" -k 0 "${have[@]}" > "$OUT/build.log" 2>&1 \
    || { grep -E "error|FAILED" "$OUT/build.log" | head -40; return 1; }
}
