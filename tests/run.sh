#!/usr/bin/env bash
# The README's test command: set up a bare machine, then run the default suite.
# The long crash rounds are opt-in:  bash tests/run.sh -m crash
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
exec python3 -m pytest -q "$@"
