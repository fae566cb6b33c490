#!/usr/bin/env python3
"""Benchmark through the public PyTorch API, in one run beside the C-level kernels.

What is timed, per shape (n tensors of [S, C], one process, packed sequences):

* ``cake api``: ``cake_causal_conv1d_det_multi_kcp`` eagerly, and ``cake compiled``: the same
  under ``torch.compile(fullgraph=True)``;
* with bias and SiLU (what KDA layers run, issue 12): ``cake ShortConv silu+bias`` (three
  ``cake.ShortConvolution`` modules called FLA's way, ``cu_seqlens`` given), ``cake multi
  silu+bias`` (the same three through ``cake.short_convolution_multi``: one exchange per
  direction) and ``cake C ctx calls silu+bias`` (the C calls with their params);
* ``cake C kernels``: the plan-level GPU kernels of bench_gpu.py (CUDA-graph replays, so no
  host cost at all: the floor);
* ``torch conv1d``: a depthwise ``F.conv1d`` over the whole batch (it ignores sequence
  boundaries, so it does less);
* ``fla``: FLA's ``ShortConvolution`` (the ``fla-core`` wheel; triton backend) with
  ``activation=None``, ``'silu'``, and ``'silu'`` with a bias (beside cake's silu+bias rows),
  and ``dao``: Dao's ``causal_conv1d_fn``, each where installed (a row says "absent"
  otherwise, or "failed: ..." where it cannot run, as FLA's Triton kernels on a CPU).

Forward, and forward+backward through ``torch.autograd.grad`` (no gradient accumulation is
timed), between CUDA events: the median of single calls on an idle GPU (so the host's time to
the first kernel counts, as in the issue's table), and per call of calls queued back to back
(the kernels' pace, as in a training step where the host runs ahead); GB/s counts x read and y written
(forward) plus x, dy read and dx written (backward), and is also given as a percentage of a
copy kernel measured in the same run. Host time per call (no synchronisation inside the loop,
the average over the loop, synchronised after) at 3 x [2048, 2048], eager and compiled, with
the C calls' own host time beside it (ctypes calls with every array prepared) and autograd's own
cost under it (y = 2 x per tensor, as torch's op and as a Python autograd.Function).

On the CPU (``--device cpu``, with ``--quick`` a smoke test of tiny shapes) the calls compute
synchronously, so "host time" is wall time; the binding's own cost is the API's time minus
the C call's.

Usage:
    python bench/bench_api.py                         # the GPU, shapes of issue 10
    python bench/bench_api.py --quick --device cpu    # smoke test anywhere
Writes $OUT/bench_api.json when OUT is set (or --json PATH). Needs cake installed (pip install .)
or importable with CAKE_LIBRARY set; no network.
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

SHAPES = [("3x[32768,4096]", 3, 32768, 4096, 4096), ("3x[8192,4096]", 3, 8192, 4096, 4096),
          ("3x[2048,2048]", 3, 2048, 2048, 512)]
QUICK_CPU_SHAPES = [("3x[512,64]", 3, 512, 64, 100), ("3x[64,2048]", 3, 64, 2048, 30)]
HOST_SHAPE = ("3x[2048,2048]", 3, 2048, 2048, 512)


# ---- inputs --------------------------------------------------------------------------------

def make_inputs(n, S, C, mean, seed, device):
    """cu_seqlens of random lengths (mean about `mean`), xs, ws, dys on `device`."""
    g = torch.Generator().manual_seed(seed)
    cu = [0]
    while cu[-1] < S:
        cu.append(min(S, cu[-1] + int(torch.randint(1, 2 * mean, (1,), generator=g))))
    xs = [torch.randn(S, C, generator=g).to(torch.bfloat16).to(device) for _ in range(n)]
    ws = [(torch.rand(C, 4, generator=g) - 0.5).to(device) for _ in range(n)]
    dys = [torch.randn(S, C, generator=g).to(torch.bfloat16).to(device) for _ in range(n)]
    return cu, xs, ws, dys


# ---- timing --------------------------------------------------------------------------------

def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_ms(fn, reps, device, warmup=3):
    """Median milliseconds of fn(): CUDA events on the GPU, perf_counter on the CPU."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(reps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def queued_ms(fn, reps, device):
    """Milliseconds per call of `reps` calls back to back (no synchronisation between them):
    the GPU's queue stays full, so host time hides behind the kernels where it is shorter, as
    in a training step."""
    for _ in range(3):
        fn()
    sync(device)
    if device == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


def host_us(fn, calls, device, rounds=5):
    """Host microseconds per call: `calls` calls back to back, no synchronisation inside; the
    best of a few rounds (the GPU is synchronised between rounds, outside the timing)."""
    for _ in range(3):
        fn()
    best = None
    for _ in range(rounds):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t = (time.perf_counter() - t0) / calls * 1e6
        sync(device)
        best = t if best is None else min(best, t)
    return best


def copy_bandwidth(device, nbytes):
    """Bytes read + written per second of a plain copy kernel (triton when there is one, else
    torch's copy), and of torch's copy_ (cudaMemcpyAsync on the GPU); the larger is the
    reference of %copy."""
    src = torch.empty(nbytes // 8, dtype=torch.int64, device=device).random_()
    dst = torch.empty_like(src)
    reps = 20 if device == "cuda" else 5
    found = {"torch copy_": 2 * nbytes / (median_ms(lambda: dst.copy_(src), reps, device) * 1e-3)}
    if device == "cuda":
        try:
            kernel = _triton_copy()
            grid = lambda meta: (triton_cdiv(src.numel(), meta["BLOCK"]),)  # noqa: E731
            run = lambda: kernel[grid](src, dst, src.numel(), BLOCK=4096)  # noqa: E731
            ms = median_ms(run, reps, device)
            assert torch.equal(dst, src)
            found["triton copy kernel"] = 2 * nbytes / (ms * 1e-3)
        except Exception as e:  # noqa: BLE001 (no triton, or it cannot compile here)
            found["triton copy kernel"] = f"unavailable: {type(e).__name__}: {e}"
    best = max(v for v in found.values() if isinstance(v, float))
    return best, found


def triton_cdiv(a, b):
    return (a + b - 1) // b


def _triton_copy():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)
    return copy_kernel


# ---- implementations -----------------------------------------------------------------------

def cake_api(cake, ctx, xs0, ws0, dys, compiled):
    """(forward, forward+backward) closures through the public entry point."""
    xs = [x.clone().requires_grad_() for x in xs0]
    ws = [w.clone().requires_grad_() for w in ws0]

    def call(a, b):
        return cake.cake_causal_conv1d_det_multi_kcp(a, b, ctx)

    if compiled:
        call = torch.compile(call, fullgraph=True)

    def fwd():
        return call(xs, ws)

    def fwd_bwd():
        ys = call(xs, ws)
        return torch.autograd.grad(ys, xs + ws, dys)
    return fwd, fwd_bwd


class CtxCalls:
    """The context-level C calls with every array prepared once: what the binding adds is the
    difference to the API (host time), and the C library's own host cost is this. With
    `activation` ("silu") and/or `biases`, the calls take those params (cake_conv_params)."""

    def __init__(self, cake, ctx, xs, ws, dys, activation="none", biases=None):
        from cake import _lib
        from cake._ops import conv_params
        self.ctx, self.lib = ctx, ctx._lib.c
        n = len(xs)
        self.n = n
        self.biases = list(biases or [])
        self.dbiases = [torch.empty_like(b) for b in self.biases]
        self.params = (conv_params(activation, self.biases),
                       conv_params(activation, self.biases, self.dbiases))
        self.pp = [None if p is None else ctypes.byref(p) for p in self.params]
        self.keep = [torch.empty_like(x) for x in xs], \
            [x.new_empty((ctx.pool_rows, x.shape[-1])) for x in xs], \
            [torch.empty_like(x) for x in xs], [torch.empty_like(w) for w in ws]
        ys, pools, dxs, dws = self.keep
        P = _lib.pointer_array
        ptr = lambda ts: P([t.data_ptr() for t in ts])  # noqa: E731
        self.arrays = [ptr(xs), ptr(ws), ptr(ys), ptr(pools), ptr(dys), ptr(dxs), ptr(dws)]
        self.channels = _lib.int64_array([x.shape[-1] for x in xs])
        self.cuda = xs[0].is_cuda
        if self.cuda:
            self.ws_bytes = [ctx._cuda_workspace_bytes(ctx._spec(xs), b, self.params[b])
                             for b in (0, 1)]
            self.workspace = [torch.empty(max(b, 1), dtype=torch.uint8, device=xs[0].device)
                              for b in self.ws_bytes]

    def _check(self, status):
        if status:
            self.ctx._raise(status)

    def forward(self):
        x, w, y, h = self.arrays[:4]
        if self.cuda:
            stream = torch.cuda.current_stream().cuda_stream
            self._check(self.lib.cake_forward_multi_cuda(
                self.ctx._ptr, self.n, self.channels, x, w, self.pp[0], y, h, None, -1,
                self.workspace[0].data_ptr(), self.ws_bytes[0], stream))
        else:
            self._check(self.lib.cake_forward_multi(self.ctx._ptr, self.n, self.channels, x, w,
                                                    self.pp[0], y, h, None))

    def backward(self):
        x, w, _, h, dy, dx, dw = self.arrays
        if self.cuda:
            stream = torch.cuda.current_stream().cuda_stream
            self._check(self.lib.cake_backward_multi_cuda(
                self.ctx._ptr, self.n, self.channels, x, w, self.pp[1], h, dy, dx, dw, -1,
                self.workspace[1].data_ptr(), self.ws_bytes[1], stream))
        else:
            self._check(self.lib.cake_backward_multi(self.ctx._ptr, self.n, self.channels, x, w,
                                                     self.pp[1], h, dy, dx, dw))

    def forward_backward(self):
        self.forward()
        self.backward()


class _Twice(torch.autograd.Function):
    """y = 2 x per tensor as a Python autograd.Function (what such a Function alone costs)."""

    @staticmethod
    def forward(fctx, *xs):
        return tuple(x * 2 for x in xs)

    @staticmethod
    def backward(fctx, *dys):
        return tuple(d * 2 for d in dys)


def autograd_floor(xs0, dys, python_function):
    """(forward, forward+backward) closures of y = 2 x per tensor: the host cost of autograd
    itself with the same tensors (torch's own op, or a Python autograd.Function as cake's
    binding is), the floor under any binding's time."""
    xs = [x.clone().requires_grad_() for x in xs0]

    def fwd():
        return _Twice.apply(*xs) if python_function else [x * 2 for x in xs]

    def fwd_bwd():
        return torch.autograd.grad(fwd(), xs, dys)
    return fwd, fwd_bwd


def torch_conv(xs0, ws0, dys0):
    """Depthwise causal conv1d over the whole batch as [1, C, S] (no sequence boundaries)."""
    xs = [x.t().contiguous().unsqueeze(0).requires_grad_() for x in xs0]
    ws = [w.flip(1).unsqueeze(1).to(torch.bfloat16).contiguous().requires_grad_() for w in ws0]
    dys = [d.t().contiguous().unsqueeze(0) for d in dys0]
    S = xs0[0].shape[0]

    def fwd():
        return [F.conv1d(x, w, padding=3, groups=x.shape[1])[..., :S] for x, w in zip(xs, ws)]

    def fwd_bwd():
        return torch.autograd.grad(fwd(), xs + ws, dys)
    return fwd, fwd_bwd


def make_biases(xs, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(x.shape[-1], generator=g) * 0.5).to(x.device) for x in xs]


def cake_modules(cake, cu, xs0, dys0, multi):
    """cake's drop-in with bias and SiLU: three cake.ShortConvolution modules (fp32 parameters,
    as nn.Conv1d's default) called FLA's way with cu_seqlens (the cached single-process context
    of it), or the same three through cake.short_convolution_multi."""
    device = xs0[0].device
    torch.manual_seed(0)
    convs = [cake.ShortConvolution(x.shape[-1], kernel_size=4, bias=True, activation="silu",
                                   device=device) for x in xs0]
    xs = [x[None].clone().requires_grad_() for x in xs0]
    dys = [d[None] for d in dys0]
    cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
    params = [p for c in convs for p in c.parameters()]

    if multi:
        def fwd():
            return cake.short_convolution_multi(convs, xs, cu_seqlens=cu_t)
    else:
        def fwd():
            return [c(x, cu_seqlens=cu_t)[0] for c, x in zip(convs, xs)]

    def fwd_bwd():
        return torch.autograd.grad(fwd(), xs + params, dys)
    return fwd, fwd_bwd


def fla_conv(cu, xs0, dys0, activation, bias=False):
    """FLA's ShortConvolution (three modules, as a KDA layer has), varlen through cu_seqlens."""
    from fla.modules import ShortConvolution
    device = xs0[0].device
    convs = [ShortConvolution(x.shape[-1], kernel_size=4, bias=bias, activation=activation,
                              device=device, dtype=torch.bfloat16) for x in xs0]
    xs = [x[None].clone().requires_grad_() for x in xs0]
    dys = [d[None] for d in dys0]
    cu_t = torch.tensor(cu, dtype=torch.int64, device=device)
    params = [p for c in convs for p in c.parameters()]

    def fwd():
        return [c(x, cu_seqlens=cu_t)[0] for c, x in zip(convs, xs)]

    def fwd_bwd():
        return torch.autograd.grad(fwd(), xs + params, dys)
    return fwd, fwd_bwd


def dao_conv(cu, xs0, ws0, dys0):
    """Dao's causal_conv1d_fn, varlen through seq_idx (channel-last [1, C, S] views)."""
    from causal_conv1d import causal_conv1d_fn
    device = xs0[0].device
    S = xs0[0].shape[0]
    seq_idx = torch.zeros(1, S, dtype=torch.int32, device=device)
    for i, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
        seq_idx[0, a:b] = i
    xs = [x[None].clone().requires_grad_() for x in xs0]  # [1, S, C], viewed as [1, C, S]
    ws = [w.clone().requires_grad_() for w in ws0]
    dys = [d[None].transpose(1, 2) for d in dys0]

    def fwd():
        return [causal_conv1d_fn(x.transpose(1, 2), w, None, seq_idx=seq_idx)
                for x, w in zip(xs, ws)]

    def fwd_bwd():
        return torch.autograd.grad(fwd(), xs + ws, dys)
    return fwd, fwd_bwd


def c_kernels(lib_path, n, S, C, mean, reps):
    """bench_gpu.py's plan-level kernels: forward, and forward then backward, graph-timed."""
    sys.path.insert(0, HERE)
    import bench_gpu
    lib = bench_gpu.load(lib_path)
    p = bench_gpu.Problem(lib, n, S, C, mean, seed=1)
    fwd = bench_gpu.time_graph(lambda: p.forward("auto"), reps)

    def both():
        p.forward("auto")
        p.backward("auto")
    return fwd, bench_gpu.time_graph(both, reps)


# ---- the run -------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (and, on the "
                    "CPU, tiny shapes): a smoke test")
    ap.add_argument("--shapes", help="shape names to run, separated by ';' (the names hold "
                    "commas), default: all")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--host-only", action="store_true", help="only the host time per call")
    ap.add_argument("--json", help="write the results here (default: $OUT/bench_api.json)")
    args = ap.parse_args(argv)
    device = args.device
    import cake
    lib_path = cake._lib.get().path
    reps = (5 if args.quick else 50) if device == "cuda" else (3 if args.quick else 10)
    shapes = QUICK_CPU_SHAPES if device == "cpu" and args.quick else SHAPES
    if args.shapes:
        shapes = [s for s in shapes if s[0] in args.shapes.split(";")]
    host_shape = QUICK_CPU_SHAPES[-1] if device == "cpu" and args.quick else HOST_SHAPE

    info = {"device": torch.cuda.get_device_name() if device == "cuda" else platform.processor()
            or platform.machine(), "torch": torch.__version__, "python": sys.version.split()[0],
            "cake_library": lib_path, "quick": args.quick}
    # --quick keeps the GPU's 2 GiB copy: 64 MiB there is launch- and L2-bound (2530 against
    # 3924 GB/s on the H200), which would inflate every %copy of the run
    small_copy = args.host_only or (args.quick and device != "cuda")
    copy, copies = copy_bandwidth(device, (64 << 20) if small_copy else (2 << 30))
    info["copy_GBps"] = {k: (v / 1e9 if isinstance(v, float) else v) for k, v in copies.items()}
    print(f"device: {info['device']} ({device}), torch {torch.__version__}; copy (bytes read + "
          f"written): " + ", ".join(f"{k} {v / 1e9:.0f} GB/s" if isinstance(v, float) else
                                    f"{k} {v}" for k, v in copies.items()), flush=True)
    rows = []

    def add(shape, impl, direction, ms, nbytes, note="", queued=None):
        """ms: the median of single calls on an idle GPU (the host's time to the first kernel
        included); queued: per call of calls back to back (the kernels' pace)."""
        row = {"shape": shape, "impl": impl, "dir": direction, "us": None, "queued_us": None,
               "GBps": None, "pct_copy": None, "note": note}
        if ms is not None:
            pace = queued if queued is not None else ms
            bw = nbytes / (pace * 1e-3)
            row.update(us=ms * 1e3, queued_us=pace * 1e3, GBps=bw / 1e9, pct_copy=100 * bw / copy)
        rows.append(row)
        shown = f"{row['us']:9.1f} {row['queued_us']:9.1f} us" if ms is not None else \
            "        -           -   "
        print(f"  {shape:15} {impl:28} {direction:7} {shown} {note}", flush=True)

    def timed(fn):
        return median_ms(fn, reps, device), queued_ms(fn, reps, device)

    def attempt(shape, impl, make, nbytes):
        try:
            fwd, fwd_bwd = make()
            ms, q = timed(fwd)
            add(shape, impl, "fwd", ms, nbytes[0], queued=q)
            ms, q = timed(fwd_bwd)
            add(shape, impl, "fwd+bwd", ms, nbytes[1], queued=q)
        except ImportError as e:
            add(shape, impl, "fwd", None, 0, f"absent ({e.name or e})")
        except Exception as e:  # noqa: BLE001 (a library that fails here is reported, not fatal)
            add(shape, impl, "fwd", None, 0, f"failed: {type(e).__name__}: {str(e)[:120]}")

    for name, n, S, C, mean in ([] if args.host_only else shapes):
        cu, xs, ws, dys = make_inputs(n, S, C, mean, 1, device)
        ctx = cake.ContextDetKcp(cu)
        nbytes = (2 * n * S * C * 2, 5 * n * S * C * 2)  # fwd; fwd + bwd (x, y; x, dy, dx)
        if device == "cuda":
            try:
                f, fb = c_kernels(lib_path, n, S, C, mean, reps)
                add(name, "cake C kernels", "fwd", f, nbytes[0], "(CUDA graph: no host cost)")
                add(name, "cake C kernels", "fwd+bwd", fb, nbytes[1], "(CUDA graph)")
            except Exception as e:  # noqa: BLE001
                add(name, "cake C kernels", "fwd", None, 0, f"failed: {type(e).__name__}: {e}")
        calls = CtxCalls(cake, ctx, xs, ws, dys)
        ms, q = timed(calls.forward)
        add(name, "cake C ctx calls", "fwd", ms, nbytes[0], queued=q)
        ms, q = timed(calls.forward_backward)
        add(name, "cake C ctx calls", "fwd+bwd", ms, nbytes[1], queued=q)
        attempt(name, "cake api", lambda: cake_api(cake, ctx, xs, ws, dys, False), nbytes)
        if not args.no_compile:
            attempt(name, "cake compiled", lambda: cake_api(cake, ctx, xs, ws, dys, True), nbytes)
        calls_sb = CtxCalls(cake, ctx, xs, ws, dys, "silu", make_biases(xs, 3))
        ms, q = timed(calls_sb.forward)
        add(name, "cake C ctx calls silu+bias", "fwd", ms, nbytes[0], queued=q)
        ms, q = timed(calls_sb.forward_backward)
        add(name, "cake C ctx calls silu+bias", "fwd+bwd", ms, nbytes[1], queued=q)
        for impl, multi in (("cake ShortConv silu+bias", False), ("cake multi silu+bias", True)):
            attempt(name, impl, lambda: cake_modules(cake, cu, xs, dys, multi), nbytes)
        attempt(name, "torch conv1d", lambda: torch_conv(xs, ws, dys), nbytes)
        for act in (None, "silu"):
            attempt(name, f"fla act={act}", lambda: fla_conv(cu, xs, dys, act), nbytes)
        attempt(name, "fla act=silu bias", lambda: fla_conv(cu, xs, dys, "silu", True), nbytes)
        attempt(name, "dao causal-conv1d", lambda: dao_conv(cu, xs, ws, dys), nbytes)
        del ctx, calls, calls_sb
        if device == "cuda":
            torch.cuda.empty_cache()

    # host time per call
    name, n, S, C, mean = host_shape
    cu, xs, ws, dys = make_inputs(n, S, C, mean, 2, device)
    ctx = cake.ContextDetKcp(cu)
    host = []
    calls_per_round = 50 if device == "cuda" else (5 if args.quick else 20)
    calls = CtxCalls(cake, ctx, xs, ws, dys)
    c_fwd = host_us(calls.forward, calls_per_round, device)
    c_both = host_us(calls.forward_backward, calls_per_round, device)
    host.append({"impl": "cake C ctx calls", "fwd": c_fwd, "fwd+bwd": c_both})
    for impl, compiled in (("cake api", False), ("cake compiled", True)):
        if compiled and args.no_compile:
            continue
        fwd, fwd_bwd = cake_api(cake, ctx, xs, ws, dys, compiled)
        f, fb = host_us(fwd, calls_per_round, device), host_us(fwd_bwd, calls_per_round, device)
        host.append({"impl": impl, "fwd": f, "fwd+bwd": fb,
                     "binding_fwd": f - c_fwd, "binding_fwd+bwd": fb - c_both})
    for impl, python_function in (("torch 2x (autograd floor)", False),
                                  ("python Function 2x", True)):
        fwd, fwd_bwd = autograd_floor(xs, dys, python_function)
        host.append({"impl": impl, "fwd": host_us(fwd, calls_per_round, device),
                     "fwd+bwd": host_us(fwd_bwd, calls_per_round, device)})
    calls_sb = CtxCalls(cake, ctx, xs, ws, dys, "silu", make_biases(xs, 4))
    sb_fwd = host_us(calls_sb.forward, calls_per_round, device)
    sb_both = host_us(calls_sb.forward_backward, calls_per_round, device)
    host.append({"impl": "cake C ctx calls silu+bias", "fwd": sb_fwd, "fwd+bwd": sb_both})
    fwd, fwd_bwd = cake_modules(cake, cu, xs, dys, True)
    f, fb = host_us(fwd, calls_per_round, device), host_us(fwd_bwd, calls_per_round, device)
    host.append({"impl": "cake multi silu+bias", "fwd": f, "fwd+bwd": fb,
                 "binding_fwd": f - sb_fwd, "binding_fwd+bwd": fb - sb_both})

    print()
    print("us: median of single calls on an idle GPU (events; host time to the first kernel "
          "included); queued: per call, calls back to back (GB/s and %copy from this)")
    print(f"{'shape':15} {'impl':28} {'dir':7} {'us':>9} {'queued':>9} {'GB/s':>7} "
          f"{'%copy':>6}  note")
    for r in rows:
        if r["us"] is None:
            print(f"{r['shape']:15} {r['impl']:28} {r['dir']:7} {'-':>9} {'-':>9} {'-':>7} "
                  f"{'-':>6}  {r['note']}")
        else:
            print(f"{r['shape']:15} {r['impl']:28} {r['dir']:7} {r['us']:9.1f} "
                  f"{r['queued_us']:9.1f} {r['GBps']:7.0f} {r['pct_copy']:5.1f}%  {r['note']}")
    where = "host time" if device == "cuda" else "wall time (the CPU computes in the call)"
    print(f"\n{where} per call at {name}, us (no synchronisation inside the loop):")
    print(f"{'impl':28} {'fwd':>9} {'fwd+bwd':>9} {'binding fwd':>12} {'binding f+b':>12}")
    for h in host:
        extra = (f" {h['binding_fwd']:12.1f} {h['binding_fwd+bwd']:12.1f}"
                 if "binding_fwd" in h else "")
        print(f"{h['impl']:28} {h['fwd']:9.1f} {h['fwd+bwd']:9.1f}{extra}")
    print("(binding = the API's time minus the C calls' with prepared arrays and the same "
          "params)")
    result = {"info": info, "rows": rows, "host_us": {"shape": name, "rows": host}}
    path = args.json or (os.path.join(os.environ["OUT"], "bench_api.json")
                         if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
