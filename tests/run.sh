#!/usr/bin/env bash
# The README's test command: set up a bare machine, then run the default suite.
# The long crash rounds are opt-in:  bash tests/run.sh -m crash
# BOOKIE_SKIP_SETUP=1 skips the setup (a machine already set up); PYTHON picks the interpreter;
# BOOKIE_TEST_WORKERS=N the number of test processes (default 2; 0: one, pytest's own way).
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${BOOKIE_TEST_WORKERS:-2}  # test processes: see below
case $workers in ''|*[!0-9]*) echo "run.sh: BOOKIE_TEST_WORKERS must be a whole number, got '$workers'" >&2; exit 2 ;; esac
# Only tests/unit asked for (every path argument under it): the light setup, no Spark, no server.
setup=()
paths=0 unit=0
for arg in "$@"; do
  case $arg in
    -*) ;;
    tests/unit|tests/unit/*|./tests/unit|./tests/unit/*) paths=$((paths + 1)); unit=$((unit + 1)) ;;
    *) [ -e "$arg" ] || [ -e "${arg%%::*}" ] && paths=$((paths + 1)) ;;
  esac
done
[ $paths -gt 0 ] && [ $paths = $unit ] && setup=(--unit)
[ "${BOOKIE_SKIP_SETUP:-0}" = 1 ] || bash tests/setup.sh "${setup[@]}"
# One -q whoever asks: pytest's -qq would drop the final "N passed" line.
quiet=(-q)
# Two test processes (pytest-xdist), a test file's tests in one of them (--dist loadfile: a
# module's bookies and fixtures are shared by its tests): about half the default suite's time
# is waiting, not CPU.  BOOKIE_TEST_WORKERS=N picks another count (0: one process); a -n, -p
# no:xdist or -m of the caller's keeps its own way (the opt-in -m rounds run one at a time).
prev=
for arg in "$@"; do
  case $arg in
    -q|--quiet) quiet=() ;;
    -n|-n*|--numprocesses|--numprocesses=*|-m|-m*) workers=0 ;;
    no:xdist) [ "$prev" = -p ] && workers=0 ;;
    -pno:xdist) workers=0 ;;
  esac
  prev=$arg
done
parallel=()
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --dist loadfile)
exec "${PYTHON:-python3}" -m pytest "${quiet[@]}" "${parallel[@]}" "$@"
