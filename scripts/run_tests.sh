#!/usr/bin/env bash
# The whole suite, as `make test` runs it: unit and config tests on both cores (pytest-xdist), with beside them the
# integration tests marked `light` (they mostly wait: a rendezvous timeout, a missing peer; or run one-line
# refusals), then the other integration tests one at a time (each spawns 2+ ranks, which already fill both cores;
# two at once were slower: 26.5 min against 24 min). Prints each part's ten slowest tests and the total wall time at
# the end; exits non-zero if either part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export TRL_DS_TEST_TIMES="${TRL_DS_TEST_TIMES:-$PWD/test_times.jsonl}"  # each test's wall and CPU seconds (conftest.py)
rm -f "$TRL_DS_TEST_TIMES"
start=$(date +%s)
# tests/integration first and --dist loadgroup: one worker starts the xdist_group "waits" at once, the other the
# CPU-bound tests, so the waits overlap the unit tests instead of each other at the end.
"$PY" -m pytest -q -ra --durations=10 -n 2 --dist loadgroup -m "light or not integration" tests/integration tests/unit \
  tests/configs "$@"
unit=$?
unit_s=$(( $(date +%s) - start ))
"$PY" -m pytest -q -ra --durations=10 -m "not light" tests/integration "$@"
integration=$?
total_s=$(( $(date +%s) - start ))
printf 'make test: unit+configs+light %dm%02ds (exit %d), integration %dm%02ds (exit %d), total %dm%02ds\n' \
  $((unit_s / 60)) $((unit_s % 60)) "$unit" $(((total_s - unit_s) / 60)) $(((total_s - unit_s) % 60)) "$integration" \
  $((total_s / 60)) $((total_s % 60))
[ "$unit" = 0 ] && [ "$integration" = 0 ]
