#!/usr/bin/env bash
# Install shufflefl with its test extra (and the real test data), then run the whole test suite.
# All of it, the slow tests too (-m ""; a bare `pytest` leaves them out). Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh test
bash scripts/test-data.sh
"$PYTHON" -m pytest -q -m "" "$@"
