#!/usr/bin/env bash
# DynaFed Table 1 on real Fashion-MNIST, alpha = 0.01: FedAvg and DynaFed, 80 clients, 40% participation, 200
# rounds, ConvNet-3, client Adam lr 1e-3 (moments kept across rounds in both arms), the code's balanced split.
# The DynaFed arm runs from round 1 and keeps its state after round L - 1 (rounds 1..L are FedAvg in both arms); the
# FedAvg arm starts from there (--init-from, tested equal to running from round 1) as soon as it exists.
# Every run resumes where it stopped: run the script again after an interruption (or a SIGTERM).
#   bash scripts/dynafed-experiments.sh                 the authors' code settings (configs/paper/dynafed_fmnist_a001_code.toml)
#   SETTING=paper bash scripts/dynafed-experiments.sh   the paper's own numbers (configs/paper/dynafed_fmnist_a001_dynafed.toml)
#   ITERATIONS=300 AUGMENT=none ...                     N outer steps (default: the config's), DSA off
#   ESTIMATE_EVERY=20 ...                               both arms log ζ², σ² (and DynaFed δ² of D_syn) every 20 rounds
#   SEED=1 ...                                          train.seed = 1 in both arms (run names end in _seed1; seed 0's
#                                                       have no suffix)
#   ARMS=dynafed ...                                    the DynaFed arm alone (its FedAvg partner has run elsewhere)
#   WIDTH=32 ROUNDS=50 ITERATIONS=300 ...               the reduced CPU protocol (ConvNet-3 of 32 channels, 50
#                                                       rounds; ~3 core-hours for both arms and DSA off; its own
#                                                       run names, its own scale of the dynafed-table1 artefact)
# Paper scale is GPU work: ConvNet-3 on 32 clients a round and N = 1000-3000 unrolled matching steps are hours on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-results}/runs  # keep long runs outside the work tree: SHUFFLEFL_RUNS=~/.cache/shufflefl
SETTING=${SETTING:-code}
AUGMENT=${AUGMENT:-dsa}
ARMS=${ARMS:-both}
case $ARMS in both | dynafed) ;; *) echo "ARMS must be both or dynafed" >&2; exit 2 ;; esac
case $SETTING in
  code) CONFIG=configs/paper/dynafed_fmnist_a001_code.toml; L=24; N=${ITERATIONS:-3000} ;;
  paper) CONFIG=configs/paper/dynafed_fmnist_a001_dynafed.toml; L=20; N=${ITERATIONS:-1000} ;;
  *) echo "SETTING must be code or paper" >&2; exit 2 ;;
esac

TAG=""; SIZE=()  # the reduced protocol: its own run names
if [ -n "${WIDTH:-}${ROUNDS:-}" ]; then
  TAG="_w${WIDTH:-128}_r${ROUNDS:-200}"
  SIZE=(--set "model.width=${WIDTH:-128}" --set "train.rounds=${ROUNDS:-200}")
fi

EST=()  # estimates every ESTIMATE_EVERY rounds in both arms (the configs log none: at paper scale each costs minutes on CPU)
[ -n "${ESTIMATE_EVERY:-}" ] && EST=(--set "train.estimate_every=$ESTIMATE_EVERY")
SEED=${SEED:-0}  # both arms' train.seed; seed 0's runs keep the names they had before SEED existed
SUFFIX=""; [ "$SEED" != 0 ] && SUFFIX="_seed$SEED"
SEEDING=(--set "train.seed=$SEED")

source scripts/resumable.sh  # run OUT ARGS...: skip if done, resume if started, else start

D=$RUNS/dynafed_fmnist_a001_${SETTING}${TAG}_n${N}_${AUGMENT}${SUFFIX}
# The DynaFed arm keeps its state after round K = L - 1, the last state before its synthesis (which runs after
# round L's aggregation and changes nothing of round L itself). FedAvg starts from it, and so does another synthesis
# arm (other N or DSA) where a DSA arm has kept one (`method.shares_state_with`: the trajectory does not depend on
# the synthesis settings); else it starts from round 1.
K=$((L - 1))
FROM=()
for kept in "$RUNS"/dynafed_fmnist_a001_${SETTING}${TAG}_n*_dsa${SUFFIX}/checkpoint_round$K.pt; do
  [ -f "$kept" ] && [ "$(dirname "$kept")" != "$D" ] && FROM=(--init-from "$kept") && break
done
run "$D" --config $CONFIG "${SIZE[@]}" --set method.iterations=$N --set "method.augment=\"$AUGMENT\"" --set train.keep_round=$K \
  "${EST[@]}" "${SEEDING[@]}" "${FROM[@]}" &
DYNAFED=$!
# `wait PID` gives the arm's own exit status (a bare `wait` is always 0): a refused or failed run fails the script
if [ "$ARMS" = dynafed ]; then wait "$DYNAFED"; exit; fi
while [ ! -f "$D/checkpoint_round$K.pt" ]; do
  if ! kill -0 "$DYNAFED" 2>/dev/null; then
    wait "$DYNAFED"  # its failure ends the script with its status (set -e)
    echo "$D: the DynaFed arm ended without its checkpoint_round$K.pt; the FedAvg arm cannot start" >&2
    exit 1
  fi
  sleep 2
done
run "$RUNS/dynafed_fmnist_a001_fedavg${TAG}_from$K$SUFFIX" --config configs/paper/dynafed_fmnist_a001.toml "${SIZE[@]}" \
  "${EST[@]}" "${SEEDING[@]}" --init-from "$D/checkpoint_round$K.pt"
wait "$DYNAFED"
