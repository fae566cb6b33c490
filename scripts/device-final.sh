#!/usr/bin/env bash
# A shorter device run for a last check after small changes: build, the GPU and GPU+MPI tests,
# and the binding's CUDA tests. Logs under $OUT. Carry .deps as for device-check.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cake-device-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
for f in .deps/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
status=0
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAKE_WERROR=ON > "$OUT/configure.log" 2>&1 \
  && cmake --build build-device -j 16 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
ctest --test-dir build-device --output-on-failure -j 8 -LE large > "$OUT/ctest.log" 2>&1 || status=1
grep -E "tests passed|tests failed|\*\*\*Failed" "$OUT/ctest.log"
CAKE_LIBRARY=$PWD/build-device/libcake_cuda.so PYTHONPATH=python timeout 400 \
  python3 -m pytest -p no:cacheprovider -q python/tests/test_cuda.py python/tests/test_bad_input.py \
  > "$OUT/pytest.log" 2>&1 || status=1
tail -3 "$OUT/pytest.log"
exit $status
