#!/usr/bin/env bash
# What the installed shared libraries export: the public API of include/chorus/ and nothing of
# the library's own namespaces (chorus::internal, chorus::model, chorus::reduce).
#
#   tests/consumer/exports.sh PREFIX [LIBDIR]    # LIBDIR: lib (CMAKE_INSTALL_LIBDIR)
set -euo pipefail

prefix=$(cd "$1" && pwd)
libdir=$prefix/${2:-lib}

fail() {
  echo "exports.sh: $*" >&2
  exit 1
}

command -v nm > /dev/null || fail "nm not found (apt-get install binutils)"
checked=0
for lib in "$libdir"/libchorus.so "$libdir"/libchorus_mpi.so; do
  [ -e "$lib" ] || continue
  [ "$lib" = "$libdir/libchorus.so" ] || [ -e "$libdir/libchorus_mpi.so" ] || continue
  symbols=$(nm -DC --defined-only "$lib")
  leaked=$(grep -E 'chorus::(internal|model|reduce|cli)::' <<< "$symbols" || true)
  if [ -n "$leaked" ]; then
    echo "$leaked" | head -20 >&2
    fail "$(basename "$lib") exports $(wc -l <<< "$leaked") symbols of chorus's own namespaces"
  fi
  for wanted in 'chorus::Communicator::AllReduce(' 'chorus::Communicator::Create(' \
                'chorus::CreateLocalGroup(' 'chorus::OpenStore(' 'chorus::Status::ToString' \
                'typeinfo for chorus::Store'; do
    grep -qF "$wanted" <<< "$symbols" || fail "$(basename "$lib") does not export $wanted"
  done
  checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || fail "no libchorus.so under $libdir"
echo "exports.sh: $checked shared libraries export the public API only"
