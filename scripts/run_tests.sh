#!/usr/bin/env bash
# The whole suite, as `make test` runs it, in two parts at once:
# - part 2, the integration tests one at a time (each spawns 2+ ranks, which already fill both cores; two at once
#   were slower: 26.5 min against 24 min), at normal priority: it is the longer part;
# - beside it, at the lowest priority, part 1: unit and config tests on both cores (pytest-xdist) with the integration tests
#   marked `light` (they mostly wait: a rendezvous timeout, a missing peer; or run one-line refusals) and the modules
#   marked `beside` (self-contained runs with no time bound). Part 2 leaves about a third of the two cores idle
#   (parents and torchrun start on one core), which part 1 fills.
# Part 1's output is printed when both are done. Prints each part's ten slowest tests and the wall times at the end;
# exits non-zero if either part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"  # a worktree measured with the main checkout's environment sets it
export TRL_DS_TEST_TIMES="${TRL_DS_TEST_TIMES:-$PWD/test_times.jsonl}"  # each test's wall and CPU seconds (conftest.py)
rm -f "$TRL_DS_TEST_TIMES"
part1=$(mktemp -d)
# part 1 is a session of its own: should this script end first (a CI timeout, ^C), its whole group ends with it
trap 'kill -- -"$(cat "$part1/pid" 2>/dev/null)" 2>/dev/null; rm -rf "$part1"' EXIT
trap 'exit 130' INT TERM
start=$(date +%s)
touch "$part1/started"
# tests/integration first and --dist loadgroup: one worker starts the xdist_group "waits" at once, the other the
# CPU-bound tests, so the waits overlap the unit tests instead of each other at the end.
# Part 1 takes only what part 2 leaves: nice 19, in its own session. Where the kernel groups processes by session
# for scheduling (autogroup: each launch part 2 starts is a session, and so a group, of its own), a process's nice
# weighs only inside its group, so the group's own nice is set too.
(
  setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' part1 \
    "$PY" -m pytest -q -ra --durations=10 -n 2 --dist loadgroup -m "light or beside or not integration" \
    tests/integration tests/unit tests/configs "$@" >"$part1/out" 2>&1 &
  echo $! >"$part1/pid"
  wait $!
  echo $? >"$part1/rc"
  echo $(( $(date +%s) - start )) >"$part1/s"
) &
"$PY" -m pytest -q -ra --durations=10 -m "not light and not beside" tests/integration "$@"
integration=$?
integration_s=$(( $(date +%s) - start ))
wait
echo "--- part 1 (unit + configs + light, beside part 2, at nice 19) ---"
cat "$part1/out"
unit=$(cat "$part1/rc") unit_s=$(cat "$part1/s")
total_s=$(( $(date +%s) - start ))
printf 'make test: unit+configs+light %dm%02ds (exit %d), integration %dm%02ds (exit %d), at once: total %dm%02ds\n' \
  $((unit_s / 60)) $((unit_s % 60)) "$unit" $((integration_s / 60)) $((integration_s % 60)) "$integration" \
  $((total_s / 60)) $((total_s % 60))
# DeepSpeed's CPU all-reduce never unlinks its shared-memory buffers (66 MB per rank per run, in memory-backed
# /dev/shm); trl_ds's ranks unlink their own at exit, but the ranks tests kill cannot: remove what this suite's runs
# left, or a machine that runs it often fills up (6 GB seen)
find /dev/shm -maxdepth 1 -name 'deepspeed_allreduce_buffer_*' -newer "$part1/started" -delete 2>/dev/null
[ "$unit" = 0 ] && [ "$integration" = 0 ]
