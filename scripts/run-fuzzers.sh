#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang under ASan + UBSan and runs each for a bounded
# time on a scratch copy of its committed seed corpus (fuzz/corpus/<harness>/), so the repository
# is never modified. Exits non-zero if any harness finds a crash, a leak, a sanitizer report or a
# failed check; the reproducer is printed and kept under the scratch directory.
#
#   scripts/run-fuzzers.sh                      # every harness, FUZZ_SECONDS (default 50) each
#   FUZZ_SECONDS=600 scripts/run-fuzzers.sh fuzz_args     # one harness, longer
#   FUZZ_BUILD=build-fuzz FUZZ_WORK=/tmp/cake-fuzz-work   # where it builds / keeps its scratch
#
# Reproduce a crash:  build-fuzz/fuzz/<harness> <crash-file>
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${FUZZ_SECONDS:-50}
BUILD=${FUZZ_BUILD:-build-fuzz}
WORK=${FUZZ_WORK:-$(mktemp -d /tmp/cake-fuzz-XXXXXX)}
JOBS=${JOBS:-$(nproc)}
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(fuzz_partition fuzz_args fuzz_single_rank)
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"

# clang's libFuzzer and sanitizer runtimes live in Debian's libclang-rt-<version>-dev, which
# `clang` only recommends: install both when a trial link fails.
fuzzer_links() {
  local dir
  dir=$(mktemp -d /tmp/cake-fuzz-probe-XXXXXX)
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$dir/p.c"
  clang -fsanitize=fuzzer,address,undefined "$dir/p.c" -o "$dir/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}
if ! command -v clang >/dev/null || ! fuzzer_links; then
  echo "run-fuzzers: installing clang and its libFuzzer runtime (libclang-rt-dev)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends clang libclang-rt-dev cmake make
  fuzzer_links || { echo "run-fuzzers: clang -fsanitize=fuzzer still does not link" >&2; exit 1; }
fi

cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DCAKE_WERROR=ON \
  -DCAKE_BUILD_FUZZERS=ON -DBUILD_TESTING=OFF -DCAKE_BUILD_BENCH=OFF -DCAKE_ENABLE_CUDA=OFF \
  -DCMAKE_C_FLAGS="-O1 $SAN -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" >"$WORK/cmake.log" 2>&1 ||
  { cat "$WORK/cmake.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target "${HARNESSES[@]}" >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log"; exit 1; }

# Threads per call come from CAKE_NUM_THREADS when a harness passes 0: keep it small and fixed.
export CAKE_NUM_THREADS=2
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
summary=()
for h in "${HARNESSES[@]}"; do
  corpus="$WORK/corpus/$h"
  mkdir -p "$corpus" "$WORK/artifacts/$h"
  cp fuzz/corpus/"$h"/* "$corpus"/ 2>/dev/null || true
  log="$WORK/$h.log"
  start=$SECONDS
  # -timeout: one input may not take longer (the partition harness plans up to 2^17 ranks).
  # The subshell waits for the harness, so bash's own "Aborted" line goes to the log too.
  if ("$BUILD/fuzz/$h" "$corpus" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$WORK/artifacts/$h/"; exit $?) >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  line="$h: $status, ${execs:-?} executions in $((SECONDS - start))s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) inputs"
  summary+=("$line")
  echo "run-fuzzers: $line"
  if [ "$status" != ok ]; then
    tail -n 60 "$log"
    for a in "$WORK/artifacts/$h"/*; do
      [ -e "$a" ] && echo "run-fuzzers: reproducer $a  (run: $BUILD/fuzz/$h $a)"
    done
  fi
done
echo "run-fuzzers: summary"
printf '  %s\n' "${summary[@]}"
echo "run-fuzzers: logs and scratch corpus in $WORK"
exit $failed
