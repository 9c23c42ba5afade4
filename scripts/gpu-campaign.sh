#!/usr/bin/env bash
# The paper-scale arms still open, for a lent GPU. A lease is now 15 minutes of device time in all, its start
# included, and one call runs at most 10 minutes, so a lease runs ONE group in ONE call:
#   device run, carry [".data"] (the Fashion-MNIST IDX files copied to .data/fashion-mnist, ignored by git),
#   timeout_s 600:   bash scripts/gpu-campaign.sh start seeds 540     (or: start controls 540)
#   then give_back; here: tar -xzf /work/.device/N/metrics.tgz -C ~/.cache/shufflefl/gpuN (and dsyn.tgz).
# `start GROUP SECONDS` launches the group in the background (setsid, so a cut-off call still leaves $OUT) and
# reports; `wait SECONDS` reports again on a warm machine. Every minute $OUT is packed afresh:
#   $OUT/metrics.tgz   every run's config, metrics, summary, provenance and logs (no checkpoints, no caches)
#   $OUT/dsyn.tgz      each DynaFed arm's D_syn (dynafed_synthesis.pt, ~1 MB; a checkpoint with 80 clients' Adam
#                      moments is ~200 MB, so δ² is logged in the run instead: ESTIMATE_EVERY=20)
# The device tool drops any file over 16 MiB, so the two stay apart (the first lease lost its checkpoints that way).
# A run cut off before round 200 still counts: dynafed-table1 compares the arms at the last round both reached.
# The groups, DynaFed Table 1 at the paper's settings (N = 1000, δ² of D_syn every 20 rounds), all sharing the GPU
# (one H100 ran 7 such runs at once in the first lease: a synthesis took 543 s among them, a DynaFed run 759 s):
#   seeds      seeds 1 and 2: DynaFed with DSA, and FedAvg from its round 19 (the verdict over seeds; first)
#   controls   seed 0 again, DynaFed with DSA and FedAvg (δ² and D_syn, which the first lease lost; whether a
#              second machine repeats 85.61 / 74.88); DSA off and N = 0 from that arm's round-19 state (N = 0:
#              fine-tuning on D_syn as initialised; in the reduced CPU protocol it gave much of N = 300's gain)
# Not here: the authors' code settings (N = 3000, about 3 syntheses' time: not within one call).
set -uo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: bash scripts/gpu-campaign.sh start seeds|controls [SECONDS] | wait [SECONDS]" >&2; exit 2; }
case ${1:-}:${2:-} in start:seeds | start:controls | wait:*) ;; *) usage ;; esac
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
    seeds)
      background dynafed_seed1 env SETTING=paper ESTIMATE_EVERY=20 SEED=1 bash scripts/dynafed-experiments.sh
      background dynafed_seed2 env SETTING=paper ESTIMATE_EVERY=20 SEED=2 bash scripts/dynafed-experiments.sh ;;
    controls)
      background dynafed_dsa env SETTING=paper ESTIMATE_EVERY=20 bash scripts/dynafed-experiments.sh
      from_dsa dynafed_none 1000 none  # DSA off
      from_dsa dynafed_n0 0 dsa ;;  # no synthesis: fine-tuning on D_syn as initialised (noise, uniform soft labels)
  esac
}

pack() {  # the two archives, each written whole before it replaces the last
  (cd "$S" && tar -czf "$OUT/metrics.tmp" --exclude='*.pt' --exclude='synthetic' --exclude='*.npz' logs runs \
    && mv "$OUT/metrics.tmp" "$OUT/metrics.tgz")
  (cd "$S" && find runs -path '*dynafed*' -name dynafed_synthesis.pt -print0 \
    | tar -czf "$OUT/dsyn.tmp" --null -T - && mv "$OUT/dsyn.tmp" "$OUT/dsyn.tgz")
}

report() {
  echo "== $(date +%T) $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"
  for run in "$S"/runs/*/; do
    local rows last
    rows=$(wc -l < "$run/metrics.jsonl" 2>/dev/null || echo 0)
    last=$(tail -n 1 "$run/metrics.jsonl" 2>/dev/null | grep -o '"test_accuracy": [0-9.]*')
    echo "$(basename "$run") rows=$rows $last $([ -f "$run/summary.json" ] && echo done)"
  done
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
