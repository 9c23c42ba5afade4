#!/usr/bin/env bash
# FedCOG Table 1 on real Fashion-MNIST (configs/paper/fedcog_fmnist_niid{1,2}*.toml): FedAvg for 70 rounds, and
# FedCOG from the FedAvg run's state after round 49 (the paper's "50 FedAvg rounds, then 20 FedCOG rounds").
# Every run resumes where it stopped: run the script again after an interruption. About 35 min per FedAvg run and
# 35 min per FedCOG continuation on 2 CPU cores (30 s / 95 s per round).
#   bash scripts/fedcog-experiments.sh [SEEDS...]      (default: seed 0; the report uses 0 and 1)
#   PARTS=niid2 bash scripts/fedcog-experiments.sh 0    (one partition: run the two side by side on 2 cores, each
#                                                        with OMP_NUM_THREADS=1)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-results}/runs  # keep long runs outside the work tree: SHUFFLEFL_RUNS=~/.cache/shufflefl
SEEDS=${*:-0}
PARTS=${PARTS:-niid1 niid2}

source scripts/resumable.sh  # run OUT ARGS...: skip if done, resume if started, else start

for seed in $SEEDS; do
  for part in $PARTS; do
    base=$RUNS/fedcog_fmnist_${part}_seed${seed}
    run "$base" --config configs/paper/fedcog_fmnist_${part}.toml --set train.seed=$seed
    run "${base}_fedcog" --config configs/paper/fedcog_fmnist_${part}_fedcog.toml --set train.seed=$seed \
      --init-from "$base/checkpoint_round49.pt"
  done
done
