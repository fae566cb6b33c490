#!/usr/bin/env bash
# What the Python binding's tests need, installed only when missing (idempotent):
#   * a CPU torch: Debian bookworm's python3-torch, pinned, for /usr/bin/python3 (Debian's
#     Python 3.11), with python3-venv and python3-pip, through apt-get (about 35 s on a fresh
#     machine; PyPI's default torch wheel pulls about 3 GB of CUDA packages instead);
#   * a virtual environment of /usr/bin/python3 that sees those system packages, with pytest
#     pinned from PyPI.
# Usage: scripts/install-python-deps.sh [VENV]   (default: build-python/venv)
# Needs root (or sudo) when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${1:-build-python/venv}
TORCH_DEB=1.13.1+dfsg-4   # python3-torch in Debian 12 (bookworm)
PYTEST=8.3.5

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
installed() { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | grep "install ok installed" | awk '{print $4}'; }

missing=()
[ "$(installed python3-torch)" = "$TORCH_DEB" ] || missing+=("python3-torch=$TORCH_DEB")
for p in python3-venv python3-pip; do
  [ -n "$(installed $p)" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-python-deps: installing ${missing[*]} (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "install-python-deps: making $VENV (/usr/bin/python3, with the system packages)"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c "import pytest, sys; sys.exit(pytest.__version__ != '$PYTEST')" 2>/dev/null; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pytest==$PYTEST"
fi
"$VENV/bin/python" -c "import sys, torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available(); print('install-python-deps: Python', sys.version.split()[0], 'torch', torch.__version__, 'in', sys.prefix)"
