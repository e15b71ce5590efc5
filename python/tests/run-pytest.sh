#!/usr/bin/env bash
# ctest's python_tests: pytest over python/tests with the build tree's package on PYTHONPATH.
#   python/tests/run-pytest.sh PYTHON [PYTEST ARGS...]
# Exit 5 (pytest collected no tests) is a failure here: a suite that found nothing to run has
# lost its tests, it has not passed them.
set -uo pipefail
python=$1
shift
"$python" -m pytest -q -p no:cacheprovider "$(dirname "$0")" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-pytest.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
