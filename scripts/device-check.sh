#!/usr/bin/env bash
# Everything that needs the GPU, in one call on the device machine. Logs go to $OUT (the device
# tool brings them back).
#
#   bash scripts/device-check.sh [mode]
#     full   (default) build; every test (CPU, MPI, GPU); compute-sanitizer on a small case; the
#            large-tensor tests; kernel variants ($VARIANTS); ncu share of the dw tree; CP over
#            NCCL on 2 and 4 GPUs where there are that many; the GPU benchmark
#     quick  as full without the large tensors, and a shorter benchmark
#     final  a last check after small changes: build, every test, the binding's CUDA tests
#     bench  build and the GPU benchmark only
#
# The device image has no cmocka: before the call, here,
#   mkdir -p .deps && (cd .deps && apt-get download libcmocka0 libcmocka-dev)
#   echo /.deps/ >> .git/info/exclude
# and name .deps in the call's carry list.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cake-device-out}
mkdir -p "$OUT"
mode=${1:-full}
case "$mode" in
  full|quick|final|bench) ;;
  *) echo "usage: $0 [full|quick|final|bench]" >&2; exit 2 ;;
esac
# Never use NVLink multicast on the shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
# --oversubscribe is Open MPI's; MPICH's mpiexec oversubscribes without it and rejects it.
MPIRUN_FLAGS=""
mpirun --version 2>&1 | grep -q "Open MPI" && MPIRUN_FLAGS="--oversubscribe"
status=0
step() { echo "== $*"; }
# Runs one step's command with its output in $OUT/<log>; on failure shows the log's end.
logged() {
  local log=$1
  shift
  "$@" > "$OUT/$log" 2>&1 && return 0
  echo "  FAILED: $* (last lines of $OUT/$log)"
  tail -40 "$OUT/$log"
  return 1
}

step "machine ($mode)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
which mpicc mpirun cmake nvcc compute-sanitizer 2>&1 | sed 's/^/  /'

# cmocka is not on the image: the carried Debian packages hold only its header and library.
for f in .deps/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null

step "build"
logged configure.log cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAKE_WERROR=ON \
  || exit 1
grep "cake:" "$OUT/configure.log"
logged build.log cmake --build build-device -j 16 || exit 1

if [ "$mode" != bench ]; then
  step "tests"
  ctest --test-dir build-device --output-on-failure -j 8 -LE large > "$OUT/ctest.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped|Not Run" "$OUT/ctest.log" | tail -30
fi

if [ "$mode" = final ]; then
  step "the binding's CUDA tests"
  CAKE_LIBRARY=$PWD/build-device/libcake_cuda.so PYTHONPATH=python timeout 400 \
    python3 -m pytest -p no:cacheprovider -q python/tests/test_cuda.py python/tests/test_bad_input.py \
    python/tests/test_lifetime.py \
    > "$OUT/pytest.log" 2>&1 || status=1
  tail -3 "$OUT/pytest.log"
  exit $status
fi

if [ "$mode" = full ] || [ "$mode" = quick ]; then
  if [ -x build-device/tests/cuda/test_cuda_conv ]; then
    step "compute-sanitizer (small case)"
    for tool in memcheck racecheck; do
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 1 \
        build-device/tests/cuda/test_cuda_conv --small > "$OUT/sanitizer-$tool.log" 2>&1 \
        && echo "  $tool: clean" || { echo "  $tool: FAILED"; tail -20 "$OUT/sanitizer-$tool.log"; status=1; }
    done
  fi

  if [ "$mode" = full ]; then
    step "large tensors (> 2^31 and > 2^32 elements)"
    CAKE_LARGE_TESTS=1 ctest --test-dir build-device --output-on-failure -L large > "$OUT/large.log" 2>&1 || status=1
    grep -E "tests passed|tests failed|Passed|Failed" "$OUT/large.log" | tail -5
  fi

  # Kernel variants (compile-time knobs), cake only, for tuning:
  # VARIANTS="FORWARD_STAGES:BACKWARD_STAGES:BACKWARD_MIN_BLOCKS:FORWARD_ROWS ..."
  for v in ${VARIANTS:-}; do
    IFS=: read -r fstages bstages minb rows <<< "$v"
    step "variant: stages $fstages/$bstages, backward min blocks $minb, forward rows $rows"
    dir="build-var-$fstages-$bstages-$minb-$rows"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DCAKE_BUILD_BENCH=OFF \
      -DCMAKE_CUDA_FLAGS="-DCAKE_CUDA_FORWARD_STAGES=$fstages -DCAKE_CUDA_BACKWARD_STAGES=$bstages -DCAKE_CUDA_BACKWARD_MIN_BLOCKS=$minb -DCAKE_CUDA_FORWARD_ROWS=$rows" \
      > /dev/null 2>&1 && cmake --build "$dir" -j 16 --target cake_cuda_shared > /dev/null 2>&1 \
      && python3 bench/bench_gpu.py --lib "$dir/libcake_cuda.so" --quick --no-torch \
           --shapes main,small 2>&1 | grep -v "^\*" | tee -a "$OUT/variants.log"
  done

  step "dw tree share of the backward (ncu, main shape, ordinary launches)"
  ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"backward_kernel|tree_kernel|forward_kernel" \
    python3 bench/bench_gpu.py --lib build-device/libcake_cuda.so --once --no-torch --shapes main \
    > "$OUT/ncu.log" 2>&1 || echo "  ncu failed (see ncu.log)"
  grep -E "backward_kernel|tree_kernel|forward_kernel|gpu__time_duration" "$OUT/ncu.log" | sed 's/^ */  /' | head -12

  gpus=$(nvidia-smi -L | wc -l)
  if [ "$gpus" -ge 2 ] && [ -x build-device/bench/bench_cp_nccl ]; then
    step "multi-GPU: CP over NCCL on $gpus GPUs"
    for np in 2 4; do
      [ "$np" -le "$gpus" ] || continue
      for part in contiguous zigzag; do
        mpirun $MPIRUN_FLAGS -np $np build-device/bench/bench_cp_nccl --partition $part 2>&1 \
          | tee -a "$OUT/multi-gpu.log" || status=1
      done
    done
  fi
fi

step "benchmark"
python3 bench/bench_gpu.py --lib build-device/libcake_cuda.so $([ "$mode" = quick ] && echo --quick) \
  2>&1 | tee "$OUT/bench.log" || status=1
exit $status
