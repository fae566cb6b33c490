#!/usr/bin/env bash
# One device call for tuning: build, the GPU tests (no large ones), GPU = CPU for every variant,
# copy bandwidth by access width, ncu sections of the main kernels, a quick benchmark.
# Logs under $OUT. Carry .deps (cmocka, see scripts/device-check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cake-profile}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
for f in .deps/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
t0=$SECONDS
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAKE_WERROR=ON > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-device -j 16 > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "== build $((SECONDS - t0)) s"
lib=build-device/libcake_cuda.so
echo "== GPU = CPU, every variant"
timeout 120 python3 dev/check_variants.py --lib $lib 2>&1 | tail -40
echo "== tests"
timeout 200 ctest --test-dir build-device -j 8 -LE large --output-on-failure > "$OUT/ctest.log" 2>&1
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$OUT/ctest.log" | tail -12
echo "== copy by width ($((SECONDS - t0)) s)"
timeout 120 python3 dev/copy_widths.py 2>&1 | tail -40
echo "== ncu ($((SECONDS - t0)) s)"
timeout 240 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section Occupancy --section WarpStateStats --section LaunchStats \
  -k regex:"forward_kernel|backward_kernel" \
  python3 bench/bench_gpu.py --lib $lib --once --no-torch --shapes main,small \
  --variants plain,bias+silu > "$OUT/ncu.txt" 2>&1 || echo "ncu failed"
grep -E "forward_kernel|backward_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput|L2 Hit Rate|Warp Cycles Per Issued|Issued Warp" "$OUT/ncu.txt" | head -80
echo "== bench ($((SECONDS - t0)) s)"
timeout 200 python3 bench/bench_gpu.py --lib $lib --quick --coop off,on --variants plain,bias,bias+silu \
  --json "$OUT/bench.json" 2>&1 | tail -40
echo "== end ($((SECONDS - t0)) s)"
