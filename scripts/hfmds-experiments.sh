#!/usr/bin/env bash
# FMDS / HFMDs against FedAvg on real Fashion-MNIST with HFMDs' protocol (configs/hfmds_fmnist_dir001*.toml):
# 20 clients, HFMDs CNN, batch 10, SGD lr 0.005 + momentum 0.9 + weight decay 5e-4, $ROUNDS rounds (default 50),
# synthesis every T_d = 20 rounds (before rounds 20 and 40). Rounds 1-19 are FedAvg in every arm, so HFMDs runs from
# round 1 (it keeps prototypes from round 1) and keeps its state after round 19; FedAvg and FMDS start from that
# state (--init-from; tested equal to running from 1). FMDS only for the first seed: it equalled HFMDs to 0.0003 in
# every round. Seeds run one after the other. Every run resumes where it stopped: run the script again after an
# interruption. `python -m figures hfmds-fmnist --scale paper --force` reports the runs (figures/hfmds.py).
#   bash scripts/hfmds-experiments.sh [PARTITION] [SEEDS...]
#     PARTITION: dir001 (default, Dirichlet 0.01) or shards (2 classes); SEEDS: train.seed values (default 0)
#   ROUNDS=50 bash scripts/hfmds-experiments.sh shards 0 1 2
#   runs: $RUNS/hfmds_fmnist_${PARTITION}_seed${SEED}_{hfmds,fedavg,fmds,fedavg_alpha01} (the last: the lr/10 control)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-results}/runs  # keep long runs outside the work tree: SHUFFLEFL_RUNS=~/.cache/shufflefl
ROUNDS=${ROUNDS:-50}
PART=${1:-dir001}
shift || true
SEEDS=("$@")
[ ${#SEEDS[@]} -eq 0 ] && SEEDS=(0)
case $PART in
  dir001) EXTRA=() ;;
  shards) EXTRA=(--set 'data.partition="shards"') ;;
  *) echo "PARTITION must be dir001 or shards, not $PART" >&2; exit 2 ;;
esac

source scripts/resumable.sh  # run OUT ARGS...: skip if done, resume if started, else start

for seed in "${SEEDS[@]}"; do
  R=$RUNS/hfmds_fmnist_${PART}_seed${seed}
  SET=("${EXTRA[@]}" --set "train.seed=$seed" --set "train.rounds=$ROUNDS")
  run ${R}_hfmds --config configs/hfmds_fmnist_dir001_hfmds.toml "${SET[@]}" &
  hfmds=$!
  while [ ! -f ${R}_hfmds/checkpoint_round19.pt ]; do
    if ! kill -0 $hfmds 2>/dev/null; then  # it ended (or was done) without the round-19 state: nothing to start from
      wait $hfmds || true
      [ -f ${R}_hfmds/checkpoint_round19.pt ] && break
      echo "${R}_hfmds: no checkpoint_round19.pt" >&2; exit 1
    fi
    sleep 30
  done
  FROM=(--init-from ${R}_hfmds/checkpoint_round19.pt)
  run ${R}_fedavg --config configs/hfmds_fmnist_dir001.toml "${SET[@]}" "${FROM[@]}" &
  if [ "$seed" = "${SEEDS[0]}" ]; then
    run ${R}_fmds --config configs/hfmds_fmnist_dir001_fmds.toml "${SET[@]}" "${FROM[@]}"
  fi
  # the lr/10 control: FedAvg at lr/10 with weight decay x10, HFMDs' real-data step (alpha = 0.1) without the pool
  run ${R}_fedavg_alpha01 --config configs/hfmds_fmnist_dir001.toml "${SET[@]}" --set train.lr=0.0005 \
    --set train.weight_decay=0.005 "${FROM[@]}"
  wait
done
