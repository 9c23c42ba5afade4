#!/usr/bin/env bash
# The experiments still open, for a lent GPU (15 minutes of device time in all, its start included; one call runs at
# most 10 minutes). One lease, two calls (device run, carry [".data"]: the Fashion-MNIST IDX files copied to
# .data/fashion-mnist, ignored by git; plus the folder holding a previous lease's files, if any):
#   timeout_s 600:  bash scripts/gpu-campaign.sh start all 540      (or: resume 540 FILE... to continue a lease)
#   timeout_s 300:  bash scripts/gpu-campaign.sh wait 240           (on the warm machine), then give_back
# `start GROUP SECONDS` writes the plan of GROUP and starts its scheduler in a session of its own (scripts/campaign.py:
# every task launched in priority order, as many at a time as the machine holds, each once the state it starts from
# exists), then reports every minute (GPU utilisation and memory, each run's round, the runs waiting) until SECONDS
# have passed or every task has ended, and ends with a one-screen summary. `wait SECONDS` reports again.
# `resume SECONDS FILE...` unpacks a previous lease's files (its state archives, its records: the tasks finished there
# are not run again; its DDPM sets, optional) into the store, then runs `start all SECONDS`.
# Every minute $OUT gets what the device tool brings back (8 files of under 16 MiB, 64 MiB together):
#   records-1.tgz   every run's config, metrics, summary, provenance (DynaFed's D_syn too), the logs, the status
#   ddpm_sets.tar   the DDPM synthetic sets (fl.synthesis pack; ddpm_sets-1.tar, ... past 15 MiB)
#   state-1.tar ... each unfinished run's state (checkpoint.pt: server model, algorithm and method state; no
#                   optimiser moments the method does not need), by priority: state-1.tar holds the first ones
#                   (carry it to the next lease: ~20 MiB fit beside the code and the data; the rest resume at home)
#   state-NAME-KEY.K-of-N.vol, state-NAME-KEY.vol.json   a state too large for one file (a DynaFed arm's Adam
#                   moments, 206 MB) in volumes, a few a call: `wait 0` calls on the warm machine bring the rest
#                   (the summary's "in volumes" line says how many are back; docs/guides/gpu.md)
# Home: python -m figures ledger add --from-lease /work/.device/N [/work/.device/M ...] (lab/records/lease.py).
# The groups, each runnable alone (`start GROUP`): all (every open one, in this priority order), ddpm-sets (seeds 0
# and 1, DDPM_WORKERS = 4 clients at a time each), fedcog (Table 1 at the paper's and the code's settings, 3 seeds,
# both partitions), hfmds (Fashion-MNIST, 3 seeds, both partitions, FedAvg, FMDS and the lr/10 control),
# seeds-dynafed (the DynaFed arms of seeds 1 and 2), seeds (those with their FedAvg arms), controls (seed 0: DSA,
# FedAvg, DSA off, N = 0), n3000 (the code's settings), bench (the synthesis benchmark, then pytest -m gpu).
# The limit: CAMPAIGN_JOBS, else min(CPU cores, free GPU memory / CAMPAIGN_GIB_PER_RUN (4) GiB); one torch thread
# per process. CAMPAIGN_REPORT_SECONDS (60) spaces the reports.
set -uo pipefail
cd "$(dirname "$0")/.."
GROUPS_KNOWN="all|ddpm-sets|fedcog|hfmds|seeds-dynafed|seeds|controls|n3000|bench"
usage() {
  echo "usage: bash scripts/gpu-campaign.sh start $GROUPS_KNOWN [SECONDS] | wait [SECONDS] | resume SECONDS FILE..." \
    "| plan [GROUP] [--rates FILE]" >&2
  exit 2
}
seconds() { [[ $1 =~ ^[0-9]+$ ]]; }
case ${1:-} in
  plan) shift; exec "${CAMPAIGN_PYTHON:-python3}" scripts/campaign.py plan "$@" ;;  # any machine: predicted minutes
esac
case ${1:-} in
  start) [ $# -ge 2 ] && [ $# -le 3 ] && [[ "|$GROUPS_KNOWN|" == *"|$2|"* ]] && seconds "${3:-540}" || usage ;;
  wait) [ $# -le 2 ] && seconds "${2:-540}" || usage ;;
  resume) [ $# -ge 3 ] && seconds "$2" || usage ;;
  *) usage ;;
esac
export SHUFFLEFL_DATA=${SHUFFLEFL_DATA:-$PWD/.data} SHUFFLEFL_RUNS=${SHUFFLEFL_RUNS:-/root/store}
export PYTHONUNBUFFERED=1 PYTHON=${PYTHON:-python3} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export OUT=${OUT:-/tmp/gpu-campaign-out}
CAMPAIGN=("${CAMPAIGN_PYTHON:-python3}" scripts/campaign.py)  # the scheduler's Python; $PYTHON runs the tasks
S=$SHUFFLEFL_RUNS
mkdir -p "$S/logs" "$S/runs" "$OUT"

device() {  # what the runs ran on, for the records: written beside, then renamed over (a link there is replaced)
  local tmp
  tmp=$(mktemp "$S/logs/device.txt.XXXXXXXXXXXXXXXX.tmp")
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    "$PYTHON" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() \
      else 'no CUDA')" 2>&1
    git rev-parse HEAD 2>/dev/null
  } > "$tmp"
  mv -fT "$tmp" "$S/logs/device.txt"
}

case $1 in
  start) device; CAMPAIGN_SECONDS=${3:-540} "${CAMPAIGN[@]}" start "$2" && exec "${CAMPAIGN[@]}" watch "${3:-540}" ;;
  wait) exec "${CAMPAIGN[@]}" watch "${2:-540}" ;;
  resume)
    seconds=$2
    shift 2
    "${CAMPAIGN[@]}" unpack "$@" && { device; } && CAMPAIGN_SECONDS=$seconds "${CAMPAIGN[@]}" start all && exec "${CAMPAIGN[@]}" watch "$seconds" ;;
esac
