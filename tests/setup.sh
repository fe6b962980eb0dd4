#!/usr/bin/env bash
# Test setup for a bare machine: Debian's ZooKeeper server (the real one the metadata tests start
# on 127.0.0.1), a Java runtime for ZooKeeper and Spark (installed only if `java` is missing),
# Redis (the benchmark report's peer), promtool (the alert rules' tests),
# and this package with its test and spark extras.  Idempotent: quick when all is present.
#   bash tests/setup.sh          everything the default suite and the opt-in rounds need
#   bash tests/setup.sh --unit   only the test extra: tests/unit needs no server, JRE or Spark
# PYTHON picks the interpreter to install into (python3 by default), as in tests/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
unit_only=0
case ${1:-} in
  "") ;;
  --unit) unit_only=1 ;;
  *) echo "setup: unknown argument '$1' (usage: tests/setup.sh [--unit])" >&2; exit 2 ;;
esac
# The active virtual environment's interpreter unless PYTHON names one: `python3` alone could be
# another one earlier on PATH. Never the system's: Debian's refuses pip outside a venv, and the
# README's set-up makes one.
py=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ] && py=$VIRTUAL_ENV/bin/python
if ! "$py" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
  echo "setup: $py is not in a virtual environment; make and activate one first (README, Set up)" >&2
  exit 2
fi
# Byte-compile the package in place (an editable install is not compiled by pip): every bookie
# a test starts runs five interpreters, and each compiled all of its modules from source at
# each start wherever PYTHONDONTWRITEBYTECODE is set (CI's environment sets it): about 0.4 s of
# every bookie start. Python still reads the cache with that variable set, and ignores a cache
# older than its source.
compile_package() {
  "$py" -m compileall -q -j 0 -x '/\.(venv|git)/' . >/dev/null || echo "setup: byte-compiling the package failed; tests run from source" >&2
}
# A C compiler and Python's headers: the install compiles bookie.compiled's modules with
# Cython (setup.py), and tests/unit/test_compiled.py runs their tests both ways. The pip
# installs below build them again once these are here.
need_cc=()
command -v cc >/dev/null 2>&1 || need_cc+=(gcc)
"$py" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need_cc+=(python3-dev)
if [ ${#need_cc[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_cc[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_cc[@]}" >/dev/null
fi
if [ $unit_only = 1 ]; then
  echo "setup: tests/unit only: the test extra (no Debian packages, no Spark)"
  "$py" -m pip install -q --disable-pip-version-check -e '.[test]'
  compile_package
  exit 0
fi

need_apt=()
dpkg -s zookeeper >/dev/null 2>&1 || need_apt+=(zookeeper)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
# Redis (server, redis-benchmark), the peer `bookie bench report` measures the bookie against.
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || need_apt+=(redis-tools)
# The fault-injection harness's network faults (bookie.testing.nemesis): namespaces, nftables, tc.
{ command -v ip && command -v tc; } >/dev/null 2>&1 || need_apt+=(iproute2)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
# systemd-analyze checks the appliance's unit file (no running systemd needed).
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# lintian checks the Debian package in the package round (-m package); systemd-nspawn boots a
# real systemd in a container there, with the package's unit as its goal.
command -v lintian >/dev/null 2>&1 || need_apt+=(lintian)
command -v systemd-nspawn >/dev/null 2>&1 || need_apt+=(systemd-container)
# promtool (Debian's prometheus package) runs the alert rules' unit tests (docs/prometheus/).
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
# Graphviz's dot renders docs/images/architecture.dot (a test checks the source still renders).
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
# strace injects a SIGKILL at a chosen fdatasync (test_journal_restart_sync.py).
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The spark extra (pyspark, pyarrow, about 660 MB) for the Spark source and sink tests; they need
# a JRE too (java above), which Spark starts itself.
"$py" -m pip install -q --disable-pip-version-check -e '.[test,spark]'
compile_package
