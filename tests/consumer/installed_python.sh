#!/usr/bin/env bash
# The Python package from an installed tree: `cmake --install` put chorus/ under PYTHONDIR (a
# site-packages directory relative to PREFIX) with an RPATH that finds libchorus.so.0 in the
# prefix's library directory, even after the tree is moved.
#
#   tests/consumer/installed_python.sh PREFIX PYTHONDIR WORKDIR
#
# Copies PREFIX to WORKDIR/moved and, from WORKDIR, runs /usr/bin/python3 -m chorus.demo with
# PYTHONPATH naming the moved package: the seed's shape and byte lines must come out.
set -euo pipefail

prefix=$1
pythondir=$2
work=$3

fail() {
  echo "installed_python.sh: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work"
cp -a "$prefix" "$work/moved"
moved=$(cd "$work/moved" && pwd)
package=$moved/$pythondir/chorus
ls "$package"/_chorus*.so > /dev/null 2>&1 || fail "no extension module in $package"
[ -f "$package/py.typed" ] && [ -f "$package/_chorus.pyi" ] || fail "no type stubs in $package"
cd "$work"
PYTHONPATH=$moved/$pythondir /usr/bin/python3 -m chorus.demo --reps 20 > demo.out 2> demo.err || {
  cat demo.err >&2
  fail "python3 -m chorus.demo failed"
}
cat demo.out
grep -qx "Local result shapes: replicated (8,), reduce-scatter (2,), gathered (8,)" demo.out ||
  fail "no shape line"
grep -qx "Idealized ring bytes per rank: 48.0 24.0" demo.out || fail "no modeled byte line"
grep -qx "Measured ring bytes per rank: 48.0 24.0" demo.out || fail "no measured byte line"
where=$(PYTHONPATH=$moved/$pythondir /usr/bin/python3 -c 'import chorus; print(chorus.__file__)')
[ "$where" = "$package/__init__.py" ] || fail "imported chorus from $where, not $package"
echo "installed python package: chorus.demo from $package"
