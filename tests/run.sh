#!/usr/bin/env bash
# The README's test command: set up a bare machine, then run the default suite.
# The long crash rounds are opt-in:  bash tests/run.sh -m crash
# BOOKIE_SKIP_SETUP=1 skips the setup (a machine already set up); PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
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
for arg in "$@"; do
  case $arg in -q|--quiet) quiet=() ;; esac
done
exec "${PYTHON:-python3}" -m pytest "${quiet[@]}" "$@"
