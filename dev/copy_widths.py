#!/usr/bin/env python3
"""Copy bandwidth by access width and pattern (CuPy kernels), bytes read + written.

`flat`: a grid-stride copy, each thread `width` bytes per access. `strip`: the conv forward's
pattern, a thread owns `width` bytes of a [S, 8192-byte] row and walks `run` rows (runs of
consecutive threads cover a row), grid-stride over (run, column) items as the forward does.

Usage (device): python3 dev/copy_widths.py
"""
import statistics

import cupy as cp

SRC = r"""
template <typename T>
__device__ void flat(const T *__restrict__ s, T *__restrict__ d, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        d[i] = s[i];
}
template <typename T>
__device__ void strip(const T *__restrict__ s, T *__restrict__ d, long long rows, long long cols,
                      int run) {
    const long long items = (rows / run) * cols;
    for (long long it = blockIdx.x * (long long)blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        const long long r0 = (it / cols) * run, c = it % cols;
        T v[8];
        for (int r = 0; r < run; r += 8) {
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = s[(r0 + r + k) * cols + c];
#pragma unroll
            for (int k = 0; k < 8; k++) d[(r0 + r + k) * cols + c] = v[k];
        }
    }
}
extern "C" {
__global__ void flat4(const unsigned *s, unsigned *d, long long n) { flat(s, d, n); }
__global__ void flat8(const uint2 *s, uint2 *d, long long n) { flat(s, d, n); }
__global__ void flat16(const uint4 *s, uint4 *d, long long n) { flat(s, d, n); }
__global__ void strip4(const unsigned *s, unsigned *d, long long r, long long c, int run) { strip(s, d, r, c, run); }
__global__ void strip8(const uint2 *s, uint2 *d, long long r, long long c, int run) { strip(s, d, r, c, run); }
__global__ void strip16(const uint4 *s, uint4 *d, long long r, long long c, int run) { strip(s, d, r, c, run); }
}
"""


def timed(fn, reps=30):
    for _ in range(10):
        fn()
    t = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        t.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(t)


def main():
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    nbytes = 1 << 31
    src = cp.random.randint(0, 255, nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)
    row_bytes = 8192
    rows = nbytes // row_bytes
    print(f"{'kernel':10} {'width':>5} {'run':>4} {'blocks/SM':>9} {'GB/s':>7}")
    for width in (4, 8, 16):
        for bps in (2, 4, 8):
            grid = (sms * bps,)
            k = mod.get_function(f"flat{width}")
            ms = timed(lambda: k(grid, (256,), (src, dst, cp.int64(nbytes // width))))
            print(f"{'flat':10} {width:5} {'':>4} {bps:9} {2 * nbytes / ms / 1e6:7.0f}")
        for run in (32, 64):
            for bps in (2, 4):
                grid = (sms * bps,)
                k = mod.get_function(f"strip{width}")
                ms = timed(lambda: k(grid, (256,), (src, dst, cp.int64(rows),
                                                    cp.int64(row_bytes // width), cp.int32(run))))
                print(f"{'strip':10} {width:5} {run:4} {bps:9} {2 * nbytes / ms / 1e6:7.0f}")
    assert bool((dst == src).all())


if __name__ == "__main__":
    main()
