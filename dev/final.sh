#!/usr/bin/env bash
# The shortest complete GPU check that fits what is left of a session's device time: build,
# the GPU tests (C and the binding's), GPU = CPU per variant, the benchmarks (C-level and the
# public API), one kernel variant beside the default. Logs under $OUT. Carry .deps (cmocka)
# and, for FLA in the API benchmark and its tests, .whl. PART=1 (default) builds and runs
# everything but FLA; PART=2 builds the library alone (or finds it built) for FLA's comparisons
# (FLA's first calls autotune for minutes) and the public API benchmark. PART=3 checks a kernel
# candidate: the build, GPU = CPU, the C GPU tests, then dev/variants.sh on VARIANTS (a file).
# PART=4 runs the binding's tests alone on the GPU (its own and FLA's), no benchmark.
set -uo pipefail
PART=${PART:-1}
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cake-final}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export PYTHONUNBUFFERED=1
for f in .deps/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > "$OUT/wheels.log" 2>&1 && export PYTHONPATH=/tmp/site
fi
t0=$SECONDS
# Steps run while time is left: DEADLINE seconds from the start (default 540).
DEADLINE=${DEADLINE:-540}
left() { echo $((DEADLINE - (SECONDS - t0))); }
lib=$PWD/build-device/libcake_cuda.so
binding() { CAKE_LIBRARY=$lib PYTHONPATH=$PWD/python:${PYTHONPATH:-} "$@"; }
GPU_TESTS="test_cuda_conv test_activation_cuda test_bf16_cuda test_cuda_cp_mpi"
build_device() {  # build_device TARGET...: the build main makes, into build-device
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAKE_WERROR=ON > "$OUT/configure.log" 2>&1 \
    || { tail -30 "$OUT/configure.log"; exit 1; }
  cmake --build build-device -j 12 --target "$@" > "$OUT/build.log" 2>&1 \
    || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
}
c_gpu_checks() {  # GPU = CPU for every variant, then the C GPU tests (at most 200 s)
  echo "== GPU = CPU, every variant"
  timeout 100 python3 dev/check_variants.py --lib "$lib" > "$OUT/check_variants.log" 2>&1
  tail -2 "$OUT/check_variants.log"
  echo "== C GPU tests ($((SECONDS - t0)) s)"
  [ "$(left)" -gt 60 ] && timeout $(( $(left) < 200 ? $(left) : 200 )) ctest --test-dir build-device -j 4 \
    -R "cuda_conv|activation_cuda|bf16_cuda|cuda_cp_mpi" --output-on-failure > "$OUT/ctest.log" 2>&1
  grep -E "tests passed|tests failed|\*\*\*Failed|Timeout|Passed|Skipped" "$OUT/ctest.log" | tail -12
}
if [ "$PART" = 2 ]; then
  build_device cake_cuda_shared
  echo "== FLA comparisons and bias/SiLU through the binding"
  binding timeout $(( $(left) < 300 ? $(left) : 300 )) python3 -m pytest -p no:cacheprovider -q -rs \
    python/tests/test_fla_cuda.py python/tests/test_cuda_bias_silu.py python/tests/test_bias_silu.py \
    python/tests/test_short_convolution.py > "$OUT/pytest-fla.log" 2>&1
  tail -6 "$OUT/pytest-fla.log"
  echo "== where the API's host time goes ($((SECONDS - t0)) s)"
  binding timeout 90 python3 dev/profile_api_host.py > "$OUT/profile_api_host.log" 2>&1
  grep -E "^====|^ +[0-9.]+  " "$OUT/profile_api_host.log" | head -40
  echo "== public API benchmark ($((SECONDS - t0)) s)"
  binding timeout $(left) python3 bench/bench_api.py > "$OUT/bench_api.log" 2>&1; tail -40 "$OUT/bench_api.log"
  echo "== end ($((SECONDS - t0)) s)"
  exit 0
fi
if [ "$PART" = 4 ]; then
  build_device cake_cuda_shared
  echo "== binding's GPU tests, FLA's comparisons ($((SECONDS - t0)) s)"
  # test_cuda_bias_silu.py first: its capture test after the file's other tests is the order
  # that found the garbage collector freeing a context inside a capture (test_lifetime.py)
  binding timeout $(left) python3 -m pytest -p no:cacheprovider -q -rs \
    python/tests/test_cuda_bias_silu.py python/tests/test_lifetime.py python/tests/test_cuda.py \
    python/tests/test_cuda_graph.py python/tests/test_compile.py python/tests/test_bad_input.py \
    python/tests/test_fla_cuda.py python/tests/test_bias_silu.py \
    python/tests/test_short_convolution.py > "$OUT/pytest-gpu.log" 2>&1
  tail -8 "$OUT/pytest-gpu.log"
  echo "== end ($((SECONDS - t0)) s)"
  exit 0
fi
if [ "$PART" = 3 ]; then
  build_device cake_cuda_shared $GPU_TESTS
  echo "== built ($((SECONDS - t0)) s)"
  c_gpu_checks
  echo "== variants ($((SECONDS - t0)) s)"
  OUT="$OUT" timeout $(left) bash dev/variants.sh "${VARIANTS:-dev/variants.txt}"
  exit 0
fi
( cmake -S . -B build-var-lanes1 -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DCAKE_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DCMAKE_CUDA_FLAGS="-DCAKE_CUDA_FORWARD_LANES=1 -DCAKE_CUDA_FORWARD_MIN_BLOCKS=4" > /dev/null 2>&1 \
  && cmake --build build-var-lanes1 -j 4 --target cake_cuda_shared > "$OUT/build-lanes1.log" 2>&1 ) &
build_device cake_cuda_shared $GPU_TESTS
wait
echo "== built ($((SECONDS - t0)) s)"
c_gpu_checks
echo "== binding's GPU tests ($((SECONDS - t0)) s)"
[ "$(left)" -gt 40 ] && binding timeout $(( $(left) < 200 ? $(left) : 200 )) python3 -m pytest -p no:cacheprovider -q -rs \
  python/tests/test_cuda.py python/tests/test_cuda_graph.py python/tests/test_compile.py \
  python/tests/test_flashinfer.py python/tests/test_bad_input.py > "$OUT/pytest.log" 2>&1
tail -4 "$OUT/pytest.log"
echo "== C-level benchmark ($((SECONDS - t0)) s)"
[ "$(left)" -gt 30 ] && timeout $(( $(left) < 120 ? $(left) : 120 )) python3 bench/bench_gpu.py --lib "$lib" --quick --coop off --variants plain,bias+silu \
  --json "$OUT/bench_gpu.json" 2>&1 | grep -E "cake|torch|device" | tail -20
if [ -f build-var-lanes1/libcake_cuda.so ] && [ "$(left)" -gt 40 ]; then
  echo "== variant: one pair per thread in the forward ($((SECONDS - t0)) s)"
  timeout 60 python3 bench/bench_gpu.py --lib build-var-lanes1/libcake_cuda.so --quick --coop off \
    --no-torch --variants plain,bias+silu --json "$OUT/bench_lanes1.json" 2>&1 | grep -E "fwd" | tail -8
fi
echo "== end ($((SECONDS - t0)) s)"
