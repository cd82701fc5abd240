#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine to build and test tandem. Idempotent: a second run
# checks and skips in a second or two.
#
#   scripts/setup.sh            # apt packages (as root, or through sudo) + .venv
#   scripts/setup.sh --no-apt   # only the Python venv (.venv in the repository)
#
# Then:  . .venv/bin/activate && meson setup build && ninja -C build && meson test -C build
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
# requirements-dev.txt first, then any other tools/requirements-*.txt (e2e, fixtures...).
requirements=("$repo/tools/requirements-dev.txt")
for f in "$repo"/tools/requirements-*.txt; do
  [[ $f == "${requirements[0]}" || ! -f $f ]] || requirements+=("$f")
done

apt_packages=(
  build-essential pkg-config ninja-build git ca-certificates
  libboost1.81-dev libboost-program-options1.81-dev libboost-json1.81-dev
  libboost-test1.81-dev libboost-filesystem1.81-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev libpcre2-dev libxxhash-dev libssl-dev
  libgloo-dev  # transport.gloo: ranks over TCP (README: One model across ranks)
  clang libclang-rt-14-dev llvm-14  # scripts/fuzz.sh, scripts/sanitize.sh: libFuzzer, ASan, UBSan, symbolizer
  python3 python3-pip python3-venv
)

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

do_apt=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) do_apt=0 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $arg" ;;
  esac
done

# Prints the packages of apt_packages that are not installed.
missing_packages() {
  local p
  for p in "${apt_packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      printf '%s\n' "$p"
    fi
  done
}

install_apt() {
  command -v dpkg-query >/dev/null || die "dpkg-query not found: this script is for Debian 12"
  local missing
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]} == 0)); then
    say "apt: all ${#apt_packages[@]} packages already installed"
    return
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: install as root: ${missing[*]}"
    sudo=(sudo)
  fi
  say "apt: installing ${missing[*]}"
  say "apt: apt-get update"
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]} == 0)) || die "apt: still missing after install: ${missing[*]}"
}

# Debian's own interpreter when present: the venv must not depend on a user's pyenv.
base_python() {
  if [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3; else command -v python3; fi
}

setup_venv() {
  [[ -f ${requirements[0]} ]] || die "missing ${requirements[0]}"
  if [[ ! -x $venv/bin/python ]]; then
    local py
    py=$(base_python) || die "python3 not found (install python3 python3-venv)"
    say "venv: creating $venv with $py"
    "$py" -m venv "$venv"
  fi
  # Reinstall only when a pinned list changed since the last successful install.
  local stamp="$venv/.tandem-requirements.sha256" want names f
  want=$(sha256sum "${requirements[@]}" | sha256sum | cut -d' ' -f1)
  names=$(for f in "${requirements[@]}"; do printf 'tools/%s ' "$(basename "$f")"; done)
  names=${names% }
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
    say "venv: already installed: $names"
  else
    local args=()
    for f in "${requirements[@]}"; do args+=(-r "$f"); done
    say "venv: pip install $names"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "${args[@]}"
    printf '%s\n' "$want" > "$stamp"
  fi
  say "venv: $("$venv/bin/meson" --version | sed 's/^/meson /'), $("$venv/bin/python" -m pytest --version 2>&1)"
}

if ((do_apt)); then install_apt; else say "apt: skipped (--no-apt)"; fi
setup_venv
say "done. Next: . .venv/bin/activate && meson setup build && ninja -C build"
