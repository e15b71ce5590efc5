#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages that building, testing and plotting chorus need.
#
#   scripts/install-deps.sh                 # the packages listed below
#   scripts/install-deps.sh clang-format    # ... plus extra packages for one task
#   scripts/install-deps.sh --check         # only report what is missing (exit 1 if anything is)
#
# Asks dpkg which packages are missing and installs only those, so a machine that already has
# everything costs one dpkg-query and no network. Installing needs root; without it the script
# names the missing packages and exits non-zero instead of half-installing.
set -euo pipefail

# Everything chorus needs from Debian 12. To add a dependency, add its package name here.
PACKAGES=(
  cmake
  g++
  make
  pkg-config
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libcli11-dev
  nlohmann-json3-dev
  python3
  python3-matplotlib
  python3-dev
  python3-numpy
  python3-pytest
  pybind11-dev
  libsodium-dev
  openmpi-bin
  libopenmpi-dev
  clang
  libclang-rt-14-dev
  iproute2
  nftables
)

check_only=0
extra=()
for arg in "$@"; do
  case "$arg" in
    --check) check_only=1 ;;
    -h | --help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "install-deps.sh: unknown option '$arg'" >&2
      exit 2
      ;;
    *) extra+=("$arg") ;;
  esac
done

# A package counts as present only when dpkg says it is fully installed ("install ok installed");
# half-configured or removed-but-with-config states count as missing.
missing=()
for pkg in "${PACKAGES[@]}" "${extra[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $check_only -eq 1 ]]; then
  echo "install-deps.sh: missing Debian packages: ${missing[*]}" >&2
  exit 1
fi

if [[ $(id -u) -ne 0 ]]; then
  {
    echo "install-deps.sh: these Debian packages are missing: ${missing[*]}"
    echo "Installing them needs root. Run one of:"
    echo "  sudo $0 ${extra[*]}"
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
  } >&2
  exit 1
fi

echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

# apt-get succeeds on some partial outcomes; confirm every package really is installed now.
still_missing=()
for pkg in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || still_missing+=("$pkg")
done
if [[ ${#still_missing[@]} -gt 0 ]]; then
  echo "install-deps.sh: still missing after apt-get install: ${still_missing[*]}" >&2
  exit 1
fi
