#!/usr/bin/env bash
# The experiments still open, for a lent GPU. A lease is 15 minutes of device time in all, its start included, and
# one call runs at most 10 minutes, so a lease runs ONE group in ONE call:
#   device run, carry [".data"] (the Fashion-MNIST IDX files copied to .data/fashion-mnist, ignored by git),
#   timeout_s 600:   bash scripts/gpu-campaign.sh start GROUP 540
#   then give_back. `start GROUP SECONDS` launches the group in the background (setsid, so a cut-off call still
#   leaves $OUT) and reports every minute until SECONDS have passed; `wait SECONDS` reports again on a warm machine.
# Every minute $OUT is packed afresh (the device tool brings back at most 8 files of under 16 MiB each):
#   $OUT/metrics.tgz   every run's config, metrics, summary, provenance and logs (no checkpoints, no caches)
#   $OUT/dsyn.tgz      each DynaFed arm's D_syn (dynafed_synthesis.pt, ~1 MB)
#   $OUT/ddpm_sets.tar the DDPM synthetic sets and their generators' metadata (python -m fl.synthesis pack; split
#                      into ddpm_sets-1.tar, ... if over 15 MiB); here: python -m fl.synthesis unpack
#                      /work/.device/N/ddpm_sets*.tar --cache-dir results/synthetic (or a figures store's _synthetic)
# A resumable DynaFed checkpoint holds 80 clients' Adam moments (~200 MB at width 128) and cannot come back, so an
# arm cut off is rerun from round 1 by the next lease (its metrics still count: dynafed-table1 compares the arms at
# the last round both reached). The groups (one call each; the DynaFed ones at the paper's settings, N = 1000, δ² of
# D_syn every 20 rounds, unless said otherwise):
#   ddpm-sets      each client's class-conditional DDPM of configs/fedssyn_fmnist_ddpm.toml (the cpu-scale Fedssyn
#                  protocol of fedssyn_fmnist_vae.toml with DDPMs) trained and sampled for seeds 0 and 1, DDPM_WORKERS
#                  (4) clients at a time per seed (scripts/ddpm_sets.py): 20 DDPMs of 20 epochs on ~4,000 images
#                  and 1,000 samples each; then on the CPU:
#                  python -m fl.run --config configs/fedssyn_fmnist_ddpm.toml --set train.seed=S trains no generator
#   seeds-dynafed  the DynaFed arms of seeds 1 and 2 to round 200 (their FedAvg partners finished on the H200 lease
#                  of 2026-11-26, ../shared/gpu-runs/2026-11-26-h200-dynafed-seeds; the DynaFed arms stopped there
#                  at rounds 157 and 153 and are rerun whole)
#   seeds          seeds 1 and 2, both arms (DynaFed, and FedAvg from its round 19)
#   controls       seed 0 again, DynaFed with DSA and FedAvg (δ² and D_syn, which the first lease lost; whether a
#                  second machine repeats 85.61 / 74.88); DSA off and N = 0 from that arm's round-19 state (N = 0:
#                  fine-tuning on D_syn as initialised; in the reduced CPU protocol it gave much of N = 300's gain)
#   n3000          the authors' code settings (configs/paper/dynafed_fmnist_a001_code.toml: N = 3000, L = 24, s = 3),
#                  seed 0, DynaFed and FedAvg from its round 23
#   bench          DynaFed's synthesis alone at width 128 (benchmarks/synthesis_bench.py --paper: iterations per
#                  second and TFLOP/s of the reference and the fast path and of each CUDA switch), then the gpu tests
set -uo pipefail
cd "$(dirname "$0")/.."
GROUPS_KNOWN="ddpm-sets|seeds-dynafed|seeds|controls|n3000|bench"
usage() { echo "usage: bash scripts/gpu-campaign.sh start $GROUPS_KNOWN [SECONDS] | wait [SECONDS]" >&2; exit 2; }
case ${1:-}:${2:-} in
  start:ddpm-sets | start:seeds-dynafed | start:seeds | start:controls | start:n3000 | start:bench)
    [ $# -le 3 ] && [[ ${3:-540} =~ ^[0-9]+$ ]] || usage ;;
  wait:*) [ $# -le 2 ] && [[ ${2:-540} =~ ^[0-9]+$ ]] || usage ;;
  *) usage ;;
esac
export SHUFFLEFL_DATA=${SHUFFLEFL_DATA:-$PWD/.data} SHUFFLEFL_RUNS=${SHUFFLEFL_RUNS:-/root/store}
export PYTHONUNBUFFERED=1 PYTHON=${PYTHON:-python3}
S=$SHUFFLEFL_RUNS
LOGS=$S/logs
OUT=${OUT:-/tmp/gpu-campaign-out}
mkdir -p "$LOGS" "$S/runs" "$OUT"

background() {  # background NAME COMMAND...: run in its own session, log to LOGS/NAME.log
  local name=$1; shift
  setsid nohup "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
}

from_dsa() {  # from_dsa NAME N AUGMENT: a seed-0 DynaFed arm from the seed-0 DSA arm's round-19 state, once it exists
  # (its own fl.run: the script would also resume the FedAvg arm running beside it)
  local dsa=$S/runs/dynafed_fmnist_a001_paper_n1000_dsa
  background "$1" bash -c "while [ ! -f $dsa/checkpoint_round19.pt ]; do sleep 10; done; source scripts/resumable.sh;
    run $S/runs/dynafed_fmnist_a001_paper_n$2_$3 --config configs/paper/dynafed_fmnist_a001_dynafed.toml \
    --set method.iterations=$2 --set 'method.augment=\"$3\"' --set train.keep_round=19 \
    --set train.estimate_every=20 --init-from $dsa/checkpoint_round19.pt"
}

start() {  # start GROUP
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$LOGS/device.txt" 2>&1
  "$PYTHON" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" >> "$LOGS/device.txt" 2>&1
  git rev-parse HEAD >> "$LOGS/device.txt" 2>/dev/null
  case $1 in
    ddpm-sets)
      for seed in 0 1; do
        background "ddpm_sets_seed$seed" "$PYTHON" scripts/ddpm_sets.py --config configs/fedssyn_fmnist_ddpm.toml \
          --set "train.seed=$seed" --set "method.cache_dir=\"$S/synthetic\"" --workers "${DDPM_WORKERS:-4}"
      done ;;
    seeds-dynafed)
      for seed in 1 2; do
        background "dynafed_seed$seed" env SETTING=paper ESTIMATE_EVERY=20 SEED=$seed ARMS=dynafed \
          bash scripts/dynafed-experiments.sh
      done ;;
    seeds)
      background dynafed_seed1 env SETTING=paper ESTIMATE_EVERY=20 SEED=1 bash scripts/dynafed-experiments.sh
      background dynafed_seed2 env SETTING=paper ESTIMATE_EVERY=20 SEED=2 bash scripts/dynafed-experiments.sh ;;
    controls)
      background dynafed_dsa env SETTING=paper ESTIMATE_EVERY=20 bash scripts/dynafed-experiments.sh
      from_dsa dynafed_none 1000 none  # DSA off
      from_dsa dynafed_n0 0 dsa ;;  # no synthesis: fine-tuning on D_syn as initialised (noise, uniform soft labels)
    n3000)
      background dynafed_code env SETTING=code ESTIMATE_EVERY=20 bash scripts/dynafed-experiments.sh ;;
    bench)
      background synthesis_bench bash -c "\"\$PYTHON\" benchmarks/synthesis_bench.py --paper \
        --out '$LOGS/synthesis_bench.json'; \"\$PYTHON\" -m pytest -q -m gpu tests/fl/test_gpu.py -p no:cacheprovider" ;;
  esac
}

pack() {  # the archives, each written whole before it replaces the last
  (cd "$S" && tar -czf "$OUT/metrics.tmp" --exclude='*.pt' --exclude='synthetic' --exclude='*.npz' logs runs \
    && mv "$OUT/metrics.tmp" "$OUT/metrics.tgz")
  (cd "$S" && find runs -path '*dynafed*' -name dynafed_synthesis.pt -print0 \
    | tar -czf "$OUT/dsyn.tmp" --null -T - && mv "$OUT/dsyn.tmp" "$OUT/dsyn.tgz")
  if [ -d "$S/synthetic" ]; then
    "$PYTHON" -m fl.synthesis pack "$S/synthetic" "$OUT" --name ddpm_sets --generator ddpm > "$LOGS/pack.log" 2>&1
  fi
}

report() {
  echo "== $(date +%T) $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"
  for run in "$S"/runs/*/; do
    [ -d "$run" ] || continue
    local rows last
    rows=$(wc -l < "$run/metrics.jsonl" 2>/dev/null || echo 0)
    last=$(tail -n 1 "$run/metrics.jsonl" 2>/dev/null | grep -o '"test_accuracy": [0-9.]*')
    echo "$(basename "$run") rows=$rows $last $([ -f "$run/summary.json" ] && echo done)"
  done
  if [ -d "$S/synthetic" ]; then
    echo "ddpm: $(find "$S/synthetic" -name generator.json | wc -l) generators trained," \
      "$(find "$S/synthetic" -name 'synthetic-*.json' | wc -l) sets sampled"
  fi
  grep -l "Traceback" "$LOGS"/*.log 2>/dev/null | sed 's/^/FAILED: /'
}

wait_for() {  # wait_for SECONDS: report and pack every minute until SECONDS have passed
  local end=$(($(date +%s) + ${1:-540}))
  while :; do
    report
    pack
    [ "$(date +%s)" -ge "$end" ] && break
    sleep 60
  done
  ls -la "$OUT"
}

case $1 in
  start) start "$2"; sleep 5; wait_for "${3:-540}" ;;
  wait) wait_for "${2:-540}" ;;
esac
