#!/usr/bin/env bash
# The pkg-config consumer: builds consumer.cpp against an installed chorus with nothing but
# pkg-config and the compiler, once on the shared library and once on the static one, and runs
# both. Exits non-zero, saying why, when a link or a check fails.
#
#   tests/consumer/pkg_config.sh PREFIX WORKDIR [LIBDIR [CXX]]    # LIBDIR: lib (CMAKE_INSTALL_LIBDIR)
#
# Shared: `pkg-config --cflags --libs chorus`; -lchorus picks libchorus.so, and the program
# must load libchorus.so.N from PREFIX (found through its RPATH) and not need libsodium itself.
# Static: `pkg-config --static --libs chorus` between -Wl,-Bstatic and -Wl,-Bdynamic, so that
# -lchorus and -lsodium (from Requires.private) are the archives; the program must need neither
# .so, which proves the static link line from chorus.pc is complete.
set -euo pipefail

prefix=$(cd "$1" && pwd)
work=$2
libdir_name=${3:-lib}
cxx=${4:-c++}
here=$(cd "$(dirname "$0")" && pwd)

fail() {
  echo "pkg_config.sh: $*" >&2
  exit 1
}

command -v pkg-config > /dev/null || fail "pkg-config not found (apt-get install pkg-config)"
rm -rf "$work"
mkdir -p "$work"
# Prepended to pkg-config's own path, which still provides libsodium.pc.
export PKG_CONFIG_PATH="$prefix/$libdir_name/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pc=$(pkg-config --path chorus) || fail "pkg-config finds no chorus under $prefix"
case "$pc" in
  "$prefix"/*) ;;
  *) fail "pkg-config found $pc instead of the chorus under $prefix" ;;
esac
echo "chorus $(pkg-config --modversion chorus) from $pc"
libdir=$(pkg-config --variable=libdir chorus)
# chorus.pc finds its prefix from its own place, so the libdir it names must be this one.
libdir=$(cd "$libdir" && pwd) || fail "chorus.pc's libdir does not exist"
[ "$libdir" = "$prefix/$libdir_name" ] || fail "libdir is $libdir, not $prefix/$libdir_name"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

flags=$(pkg-config --cflags --libs chorus)
echo "shared: $cxx -std=c++20 consumer.cpp $flags"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++20 "$here/consumer.cpp" -o "$work/consumer_shared" $flags -Wl,-rpath,"$libdir"
# Captured first: `grep -q` stops reading at its match, and under pipefail the writer's
# SIGPIPE would fail the check.
shared_needs=$(needed "$work/consumer_shared")
shared_loads=$(ldd "$work/consumer_shared")
grep -q '^libchorus\.so\.[0-9]' <<<"$shared_needs" ||
  fail "consumer_shared does not load libchorus.so.N: $(xargs <<<"$shared_needs")"
! grep -q libsodium <<<"$shared_needs" ||
  fail "consumer_shared needs libsodium itself, though the shared chorus keeps it private"
grep -q "libchorus\.so\.[0-9.]* => $libdir/libchorus\.so" <<<"$shared_loads" ||
  fail "consumer_shared does not load libchorus from $libdir: $shared_loads"
"$work/consumer_shared"

static_flags=$(pkg-config --static --libs chorus)
echo "static: $cxx -std=c++20 consumer.cpp $(pkg-config --cflags chorus) -Wl,-Bstatic" \
  "$static_flags -Wl,-Bdynamic"
# shellcheck disable=SC2046,SC2086
"$cxx" -std=c++20 "$here/consumer.cpp" -o "$work/consumer_static" $(pkg-config --cflags chorus) \
  -Wl,-Bstatic $static_flags -Wl,-Bdynamic
! needed "$work/consumer_static" | grep -Eq 'libchorus|libsodium' ||
  fail "consumer_static is not static in chorus and libsodium: $(needed "$work/consumer_static" | xargs)"
"$work/consumer_static"
