#!/usr/bin/env python3
"""GPU = CPU bitwise for every variant, plan-level calls (P = 1) through ctypes, on the
benchmark's problems (random sequence lengths) plus a NaN-laden one: a quick check of new
kernels before the full test suite (tests/cuda runs the thorough one).

Usage (device): PYTHONPATH=python python3 dev/check_variants.py --lib build/libcake_cuda.so
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import bench_gpu  # noqa: E402

P = ctypes.c_void_p


def cpu_call(lib, p):
    """y, dx, dw, dbias of the CPU plan-level calls on host copies of p's arrays."""
    lib.cake_cpu_forward.argtypes = [P, ctypes.c_int, P, P, P, P, P, P, P]
    lib.cake_cpu_backward.argtypes = [P, ctypes.c_int, P, P, P, P, P, P, P, P, P, P]
    h = lambda ts: [t.cpu() for t in ts]  # noqa: E731
    x, w, hist, dy, fut = h(p.x), h(p.w), h(p.history), h(p.dy), h(p.future)
    bias = h(p.bias)
    y = [torch.empty_like(t) for t in x]
    dx = [torch.empty_like(t) for t in x]
    dw = [torch.empty_like(t) for t in w]
    dbias = [torch.empty_like(b) for b in bias]
    arrays = (bench_gpu.ptrs(bias), bench_gpu.ptrs(dbias))
    params = bench_gpu._lib.ConvParams(p.params.activation,
                                       bench_gpu.addr(arrays[0]) if bias else None,
                                       bench_gpu.addr(arrays[1]) if bias else None)
    pt = bench_gpu.ptrs
    bench_gpu.check(lib, lib.cake_cpu_forward(p.plan, p.n, p.channels, pt(x), pt(w),
                                              ctypes.byref(params), pt(hist), pt(y), None), "cpu fwd")
    bench_gpu.check(lib, lib.cake_cpu_backward(p.plan, p.n, p.channels, pt(x), pt(w),
                                               ctypes.byref(params), pt(hist), pt(dy), pt(fut),
                                               pt(dx), pt(dw), None), "cpu bwd")
    return y, dx, dw, dbias


def bits_equal(a, b):
    return torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a.view(torch.int32),
                       b.view(torch.int16) if b.dtype == torch.bfloat16 else b.view(torch.int32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libcake_cuda.so")
    args = ap.parse_args()
    lib = bench_gpu.load(args.lib)
    failures = 0
    for name, n, S, C, mean in [("S=8192", 3, 8192, 4096, 4096), ("small", 1, 2048, 2048, 512),
                                ("short", 2, 4099, 72, 3), ("nan", 2, 1000, 64, 7)]:
        for variant in bench_gpu.VARIANTS:
            p = bench_gpu.Problem(lib, n, S, C, mean, seed=7, variant=variant)
            if name == "nan":  # several NaN operands in the same rows, and infinities
                for t in p.x + p.dy:
                    t.view(-1)[::37] = float("nan")
                    t.view(-1)[5::53] = float("inf")
                for t in p.w + p.bias:
                    t.view(-1)[::11] = float("nan")
                # (the pools keep the values from before: GPU and CPU read the same ones)
            for coop in ("off", "on"):
                p.forward(coop)
                p.backward(coop)
                torch.cuda.synchronize()
                y, dx, dw, dbias = cpu_call(lib, p)
                got = [("y", p.y, y), ("dx", p.dx, dx), ("dw", p.dw, dw), ("dbias", p.dbias, dbias)]
                bad = [k for k, g, c in got if not all(bits_equal(a.cpu(), b) for a, b in zip(g, c))]
                print(f"{name:7} {variant:9} coop={coop:3} {'OK' if not bad else 'DIFFER: ' + ','.join(bad)}")
                failures += bool(bad)
    print("all equal" if not failures else f"{failures} cases differ")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
