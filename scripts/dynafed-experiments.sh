#!/usr/bin/env bash
# DynaFed Table 1 on real Fashion-MNIST (configs/paper/dynafed_fmnist_a001*.toml): FedAvg and DynaFed, 80 clients,
# 40% participation, 200 rounds, ConvNet-3, client Adam lr 1e-3, Dirichlet alpha in {0.01, 0.04, 0.16}.
# Every run resumes where it stopped: run the script again after an interruption (or a SIGTERM).
#   bash scripts/dynafed-experiments.sh [ALPHAS...]          (default: 0.01)
#   ITERATIONS=100 bash scripts/dynafed-experiments.sh 0.01  (a reduced synthesis, N = 100 instead of 1000)
# Paper scale is GPU work: ConvNet-3 on 32 clients a round and N = 1000 unrolled matching steps are hours on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-results}/runs  # keep long runs outside the work tree: SHUFFLEFL_RUNS=~/.cache/shufflefl
ALPHAS=${*:-0.01}
ITERATIONS=${ITERATIONS:-1000}

run() {  # run OUT ARGS...: finished -> skip, started -> resume, else start
  local out=$1; shift
  if [ -f "$out/summary.json" ]; then echo "$out: done"; return; fi
  if [ -f "$out/config.json" ]; then "$PYTHON" -m fl.run --resume "$out" --quiet; return; fi
  "$PYTHON" -m fl.run "$@" --out "$out" --quiet
}

for alpha in $ALPHAS; do
  tag=a${alpha/./}
  run $RUNS/dynafed_fmnist_${tag}_fedavg --config configs/paper/dynafed_fmnist_a001.toml --set data.alpha=$alpha
  run $RUNS/dynafed_fmnist_${tag}_dynafed_n${ITERATIONS} --config configs/paper/dynafed_fmnist_a001_dynafed.toml \
    --set data.alpha=$alpha --set method.iterations=$ITERATIONS
done
