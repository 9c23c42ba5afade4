#!/usr/bin/env bash
# One short device benchmark (about 3 minutes of an H100): fleets of FedAvg runs, DynaFed's synthesis, a DDPM, as
# FLOP/s and shares of a measured matrix-product peak (benchmarks/gpu_bench.py). --dry: tiny, on the CPU.
#   bash scripts/gpu-bench.sh [--dry] [--out FILE]    then: bash scripts/gpu-campaign.sh plan --rates FILE
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" benchmarks/gpu_bench.py "$@"
