#!/usr/bin/env bash
# CPU kernel variants (the compile-time knobs of src/conv_cpu.h and src/conv_cpu_kernels.inc)
# built side by side and timed in turn, rounds alternating, since a shared machine's memory
# bandwidth moves between minutes: each line of VARIANTS is "name: cc -D flags".
# Usage: bash dev/cpu_variants.sh [variants file]; ROUNDS (2), KINDS (plain), BENCH_ARGS (the
# main shape at 1 and 2 threads) choose what runs; logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cake-cpu-variants}
mkdir -p "$OUT"
file=${1:-dev/cpu_variants.txt}
names=()
while IFS=: read -r name flags; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  names+=("$name")
  cmake -S . -B "build-cpu-$name" -DCMAKE_BUILD_TYPE=Release -DCAKE_ENABLE_CUDA=OFF \
    -DBUILD_TESTING=OFF -DCMAKE_C_FLAGS="$flags" > "$OUT/cfg-$name.log" 2>&1 &&
    cmake --build "build-cpu-$name" -j "$(nproc)" --target bench_cpu > "$OUT/build-$name.log" 2>&1 ||
    echo "build $name failed"
done < "$file"
for round in $(seq "${ROUNDS:-2}"); do
  for kind in ${KINDS:-plain}; do
    for name in "${names[@]}"; do
      bench="build-cpu-$name/bench/bench_cpu"
      [ -x "$bench" ] || continue
      echo "== round $round, $name, $kind"
      timeout 120 "$bench" --variant "$kind" ${BENCH_ARGS:---threads 1,2 --repeats 5} |
        grep -E "^[12] "
    done
  done
done
