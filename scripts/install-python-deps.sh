#!/usr/bin/env bash
# What the Python binding's tests need, installed only when missing (idempotent):
#   * Debian packages: python3-venv (a venv of /usr/bin/python3, Debian's Python 3.11),
#     python3-dev and g++ (torch.compile's Inductor compiles C++ for the CPU tests);
#   * a virtual environment of /usr/bin/python3 with PyPI's torch, pinned (the current release:
#     the tests, torch.compile ones included, run on it; about 50 s to install, with the CUDA
#     libraries PyPI's default Linux wheel brings), numpy and pytest;
#   * pylint (pinned): the binding's static check before its tests (`make test-python`): code
#     that cannot run and attributes that do not exist, in files whose paths a CPU run misses;
#   * fla-core (FLA's modules, pinned; its one dependency einops, pinned too), for the tests of
#     cake.ShortConvolution against FLA's fla.modules.ShortConvolution (signatures, state_dict;
#     on the CPU: FLA's kernels need CUDA). Installed with --no-deps: its extras would bring
#     their own torch and triton, and the venv's torch stays the one pinned here.
#   * flashinfer-python (pinned, --no-deps, with only the packages `import flashinfer` needs, pinned
#     too): test_flashinfer.py checks cake's flashinfer.cake_causal_conv1d_det_train_kcp beside the
#     real FlashInfer, which must stay untouched. Its CUDA dependencies (cutlass-dsl, cuda-python,
#     cudnn frontend) are left out: nothing of FlashInfer runs in the tests, it is only imported.
# cake supports torch >= 2.6; README.md lists the versions tested. Debian's own python3-torch
# (1.13) is too old for torch.library custom ops and torch.compile and is not used.
# Usage: scripts/install-python-deps.sh [VENV]   (default: build-python/venv)
#        TORCH_VERSION=2.6.0 scripts/install-python-deps.sh /tmp/venv-2.6   (another torch)
# Needs root (or sudo) when a Debian package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${1:-build-python/venv}
TORCH=${TORCH_VERSION:-2.15.0}
NUMPY=2.4.6
PYTEST=8.3.5
FLA_CORE=0.6.0
EINOPS=0.8.2
# flashinfer-python and what its import needs (its Requires-Dist, less the CUDA packages)
FLASHINFER_SET="flashinfer-python==0.7.4 apache-tvm-ffi==0.1.11 requests==2.34.2 urllib3==2.8.0
  idna==3.20 certifi==2026.10.19.post1 charset-normalizer==3.5.3 nvidia-ml-py==13.615.71
  tqdm==4.70.1"
PYLINT=4.1.4

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
installed() { dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in python3-venv python3-dev g++; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-python-deps: installing ${missing[*]} (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "install-python-deps: making $VENV (/usr/bin/python3)"
  /usr/bin/python3 -m venv "$VENV"
fi
have() {  # have MODULE VERSION: the venv imports MODULE at exactly VERSION (a local tag aside)
  "$VENV/bin/python" -c "import sys, $1; sys.exit($1.__version__.split('+')[0] != '$2')" 2>/dev/null
}
have_dist() {  # have_dist DISTRIBUTION VERSION: installed at exactly VERSION (without importing it)
  "$VENV/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}
want=()
have torch "$TORCH" || want+=("torch==$TORCH")
have numpy "$NUMPY" || want+=("numpy==$NUMPY")
have pytest "$PYTEST" || want+=("pytest==$PYTEST")
have_dist pylint "$PYLINT" || want+=("pylint==$PYLINT")
if [ ${#want[@]} -gt 0 ]; then
  echo "install-python-deps: pip install ${want[*]} (PyPI, into $VENV)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${want[@]}"
fi
nodeps=()
have_dist einops "$EINOPS" || nodeps+=("einops==$EINOPS")
have_dist fla-core "$FLA_CORE" || nodeps+=("fla-core==$FLA_CORE")
for pin in $FLASHINFER_SET; do
  have_dist "${pin%%==*}" "${pin##*==}" || nodeps+=("$pin")
done
if [ ${#nodeps[@]} -gt 0 ]; then
  echo "install-python-deps: pip install --no-deps ${nodeps[*]} (PyPI, into $VENV)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${nodeps[@]}"
fi
"$VENV/bin/python" -c "import sys, torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available(); print('install-python-deps: Python', sys.version.split()[0], 'torch', torch.__version__, 'in', sys.prefix)"
