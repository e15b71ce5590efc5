#!/usr/bin/env bash
# `chorus demo --plot` from an installed tree: the binary must find plot_demo.py where it was
# installed (PREFIX/share/chorus), relative to itself, even after the tree is moved.
#
#   tests/consumer/installed_demo.sh PREFIX WORKDIR
#
# Copies PREFIX to WORKDIR/moved, runs WORKDIR/moved/bin/chorus demo --plot WORKDIR/plots and
# checks that the moved copy of the script drew the three PNG figures. Exit 77 (skipped) when
# /usr/bin/python3 has no matplotlib.
set -euo pipefail

prefix=$1
work=$2

fail() {
  echo "installed_demo.sh: $*" >&2
  exit 1
}

if ! /usr/bin/python3 -c 'import matplotlib' 2> /dev/null; then
  echo "SKIPPED: /usr/bin/python3 has no matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
cp -a "$prefix" "$work/moved"
moved=$(cd "$work/moved" && pwd)
[ -f "$moved/share/chorus/plot_demo.py" ] || fail "plot_demo.py is not installed in share/chorus"

env -u CHORUS_PLOT_SCRIPT "$moved/bin/chorus" demo --reps 20 --plot "$work/plots" \
  > "$work/demo.out" 2> "$work/demo.err" || {
  cat "$work/demo.err" >&2
  fail "chorus demo --plot failed"
}
cat "$work/demo.err"
grep -q "plotting with $moved/share/chorus/plot_demo.py" "$work/demo.err" ||
  fail "the figures were not drawn by $moved/share/chorus/plot_demo.py"
for png in panel1.png panel2.png table.png; do
  [ "$(head -c 8 "$work/plots/$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    fail "$work/plots/$png is missing or not a PNG"
done
echo "installed chorus demo --plot: panel1.png panel2.png table.png in $work/plots"
