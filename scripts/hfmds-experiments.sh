#!/usr/bin/env bash
# FMDS / HFMDs against FedAvg on real Fashion-MNIST with HFMDs' protocol (configs/hfmds_fmnist_dir001*.toml):
# 20 clients, HFMDs CNN, batch 10, SGD lr 0.005 + momentum 0.9 + weight decay 5e-4, 30 rounds, synthesis at round
# 20. Rounds 1-19 are FedAvg in every arm, so HFMDs runs from round 1 (it keeps prototypes from round 1) and keeps
# its state after round 19; FedAvg and FMDS start from that state (--init-from; tested equal to running from 1).
# Every run resumes where it stopped: run the script again after an interruption.
#   bash scripts/hfmds-experiments.sh [PARTITION]   PARTITION: dir001 (default, Dirichlet 0.01) or shards (2 classes)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-results}/runs  # keep long runs outside the work tree: SHUFFLEFL_RUNS=~/.cache/shufflefl
PART=${1:-dir001}
EXTRA=()
[ "$PART" = shards ] && EXTRA=(--set 'data.partition="shards"')
R=$RUNS/hfmds_fmnist_${PART}

source scripts/resumable.sh  # run OUT ARGS...: skip if done, resume if started, else start

run ${R}_hfmds --config configs/hfmds_fmnist_dir001_hfmds.toml "${EXTRA[@]}" &
while [ ! -f ${R}_hfmds/checkpoint_round19.pt ]; do sleep 30; done
run ${R}_fedavg --config configs/hfmds_fmnist_dir001.toml "${EXTRA[@]}" --init-from ${R}_hfmds/checkpoint_round19.pt &
run ${R}_fmds --config configs/hfmds_fmnist_dir001_fmds.toml "${EXTRA[@]}" --init-from ${R}_hfmds/checkpoint_round19.pt
wait
