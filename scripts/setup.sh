#!/usr/bin/env bash
# Create .venv and install the project with everything the jobs and tests need.
# Idempotent: a second run only re-installs the package when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
stamp=$VENV/.installed

if [[ ! -x $VENV/bin/python ]]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        # Debian's python3 ships venv separately.
        apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq install -y python3-venv
        "$PYTHON" -m venv "$VENV"
    fi
fi
if [[ -f $stamp && $stamp -nt pyproject.toml ]]; then
    exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch 2.14.1 + torchvision 0.29.1 are the pair that imports cleanly on a CPU-only machine
# (the CPU-only torch 2.13 wheel has no matching torchvision); pinned in pyproject's extras.
"$VENV/bin/python" -m pip install -q -e ".[zoo,train,test,bench]"
touch "$stamp"
echo "setup: $("$VENV/bin/python" -c 'import torch, timm, ray; print("torch", torch.__version__, "timm", timm.__version__, "ray", ray.__version__)')"
