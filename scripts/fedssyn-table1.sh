#!/usr/bin/env bash
# Fedssyn Table 1 at the paper's knobs (configs/paper/fedssyn_table1_fmnist.toml: n_tilde = n/N, 10 local epochs,
# batch 128, lr tuned from {0.01, 0.05, 0.1}, 100 rounds, uniform average), six algorithms (the paper's five plus
# FedAvgM, ours) x {D_i, D_i with the shuffled synthetic D~_si} x 3 seeds, column by column. Every sweep reuses
# finished runs and resumes interrupted ones: run the script again after an interruption.
#   bash scripts/fedssyn-table1.sh [--partition P] [COLUMN...] [-- ARM]
#   bash scripts/fedssyn-table1.sh [--partition P] --ledger [COLUMN...]   # the finished runs' records to the ledger,
#     with the quality of each seed's synthetic sets (python -m fl.quality --run: needs the generator cache)
#     COLUMN: a01 (N = 10, C = 1, alpha = 0.1), a001 (alpha = 0.01), c04_a01, c04_a001 (N = 10, C = 0.4),
#             n40_a01, n40_a001 (N = 40, C = 0.2), n100_a01, n100_a001 (N = 100, C = 0.1); default: all, in that order
#     ARM: real (D_i), synthetic (D_i with D~_si) or both (default)
#     P: dirichlet-fedssyn (default: the paper's partition, Fedssyn's code after FedDF) or dirichlet (plain
#        Dirichlet shares, min 10 a client: the five columns a01 a001 c04_a01 c04_a001 n40_a01 only)
#   SHUFFLEFL_RUNS (default ~/.cache/shufflefl/runs): where the sweeps live (outside the work tree);
#   SUBSAMPLE (default 3000: the CPU's scale; 0 on a GPU: every image); JOBS (default 2: runs at a time)
# Each algorithm's sweep is $RUNS/P/COLUMN/ALGORITHM: base/seedS (D_i) and method.name=fedssyn/seedS (D_i with D~_si).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RUNS=${SHUFFLEFL_RUNS:-$HOME/.cache/shufflefl/runs}/fedssyn_table1
SUBSAMPLE=${SUBSAMPLE:-3000}
JOBS=${JOBS:-2}
ALGORITHMS=(fedavg scaffold fedprox feddyn fedpvr fedavgm)
CONFIG=configs/paper/fedssyn_table1_fmnist.toml
COLUMNS=()
ARM=both
LEDGER=
PARTITION=dirichlet-fedssyn
while [ $# -gt 0 ]; do
  case $1 in
    --ledger) LEDGER=1; shift ;;
    --partition) PARTITION=${2:?"--partition needs a partition: dirichlet-fedssyn or dirichlet"}; shift 2 ;;
    --) ARM=${2:?"-- needs an arm: real, synthetic or both"}; shift 2 ;;
    *) COLUMNS+=("$1"); shift ;;
  esac
done
case $ARM in real|synthetic|both) ;; *) echo "ARM must be real, synthetic or both, not $ARM" >&2; exit 2 ;; esac
case $SUBSAMPLE in ''|*[!0-9]*) echo "SUBSAMPLE must be a whole number (0: every image), not '$SUBSAMPLE'" >&2; exit 2 ;; esac


# Each column's --set arguments (clients, participation, alpha, n_tilde = n / N at this SUBSAMPLE, the partition)
# and the columns a partition runs come from the grid's one declaration, figures/fedssyn_table1.py's COLUMNS and
# PARTITIONS, which the artefacts read the runs back by.
SETS=$("$PYTHON" -c '
import sys
from figures.fedssyn_table1 import COLUMNS, PARTITIONS
subsample, partition, names = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if partition not in PARTITIONS:
    print("unknown partition", partition, "(" + ", ".join(PARTITIONS) + ")", file=sys.stderr)
    sys.exit(2)
unknown = [name for name in names if name not in PARTITIONS[partition]]
if unknown:
    print("unknown column", unknown[0], "for partition", partition, "(" + ", ".join(PARTITIONS[partition]) + ")",
          file=sys.stderr)
    sys.exit(2)
for name in names or PARTITIONS[partition]:
    print(name, *COLUMNS[name].overrides(subsample, partition))
' "$SUBSAMPLE" "$PARTITION" "${COLUMNS[@]}") || exit 2
declare -A COLUMN_SETS
COLUMNS=()
while read -r col sets; do COLUMN_SETS[$col]=$sets; COLUMNS+=("$col"); done <<< "$SETS"
RUNS=$RUNS/$PARTITION

if [ -n "$LEDGER" ]; then  # the ledger keys a run by its config when its folder's parent is _runs: stage them so
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir "$stage/_runs"
  for col in "${COLUMNS[@]}"; do
    for run in "$RUNS/$col"/*/*/seed*; do
      [ -f "$run/summary.json" ] || continue
      name=$(echo "${run#"$RUNS/"}" | tr '/=' '__')
      mkdir "$stage/_runs/$name"
      cp -P "$run"/{config.json,metrics.jsonl,summary.json,provenance.json} "$stage/_runs/$name/"  # a link stays one
    done
  done
  if [ -z "$(ls "$stage/_runs")" ]; then echo "no finished run of ${COLUMNS[*]} in $RUNS"; exit 0; fi
  "$PYTHON" -m figures ledger add --note "scripts/fedssyn-table1.sh (Fedssyn Table 1 at the paper's knobs)" \
    "$stage/_runs"/*
  for col in "${COLUMNS[@]}"; do  # the quality of each seed's beta-VAE sets (every algorithm of a seed deals them)
    for run in "$RUNS/$col"/fedavg/method.name=fedssyn/seed*; do
      [ -f "$run/summary.json" ] || continue
      pattern='import sys, pathlib, fl.quality as q; print(q.sets_report_glob(q.recorded_digest(pathlib.Path(sys.argv[1]))))'
      measured=$("$PYTHON" -c "$pattern" "$run" 2> /dev/null) || measured=  # no digest: fl.quality below says why
      [ -n "$measured" ] && compgen -G "results/ledger/quality/$measured" > /dev/null && continue  # measured before
      rm -f "$stage/quality.json"
      if ! { "$PYTHON" -m fl.quality --run "$run" "$RUNS/synthetic" --out "$stage/quality.json" > /dev/null &&
             "$PYTHON" -m figures ledger add "$stage/quality.json"; }; then
        echo "the quality of $run's synthetic sets is not in the ledger (above); its runs are"
      fi
    done
  done
  exit
fi

for col in "${COLUMNS[@]}"; do
  sets=()
  for one in ${COLUMN_SETS[$col]}; do sets+=(--set "$one"); done
  case $ARM in real) arms=() ;; synthetic) arms=(--vary method.name=fedssyn --no-base) ;;
               both) arms=(--vary method.name=fedssyn) ;; esac
  for algorithm in "${ALGORITHMS[@]}"; do  # both arms of an algorithm before the next: a row fills as it goes
    "$PYTHON" -m fl.sweep --config "$CONFIG" "${sets[@]}" --set "method.cache_dir=$RUNS/synthetic" \
      --set "algorithm.name=$algorithm" "${arms[@]}" --seeds 0,1,2 --jobs "$JOBS" --quiet --out "$RUNS/$col/$algorithm"
  done
done
