#!/usr/bin/env bash
# The package's one-command GPU check: on a machine with CUDA it runs the `gpu` tests, the clients benchmark
# (sequential vs batched), a Fashion-MNIST FedAvg run and a Fedssyn run with per-client DDPMs on the GPU, timing
# each part, and writes everything into one folder (summary.json, summary.md, a log per part). Sized for 25 minutes
# of one H100. `--dry` runs the same parts at tiny sizes on whatever device there is (a minute on CPU; the default
# test suite runs it so the script keeps working).
#   bash scripts/gpu-check.sh [--dry] [OUT]      (OUT: default results/gpu-check, or results/gpu-check-dry in the
#                                                 checkout; a relative OUT is the caller's; a folder that holds files
#                                                 gpu-check did not make is refused)
set -uo pipefail
CALLER=$PWD
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
DRY=0
OUT=
for arg in "$@"; do  # --dry before or after OUT; any other flag (a misspelt --dry) or a second OUT is refused
  case $arg in
    --dry) DRY=1 ;;
    -h|--help) sed -n '2,9p' scripts/gpu-check.sh | cut -c3-; exit 0 ;;
    -*) echo "scripts/gpu-check.sh: error: unknown option $arg (usage: bash scripts/gpu-check.sh [--dry] [OUT])" >&2; exit 2 ;;
    *) if [ -n "$OUT" ]; then echo "scripts/gpu-check.sh: error: one OUT folder, got $OUT and $arg" >&2; exit 2; fi
       case $arg in /*) OUT=$arg ;; *) OUT=$CALLER/$arg ;; esac ;;  # relative to where it was called from
  esac
done
OUT=${OUT:-results/gpu-check$([ $DRY = 1 ] && echo -dry)}
# OUT is the check's own folder (its .shufflefl-output file says gpu-check): one that holds anything else is refused,
# so a user's summary.json or parts.jsonl there is never overwritten
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
  echo "scripts/gpu-check.sh: error: OUT $OUT is a file, not a folder" >&2; exit 2
fi
if [ -n "$(ls -A "$OUT" 2>/dev/null)" ] && [ "$(cat "$OUT/.shufflefl-output" 2>/dev/null)" != gpu-check ]; then
  echo "scripts/gpu-check.sh: error: OUT $OUT is not empty and was not made by gpu-check; choose another OUT" >&2
  exit 2
fi
link=$(find "$OUT" -mindepth 1 -maxdepth 1 -type l 2>/dev/null | head -1)
if [ -n "$link" ]; then  # never write through a link planted in OUT
  echo "scripts/gpu-check.sh: error: $link is a symbolic link; the check never writes through one (remove it)" >&2
  exit 2
fi
mkdir -p "$OUT" && echo gpu-check > "$OUT/.shufflefl-output" || exit 2
: > "$OUT/parts.jsonl"

part() {  # part NAME COMMAND...: run, log to OUT/NAME.log, record seconds and exit code
  local name=$1; shift
  local start end rc
  start=$(date +%s.%N)
  echo "[gpu-check] $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  "$PYTHON" -c 'import json, sys; print(json.dumps({"part": sys.argv[1], "seconds": float(sys.argv[3]) - float(sys.argv[2]), "rc": int(sys.argv[4]), "command": sys.argv[5]}))' \
    "$name" "$start" "$end" "$rc" "$*" >> "$OUT/parts.jsonl"
  echo "[gpu-check] $name: exit $rc, $(tail -1 "$OUT/$name.log" | cut -c1-150)"
}

if [ $DRY = 1 ]; then
  BENCH=(--quick --devices auto)
  FEDAVG=(--set train.rounds=1 --set data.clients=4 --set train.local_steps=2)
  FEDSSYN=(--set train.rounds=1 --set data.clients=4 --set train.local_steps=2 --set train.estimate_every=0
           --set method.epochs=1 --set method.rho=0.02 --set method.n_tilde=8 --set method.sample_steps=3
           --set 'method.generator_config={ base_channels = 8, channel_mults = [1, 2], num_res_blocks = 1, attn_levels = [], timesteps = 20, batch_size = 32 }'
           --set "method.cache_dir=\"$OUT/synthetic\"")
else
  BENCH=()
  FEDAVG=(--set train.rounds=20)
  FEDSSYN=(--set "method.cache_dir=\"$OUT/synthetic\"")
fi

part gpu_tests "$PYTHON" -m pytest -q -m gpu tests/fl/test_gpu.py -p no:cacheprovider
part benchmark "$PYTHON" benchmarks/clients_bench.py "${BENCH[@]}" --out "$OUT/bench.json"
part fmnist_fedavg "$PYTHON" -m fl.run --config configs/fmnist_quick.toml "${FEDAVG[@]}" --device auto \
  --out "$OUT/fmnist_fedavg" --overwrite --quiet
part fedssyn_ddpm "$PYTHON" -m fl.run --config configs/gpu/fedssyn_fmnist_ddpm.toml "${FEDSSYN[@]}" --device auto \
  --out "$OUT/fedssyn_ddpm" --overwrite --quiet
"$PYTHON" scripts/gpu_check_summary.py "$OUT"
