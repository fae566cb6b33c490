#!/usr/bin/env bash
# Kernel variants (compile-time knobs of src/cuda/conv_kernels.cuh and conv_cuda.cu) built side
# by side and timed in one device call: each line of VARIANTS is "name: nvcc -D flags".
# Usage (device): bash dev/variants.sh [variants file]; logs and JSON under $OUT. CHECK=1: also
# GPU = CPU bitwise on each build (dev/check_variants.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cake-variants}
mkdir -p "$OUT"
file=${1:-dev/variants.txt}
export PYTHONUNBUFFERED=1
build() { # name flags...
    local name=$1; shift
    cmake -S . -B "build-var-$name" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
      -DCAKE_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS="$*" \
      > "$OUT/cfg-$name.log" 2>&1 && cmake --build "build-var-$name" -j 4 --target cake_cuda_shared \
      > "$OUT/build-$name.log" 2>&1 || echo "build $name failed"
}
t0=$SECONDS
while IFS=: read -r name flags; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  build "$name" $flags &
  while [ "$(jobs -r | wc -l)" -ge 4 ]; do sleep 1; done
done < "$file"
wait
echo "== built in $((SECONDS - t0)) s"
while IFS=: read -r name flags; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  lib="build-var-$name/libcake_cuda.so"
  [ -f "$lib" ] || continue
  echo "== $name: $flags"
  timeout 120 python3 bench/bench_gpu.py --lib "$lib" --quick --coop off --no-torch \
    --shapes ${SHAPES:-main,S=8192,small} --variants ${KINDS:-plain,bias+silu} \
    --json "$OUT/$name.json" 2>&1 | grep -E "^(main|S=8192|small) " | grep -E "cake|floor"
  if [ "${CHECK:-0}" = 1 ]; then  # GPU = CPU on this build too (dev/check_variants.py)
    timeout 100 python3 dev/check_variants.py --lib "$lib" > "$OUT/check-$name.log" 2>&1
    echo "GPU = CPU ($name): $(tail -1 "$OUT/check-$name.log")"
  fi
done < "$file"
echo "== end $((SECONDS - t0)) s"
