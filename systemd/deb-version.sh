#!/usr/bin/env bash
# The Debian package's version: the project's one version (pyproject.toml, nowhere else),
# then a build suffix that every later build sorts above, so that installing a rebuild upgrades
# (dpkg --compare-versions): "+b" and the build's UTC time to the second.
#
#   bash systemd/deb-version.sh          ->  0.1.0+b20261126102233
#
# BOOKIE_BUILD_SUFFIX replaces the time (e.g. a CI build number: it must grow, too).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$src/pyproject.toml" | head -n 1)
[ -n "$version" ] || { echo "deb-version: no version in pyproject.toml" >&2; exit 1; }
echo "${version}+b${BOOKIE_BUILD_SUFFIX:-$(date -u +%Y%m%d%H%M%S)}"
