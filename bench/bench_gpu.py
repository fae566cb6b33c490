#!/usr/bin/env python3
"""GPU benchmark: cake's forward and backward kernels (the C-level calls, plan-level, P = 1)
beside torch.nn.functional.conv1d, for the plain op and for bias + SiLU.

Bytes counted: forward x read + y written; backward x, dy read + dx written (pools, weights,
bias and the dw workspace are not counted). GB/s is also given as a percentage of the
device-to-device copy bandwidth measured in the same run (a 16-byte copy kernel, bytes read +
written). Times are medians of CUDA-graph replays (one launch sequence per replay), so host
launch overhead is excluded; rows "xN" time N calls back to back in one graph, per call (the
pace of a training step's queued kernels, without the replay's own start); rows "xN after torch"
the same with an empty torch kernel before each call, less those kernels alone. Floor rows per
shape: the same timings of one empty kernel and of device-to-device copies of the bytes each
direction counts (what no kernel of that size beats).

Usage: python3 bench/bench_gpu.py --lib build/libcake_cuda.so [--quick]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F


def _load_structs():
    """python/cake/_lib.py, the one ctypes definition of cake.h's structs, loaded on its own
    (the package itself needs not import)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "cake", "_lib.py")
    spec = importlib.util.spec_from_file_location("cake_structs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_lib = _load_structs()

CAKE_SUCCESS = 0
COOP = {"auto": -1, "off": 0, "on": 1}
ACTIVATION_SILU = 1
VARIANTS = {"plain": (False, False), "bias": (True, False), "silu": (False, True),
            "bias+silu": (True, True)}


def load(path):
    lib = ctypes.CDLL(path)
    P = ctypes.c_void_p
    lib.cake_last_error.restype = ctypes.c_char_p
    lib.cake_partition_create_contiguous.argtypes = [P, ctypes.c_int64, ctypes.c_int, P]
    lib.cake_plan_create.argtypes = [P, ctypes.c_int, P]
    lib.cake_plan_num_fragments.argtypes = [P]
    lib.cake_plan_num_fragments.restype = ctypes.c_int64
    lib.cake_plan_fragment.argtypes = [P, ctypes.c_int64, P]
    lib.cake_cuda_plan_create.argtypes = [P, P]
    # (plan, n, channels, params, &bytes)
    lib.cake_cuda_backward_workspace_size.argtypes = [P, ctypes.c_int, P, P, P]
    # (plan, n, channels, x, w, params, history, y, cooperative, stream)
    lib.cake_cuda_forward.argtypes = [P, ctypes.c_int, P, P, P, P, P, P, ctypes.c_int, P]
    # (plan, n, channels, x, w, params, history, dy, future, dx, dw, cooperative, workspace,
    #  workspace_bytes, stream)
    lib.cake_cuda_backward.argtypes = [P, ctypes.c_int, P, P, P, P, P, P, P, P, P, ctypes.c_int,
                                       P, ctypes.c_size_t, P]
    return lib


def check(lib, status, what):
    if status != CAKE_SUCCESS:
        raise RuntimeError(f"{what}: {lib.cake_last_error().decode()}")


def ptrs(tensors):
    return (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])


def addr(array):
    return ctypes.cast(array, ctypes.c_void_p)


class Problem:
    """n tensors of [S, C] packed with random sequence lengths, on one rank (P = 1)."""

    def __init__(self, lib, n, S, C, mean_length, seed, variant="plain"):
        g = torch.Generator().manual_seed(seed)
        lengths, total = [], 0
        while total < S:
            ln = min(int(torch.randint(1, 2 * mean_length, (1,), generator=g)), S - total)
            lengths.append(ln)
            total += ln
        self.cu = (ctypes.c_int64 * (len(lengths) + 1))(0, *torch.tensor(lengths).cumsum(0).tolist())
        self.lib, self.n, self.S, self.C = lib, n, S, C
        part, plan = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib, lib.cake_partition_create_contiguous(self.cu, len(lengths), 1, ctypes.byref(part)), "partition")
        check(lib, lib.cake_plan_create(part, 0, ctypes.byref(plan)), "plan")
        self.plan = plan
        self.cuda_plan = ctypes.c_void_p()
        check(lib, lib.cake_cuda_plan_create(plan, ctypes.byref(self.cuda_plan)), "cuda plan")
        frags = []
        for f in range(lib.cake_plan_num_fragments(plan)):
            fr = _lib.Fragment()
            check(lib, lib.cake_plan_fragment(plan, f, ctypes.byref(fr)), "fragment")
            frags.append(fr)
        self.channels = (ctypes.c_int64 * n)(*[C] * n)
        dev = "cuda"
        self.x = [torch.randn(S, C, generator=g).to(torch.bfloat16).to(dev) for _ in range(n)]
        self.dy = [torch.randn(S, C, generator=g).to(torch.bfloat16).to(dev) for _ in range(n)]
        self.w = [(torch.rand(C, 4, generator=g) - 0.5).to(dev) for _ in range(n)]
        self.y = [torch.empty_like(t) for t in self.x]
        self.dx = [torch.empty_like(t) for t in self.x]
        self.dw = [torch.empty_like(t) for t in self.w]
        with_bias, silu = VARIANTS[variant]
        self.bias = [(torch.rand(C, generator=g) - 0.5).to(dev) for _ in range(n)] if with_bias else []
        self.dbias = [torch.empty_like(b) for b in self.bias]
        self._arrays = (ptrs(self.bias), ptrs(self.dbias))  # kept alive with the params
        self.params = _lib.ConvParams(ACTIVATION_SILU if silu else 0,
                                      addr(self._arrays[0]) if with_bias else None,
                                      addr(self._arrays[1]) if with_bias else None)
        # Pools from the fragments (P = 1: every halo row is local or +0.0).
        hist_idx, fut_idx = [], []
        for fr in frags:
            hist_idx += [h.local_row for h in fr.history]
            fut_idx += [h.local_row for h in fr.future]
        self.history = [self._pool(t, hist_idx) for t in self.x]
        # The future pool: dy rows, then with an activation x at the same rows (cake.h).
        self.future = [torch.cat([self._pool(d, fut_idx)] + ([self._pool(t, fut_idx)] if silu else []))
                       for d, t in zip(self.dy, self.x)]
        size = ctypes.c_size_t()
        check(lib, lib.cake_cuda_backward_workspace_size(self.cuda_plan, n, self.channels,
                                                         ctypes.byref(self.params),
                                                         ctypes.byref(size)), "ws")
        self.workspace = torch.empty(max(size.value, 16), dtype=torch.uint8, device=dev)
        self.num_seqs = len(lengths)

    @staticmethod
    def _pool(rows, idx):
        pool = torch.zeros(len(idx), rows.shape[1], dtype=rows.dtype, device=rows.device)
        sel = [i for i, r in enumerate(idx) if r >= 0]
        if sel:
            pool[sel] = rows[[idx[i] for i in sel]]
        return pool

    def forward(self, coop):
        check(self.lib, self.lib.cake_cuda_forward(
            self.cuda_plan, self.n, self.channels, ptrs(self.x), ptrs(self.w),
            ctypes.byref(self.params), ptrs(self.history), ptrs(self.y), COOP[coop], ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "forward")

    def backward(self, coop):
        check(self.lib, self.lib.cake_cuda_backward(
            self.cuda_plan, self.n, self.channels, ptrs(self.x), ptrs(self.w),
            ctypes.byref(self.params), ptrs(self.history), ptrs(self.dy), ptrs(self.future), ptrs(self.dx), ptrs(self.dw), COOP[coop],
            ctypes.c_void_p(self.workspace.data_ptr()), self.workspace.numel(),
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "backward")


def time_events(fn, replays):
    """Median milliseconds of fn() between CUDA events (launch overhead included)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_graph(fn, replays, calls=1):
    """Median milliseconds of one replay of a CUDA graph holding fn(), or `calls` fn() back to
    back (then per call: the kernels' pace without the replay's own start)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times) / calls


def copy_bandwidth(nbytes):
    """Device-to-device copy (cudaMemcpyAsync through torch), bytes read + written, after
    enough copies to bring the clocks up."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(200):
        dst.copy_(src)
    ms = time_graph(lambda: dst.copy_(src), 50)
    return 2 * nbytes / (ms * 1e-3)


COPY_KERNEL = r"""
extern "C" __global__ void copy16(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                  long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def kernel_copy_bandwidth(nbytes, sms):
    """A plain 16-byte grid-stride copy kernel (through CuPy), bytes read + written; None when
    CuPy is missing."""
    try:
        import cupy as cp
    except ImportError:
        return None
    copy16 = cp.RawKernel(COPY_KERNEL, "copy16")
    src = cp.random.randint(0, 255, nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)
    n = nbytes // 16
    best = None
    for blocks_per_sm in (4, 8, 16):
        grid = (sms * blocks_per_sm,)
        for _ in range(20):
            copy16(grid, (256,), (src, dst, cp.int64(n)))
        times = []
        for _ in range(30):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            copy16(grid, (256,), (src, dst, cp.int64(n)))
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b))
        bw = 2 * nbytes / (statistics.median(times) * 1e-3)
        best = bw if best is None or bw > best else best
    assert bool((dst == src).all())
    return best


def floor_rows(fwd_bytes, bwd_bytes, replays, queued):
    """What any kernel of a shape pays in this timing: a graph replay of one empty kernel, and
    device-to-device copies of the direction's bytes (half read, half written); alone in a
    replay and, "xN", N back to back."""
    rows = []
    for calls, tag in ((1, ""), (queued, f" x{queued}")):
        rows.append((f"floor: empty kernel{tag}", "fwd",
                     time_graph(lambda: torch.cuda._sleep(0), replays, calls), 0))
        for d, nbytes in (("fwd", fwd_bytes), ("bwd", bwd_bytes)):
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            rows.append((f"floor: copy same bytes{tag}", d,
                         time_graph(lambda: dst.copy_(src), replays, calls), nbytes))
            del src, dst
    return rows


def after_other_kernel(p, fwd_bytes, bwd_bytes, replays, queued):
    """The calls as a training step queues them, between other libraries' kernels: N times an
    empty torch kernel and then the call, back to back in one graph, less N empty kernels alone
    (per call). cake's kernels may start before the kernel ahead of them ends; one of another
    library lets them start only as its blocks end, where one of cake's lets them start at once
    (src/cuda/dependent_launch.cuh), so this is what a call costs a step, next to the "xN" rows'
    cake after cake."""
    empty = time_graph(lambda: torch.cuda._sleep(0), replays, queued)
    rows = []
    for d, call, nbytes in (("fwd", p.forward, fwd_bytes), ("bwd", p.backward, bwd_bytes)):
        def pair():
            torch.cuda._sleep(0)
            call("off")
        rows.append((f"cake coop=off x{queued} after torch", d,
                     time_graph(pair, replays, queued) - empty, nbytes))
    return rows


def torch_conv(p):
    """Depthwise causal conv1d over the whole packed batch (ignores sequence boundaries, so it
    does less than cake), with the problem's bias and SiLU, on [1, C, S] inputs prepared
    outside the timing."""
    xs = [t.t().contiguous().unsqueeze(0).requires_grad_(True) for t in p.x]
    ws = [w.flip(1).unsqueeze(1).contiguous().requires_grad_(True) for w in p.w]  # [C, 1, 4]
    bs = [b.clone().requires_grad_(True) for b in p.bias]
    dys = [t.t().contiguous().unsqueeze(0) for t in p.dy]
    silu = p.params.activation == ACTIVATION_SILU

    def fwd():
        outs = []
        for i, (x, w) in enumerate(zip(xs, ws)):
            y = F.conv1d(x, w.to(x.dtype), bs[i].to(x.dtype) if bs else None, padding=3,
                         groups=p.C)[..., :p.S]
            outs.append(F.silu(y) if silu else y)
        return outs

    outs = fwd()  # the backward alone is timed: autograd.grad over a kept graph

    def bwd():
        torch.autograd.grad(outs, xs + ws + bs, dys, retain_graph=True)

    return fwd, bwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libcake_cuda.so")
    ap.add_argument("--quick", action="store_true", help="fewer replays")
    ap.add_argument("--shapes", default="main,S=8192,small", help="comma list of shape names")
    ap.add_argument("--variants", default="plain,bias+silu",
                    help="comma list of " + ", ".join(VARIANTS))
    ap.add_argument("--coop", default="off,on,auto", help="launch forms to time")
    ap.add_argument("--no-torch", action="store_true", help="cake only")
    ap.add_argument("--queued", type=int, default=10,
                    help="also time this many calls back to back in one graph (per call)")
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--once", action="store_true",
                    help="one forward and one backward per shape and variant, no timing (ncu)")
    args = ap.parse_args()
    lib = load(args.lib)
    replays = 20 if args.quick else 100
    props = torch.cuda.get_device_properties(0)
    if args.once:
        memcpy = kcopy = copy = 1.0
    else:
        memcpy = copy_bandwidth(2 << 30)
        kcopy = kernel_copy_bandwidth(2 << 30, props.multi_processor_count)
        copy = max(memcpy, kcopy or 0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; device-to-device copy "
          f"(bytes read + written): cudaMemcpy {memcpy / 1e9:.0f} GB/s, 16-byte copy kernel "
          f"{(kcopy or 0) / 1e9:.0f} GB/s; %copy below is against {copy / 1e9:.0f} GB/s")
    shapes = [("main", 3, 32768, 4096, 4096), ("S=8192", 3, 8192, 4096, 4096),
              ("small", 1, 2048, 2048, 512)]
    table = []
    for name, n, S, C, mean in shapes:
        if name not in args.shapes.split(","):
            continue
        fwd_bytes = 2 * n * S * C * 2
        bwd_bytes = 3 * n * S * C * 2
        for variant in args.variants.split(","):
            p = Problem(lib, n, S, C, mean, seed=1, variant=variant)
            if args.once:
                p.forward("off")
                p.backward("off")
                torch.cuda.synchronize()
                continue
            rows = []
            if variant == args.variants.split(",")[0]:
                rows += floor_rows(fwd_bytes, bwd_bytes, replays, args.queued)
            for coop in args.coop.split(","):
                for calls, tag in ((1, ""), (args.queued, f" x{args.queued}")):
                    rows.append((f"cake coop={coop}{tag}", "fwd",
                                 time_graph(lambda: p.forward(coop), replays, calls), fwd_bytes))
                    rows.append((f"cake coop={coop}{tag}", "bwd",
                                 time_graph(lambda: p.backward(coop), replays, calls), bwd_bytes))
            if "off" in args.coop.split(","):
                rows += after_other_kernel(p, fwd_bytes, bwd_bytes, replays, args.queued)
            if not args.no_torch:
                tf, tb = torch_conv(p)
                with torch.no_grad():
                    rows.append(("torch conv1d", "fwd", time_graph(tf, replays), fwd_bytes))
                tb()  # first autograd call outside any capture
                torch.cuda.synchronize()
                try:
                    rows.append(("torch conv1d autograd", "bwd", time_graph(tb, replays), bwd_bytes))
                except RuntimeError:  # autograd could not be captured: time it with events
                    torch.cuda.synchronize()
                    rows.append(("torch conv1d autograd*", "bwd", time_events(tb, replays), bwd_bytes))
            for impl, d, ms, nbytes in rows:
                bw = nbytes / (ms * 1e-3)
                table.append({"shape": name, "variant": variant, "impl": impl, "dir": d,
                              "us": ms * 1e3, "GBps": bw / 1e9, "pct_copy": 100 * bw / copy})
            del p
            torch.cuda.empty_cache()
    if args.once:
        return
    print(f"{'shape':8} {'variant':9} {'impl':30} {'dir':4} {'us':>9} {'GB/s':>8} {'%copy':>6}")
    for r in table:
        print(f"{r['shape']:8} {r['variant']:9} {r['impl']:30} {r['dir']:4} {r['us']:9.1f} "
              f"{r['GBps']:8.0f} {r['pct_copy']:5.1f}%")
    print(f"device-to-device copy again at the end: {copy_bandwidth(2 << 30) / 1e9:.0f} GB/s")
    print("* timed with events around each call (launch overhead included): autograd could not "
          "be captured in a CUDA graph")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "copy_GBps": copy / 1e9, "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()
