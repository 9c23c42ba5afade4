#!/usr/bin/env bash
# Install shufflefl and run its main job. Extra arguments go to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh ""  # explicit: a sourced script would otherwise see the job's arguments
"$PYTHON" -m sims.quadratic "$@"
