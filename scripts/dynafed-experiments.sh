#!/usr/bin/env bash
# DynaFed Table 1 on real Fashion-MNIST, alpha = 0.01: FedAvg and DynaFed, 80 clients, 40% participation, 200
# rounds, ConvNet-3, client Adam lr 1e-3 (moments kept across rounds in both arms), the code's balanced split.
# The DynaFed arm runs from round 1 and keeps its state after round L (rounds 1..L are FedAvg in both arms); the
# FedAvg arm starts from there (--init-from, tested equal to running from round 1) as soon as it exists.
# Every run resumes where it stopped: run the script again after an interruption (or a SIGTERM).
#   bash scripts/dynafed-experiments.sh                 the authors' code settings (configs/paper/dynafed_fmnist_a001_code.toml)
#   SETTING=paper bash scripts/dynafed-experiments.sh   the paper's own numbers (configs/paper/dynafed_fmnist_a001_dynafed.toml)
#   ITERATIONS=300 AUGMENT=none ...                     N outer steps (default: the config's), DSA off
# Paper scale is GPU work: ConvNet-3 on 32 clients a round and N = 1000-3000 unrolled matching steps are hours on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-results}/runs  # keep long runs outside the work tree: SHUFFLEFL_RUNS=~/.cache/shufflefl
SETTING=${SETTING:-code}
AUGMENT=${AUGMENT:-dsa}
case $SETTING in
  code) CONFIG=configs/paper/dynafed_fmnist_a001_code.toml; L=24; N=${ITERATIONS:-3000} ;;
  paper) CONFIG=configs/paper/dynafed_fmnist_a001_dynafed.toml; L=20; N=${ITERATIONS:-1000} ;;
  *) echo "SETTING must be code or paper" >&2; exit 2 ;;
esac

source scripts/resumable.sh  # run OUT ARGS...: skip if done, resume if started, else start

D=$RUNS/dynafed_fmnist_a001_${SETTING}_n${N}_${AUGMENT}
# Another synthesis arm (other N or DSA) starts from the state a DSA arm kept after round L-1 where there is one
# (`method.shares_state_with`: the trajectory does not depend on the synthesis settings), else from round 1.
FROM=()
for kept in "$RUNS"/dynafed_fmnist_a001_${SETTING}_n*_dsa/checkpoint_round$((L - 1)).pt; do
  [ -f "$kept" ] && [ "$(dirname "$kept")" != "$D" ] && FROM=(--init-from "$kept") && break
done
run "$D" --config $CONFIG --set method.iterations=$N --set "method.augment=\"$AUGMENT\"" --set train.keep_round=$L \
  "${FROM[@]}" &
while [ ! -f "$D/checkpoint_round$L.pt" ]; do sleep 30; jobs %1 >/dev/null 2>&1 || exit 1; done
run "$RUNS/dynafed_fmnist_a001_fedavg_from$L" --config configs/paper/dynafed_fmnist_a001.toml \
  --init-from "$D/checkpoint_round$L.pt"
wait
