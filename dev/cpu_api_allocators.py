#!/usr/bin/env python3
"""What the allocator behind torch.empty costs cake's public API on the CPU.

The binding's outputs (y, dx) are fresh tensors each call; under glibc's malloc, blocks this
large are new mappings, so each call pays a page fault and the kernel's zeroing of every page.
An allocator that keeps freed memory for reuse does not. Times the forward and forward+backward
of ``cake_causal_conv1d_det_multi_kcp`` at 3 x [32768, 4096] (median and min ms of 7 calls after
one warm-up), under whatever allocator the process was started with:

    for pre in "" /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \\
               /usr/lib/x86_64-linux-gnu/libjemalloc.so.2; do
        LD_PRELOAD=$pre python dev/cpu_api_allocators.py
    done

(Debian packages libtcmalloc-minimal4 and libjemalloc2; cake installed, or CAKE_LIBRARY and
PYTHONPATH=python set.)"""
import os
import statistics
import time

import torch

import cake

N, S, C = 3, 32768, 4096


def main():
    g = torch.Generator().manual_seed(1)
    cu = torch.tensor([0, S // 2, S], dtype=torch.int32)
    xs = [torch.randn(S, C, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(N)]
    ws = [torch.randn(C, 4, generator=g).requires_grad_() for _ in range(N)]
    dys = [torch.randn(S, C, generator=g).to(torch.bfloat16) for _ in range(N)]
    ctx = cake.ContextDetKcp(cu)

    def fwd():
        return cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx)

    def fwd_bwd():
        return torch.autograd.grad(fwd(), xs + ws, dys)

    allocator = os.path.basename(os.environ.get("LD_PRELOAD", "")) or "glibc malloc"
    for name, f in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        f()
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            out = f()
            times.append((time.perf_counter() - t0) * 1e3)
            del out
        print(f"{allocator:28s} {name:8s} median {statistics.median(times):8.1f} ms"
              f"  min {min(times):8.1f}")


if __name__ == "__main__":
    main()
