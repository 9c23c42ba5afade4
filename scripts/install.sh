#!/usr/bin/env bash
# Install shufflefl (editable) into the current Python, without pulling a multi-GB CUDA torch onto a CPU machine.
# Usage: source scripts/install.sh EXTRA   (EXTRA: "" or e.g. "test"; always pass it, or the caller's own
# arguments would be read as EXTRA)
# Where torch is missing, the CPU build torch==2.13.0 is installed first; a torch that is already there (CUDA or
# not) is kept, because the package only asks for torch>=2.1.
set -euo pipefail
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
export PYTHON
pip_install() { "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@"; }

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "[install] torch not found: installing the CPU build torch==2.13.0"
    pip_install "torch==2.13.0"
fi
extra=${1:-}
echo "[install] shufflefl${extra:+[$extra]}"
pip_install -e ".${extra:+[$extra]}"
