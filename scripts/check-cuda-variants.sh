#!/usr/bin/env bash
# Compiles the CUDA measurement variants whose code sits behind #if (not only a constant), so
# that a change to the kernels cannot break them unseen between the sessions that run them on a
# GPU (dev/variants.txt lists every variant; dev/variants.sh builds and times them on one).
# Compile only, for sm_90, with warnings as errors; skipped where nvcc is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${CUDACXX:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)}
if [ -z "$nvcc" ]; then
  echo "check-cuda-variants: no nvcc, skipped"
  exit 0
fi
variants=(
  "panel-cp-async -DCAKE_CUDA_PANEL_TMA=0"
  "silu-walk-group4 -DCAKE_CUDA_BACKWARD_SILU_GROUP=4"
)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for v in "${variants[@]}"; do
  name=${v%% *}
  flags=${v#* }
  # shellcheck disable=SC2086 # flags is a list of -D options
  "$nvcc" -std=c++17 -arch=sm_90 -cubin -Werror all-warnings -Xcompiler=-Wall,-Werror \
    -Iinclude -Isrc -Isrc/cuda $flags -o "$out/$name.cubin" src/cuda/conv_cuda.cu
  echo "check-cuda-variants: $name compiles"
done
