"""Random problems, partitions and references shared by the tests and their worker processes."""
import ctypes
import random

import pytest
import torch
import torch.nn.functional as F

import cake
from cake import _lib
from cake._context import _build_partition


class Problem:
    """A global packed batch: cu_seqlens, n tensors (x, w, dy) and a partition for P ranks."""

    def __init__(self, seed, world_size, max_rows=300, max_tensors=3, partition=None, cu=None):
        rnd = random.Random(seed)
        self.seed, self.world_size = seed, world_size
        lengths = [] if cu is None else [b - a for a, b in zip(cu[:-1], cu[1:])]
        total = rnd.randint(0, max_rows) if cu is None else sum(lengths)
        while sum(lengths) < total:
            kind = rnd.random()
            n = 0 if kind < 0.15 else rnd.randint(1, 3) if kind < 0.4 else rnd.randint(4, 90)
            lengths.append(min(n, total - sum(lengths)))
        if cu is None and rnd.random() < 0.3:
            lengths.insert(rnd.randint(0, len(lengths)), 0)  # an empty sequence somewhere
        self.cu = [0]
        for n in lengths:
            self.cu.append(self.cu[-1] + n)
        self.T = self.cu[-1]
        count = rnd.randint(1, max_tensors)
        self.channels = [8 * rnd.randint(1, 5) for _ in range(count)]
        g = torch.Generator().manual_seed(seed)
        self.xs = [(torch.randn(self.T, c, generator=g) * 2).to(torch.bfloat16)
                   for c in self.channels]
        self.ws = [torch.rand(c, 4, generator=g) - 0.5 for c in self.channels]
        self.dys = [torch.randn(self.T, c, generator=g).to(torch.bfloat16) for c in self.channels]
        self.partition = partition if partition is not None else \
            random_partition(rnd, self.T, world_size)

    def __repr__(self):
        return (f"Problem(seed={self.seed}, P={self.world_size}, T={self.T}, "
                f"seqs={len(self.cu) - 1}, channels={self.channels}, partition={self.partition})")


def random_partition(rnd, T, P):
    kind = rnd.choice(["contiguous", "zigzag", "boundaries", "ranges", "ranges"])
    if kind in ("contiguous", "zigzag"):
        return kind
    if kind == "boundaries":
        return [0] + sorted(rnd.randint(0, T) for _ in range(P - 1)) + [T]
    cuts = sorted(rnd.randint(0, T) for _ in range(rnd.randint(P, 3 * P)))
    pieces = [(a, b) for a, b in zip([0] + cuts, cuts + [T])]  # some may be empty
    owners = [rnd.randrange(P) for _ in pieces]
    ranges = [[] for _ in range(P)]
    for piece, owner in zip(pieces, owners):
        ranges[owner].append(piece)
    for r in ranges:
        rnd.shuffle(r)
    return ranges


def run_op(ctx, xs, ws, dys, multi, handle=None, cooperative=None):
    """Forward and backward of one call (multi) or of n single calls: (ys, dxs, dws)."""
    xs = [x.detach().clone().requires_grad_() for x in xs]
    ws = [w.detach().clone().requires_grad_() for w in ws]
    if multi:
        ys = cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx, recompute_handle=handle,
                                                   cooperative=cooperative)
    else:
        ys = [cake.cake_causal_conv1d_det_kcp(x, w, ctx, recompute_handle=handle,
                                              cooperative=cooperative) for x, w in zip(xs, ws)]
    torch.autograd.backward(list(ys), [dy.to(x.device) for dy, x in zip(dys, xs)])
    return ([y.detach() for y in ys], [x.grad for x in xs], [w.grad for w in ws])


VARIANTS = [("none", False), ("none", True), ("silu", False), ("silu", True)]  # (act, bias)


def variant_id(v):
    return f"{v[0]}{'+bias' if v[1] else ''}"


def make_biases(problem, salt=0):
    """fp32 [C_i] biases for a problem (their own generator: the problem's data are unchanged)."""
    g = torch.Generator().manual_seed(100003 * problem.seed + 17 + salt)
    return [torch.randn(c, generator=g) * 0.75 for c in problem.channels]


def run_variant(ctx, xs, ws, bs, dys, multi, activation, handle=None, cooperative=None):
    """Forward and backward of one call through the internal entry point with bias (bs: a
    list, or None) and activation: (ys, dxs, dws, dbs), dbs empty without a bias."""
    from cake.causal_conv1d_det_train_kcp import conv_det_kcp
    xs = [x.detach().clone().requires_grad_() for x in xs]
    ws = [w.detach().clone().requires_grad_() for w in ws]
    bs = None if bs is None else [b.detach().clone().requires_grad_() for b in bs]
    if multi:
        ys = conv_det_kcp(xs, ws, ctx, biases=bs, activation=activation, recompute_handle=handle,
                          cooperative=cooperative)
    else:
        ys = [conv_det_kcp(x, w, ctx, biases=None if bs is None else bs[i],
                           activation=activation, recompute_handle=handle,
                           cooperative=cooperative, multi=False)
              for i, (x, w) in enumerate(zip(xs, ws))]
    torch.autograd.backward(list(ys), [dy.to(x.device) for dy, x in zip(dys, xs)])
    return ([y.detach() for y in ys], [x.grad for x in xs], [w.grad for w in ws],
            [b.grad for b in bs] if bs is not None else [])


def _shifts(cu, T):
    """Per row its offset in its sequence and the rows left after it (int64 [T] each)."""
    pos = torch.zeros(T, dtype=torch.int64)
    left = torch.zeros(T, dtype=torch.int64)
    for a, e in zip(cu[:-1], cu[1:]):
        pos[a:e] = torch.arange(e - a)
        left[a:e] = torch.arange(e - a - 1, -1, -1)
    return pos, left


def _back(t, d, pos):
    """Row t - d of the same sequence (+0.0 before its start)."""
    out = torch.zeros_like(t)
    if d < t.shape[0]:
        out[d:] = t[:t.shape[0] - d]
    return out * (pos >= d)[:, None]


def _ahead(t, d, left):
    """Row t + d of the same sequence (+0.0 at or past its end)."""
    out = torch.zeros_like(t)
    if d < t.shape[0]:
        out[:t.shape[0] - d] = t[d:]
    return out * (left >= d)[:, None]


def reference64_params(cu, x, w, b, dy, activation):
    """Float64 reference with bias (b: a tensor or None) and activation, and bounds on the
    magnitude of what each output's rounding errors scale with: (y, dx, dw, db, |y| bound,
    |dx| bound, |dw| bound, |db| bound)."""
    T, C = x.shape
    pos, left = _shifts(cu, T)
    x64, w64, dy64 = x.double(), w.double(), dy.double()
    b64 = torch.zeros(C, dtype=torch.float64) if b is None else b.double()
    xs = [_back(x64, 3 - k, pos) for k in range(4)]  # x(t - 3 + k)
    a = sum(w64[:, k] * xs[k] for k in range(4)) + b64
    if activation == "silu":
        s = torch.sigmoid(a)
        y = a * s
        g = dy64 * s * (1 + a * (1 - s))
    else:
        y, g = a, dy64
    dx = sum(w64[:, 3 - j] * _ahead(g, j, left) for j in range(4))
    dw = torch.stack([(g * xs[k]).sum(0) for k in range(4)], dim=1)
    db = g.sum(0)
    # bounds: |a| terms (the fp32 error of a), the same through silu' (|silu'| <= 1.1,
    # |silu''| <= 0.5), the terms of dx, dw and dbias
    abs_a = sum(w64[:, k].abs() * xs[k].abs() for k in range(4)) + b64.abs()
    ay = abs_a * 1.1
    abs_g = dy64.abs() * ((1.1 + 0.5 * abs_a) if activation == "silu" else 1.0)
    adx = sum(w64[:, 3 - j].abs() * _ahead(abs_g, j, left) for j in range(4))
    adw = torch.stack([(abs_g * xs[k].abs()).sum(0) for k in range(4)], dim=1)
    return y, dx, dw, db, ay, adx, adw, abs_g.sum(0)


def reference64(cu, x, w, dy):
    """Float64 PyTorch reference (conv1d per sequence) and the matching bounds of |terms|:
    (y, dx, dw, |y| terms, |dx| terms, |dw| terms)."""
    def conv(xx, ww):
        out = xx * 0.0 + ww.sum() * 0.0  # in the graph even with no sequence
        for a, b in zip(cu[:-1], cu[1:]):
            if b > a:
                seg = F.pad(xx[a:b].t()[None], (3, 0))
                out[a:b] = F.conv1d(seg, ww[:, None, :], groups=xx.shape[1])[0].t()
        return out

    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y64 = conv(x64, w64)
    y64.backward(dy.double())
    ax, aw = x.double().abs().requires_grad_(), w.double().abs().requires_grad_()
    ay = conv(ax, aw)
    ay.backward(dy.double().abs())
    return y64.detach(), x64.grad, w64.grad, ay.detach(), ax.grad, aw.grad


def assert_close64(name, got, ref, abs_terms, rel, abs_rel):
    """|got - ref| <= rel * |ref| + abs_rel * abs_terms (+ the smallest subnormal)."""
    err = (got.double() - ref).abs()
    bound = rel * ref.abs() + abs_rel * abs_terms + 1e-40
    bad = err > bound
    assert not bad.any(), (f"{name}: {int(bad.sum())} elements off, worst error "
                           f"{float((err - bound).max())} past the bound")


def rank_reference(problem, rank, activation="none", biases=None):
    """What rank `rank` must produce, bitwise, from the C kernels with pools filled straight from
    the global tensors (no exchange): (global rows, ys, dxs, dws), and dbs with `biases`. With
    SiLU the future pool holds dy's rows, then x's at the same global rows (cake.h, Pools)."""
    lib = _lib.get()
    part, _ = _build_partition(lib, problem.cu, problem.world_size, problem.partition)
    plan = ctypes.c_void_p()
    try:
        _lib.check(lib.c.cake_plan_create(part, rank, ctypes.byref(plan)))
        rows, hist, fut = [], [], []
        frag = _lib.Fragment()
        for f in range(lib.c.cake_plan_num_fragments(plan)):
            _lib.check(lib.c.cake_plan_fragment(plan, f, ctypes.byref(frag)))
            rows += range(frag.global_start, frag.global_start + frag.length)
            hist += [h.global_row for h in frag.history]
            fut += [h.global_row for h in frag.future]
        rows = torch.tensor(rows, dtype=torch.int64)

        def pool(t, idx):
            out = torch.zeros(len(idx), t.shape[1], dtype=t.dtype)
            for i, g in enumerate(idx):
                if g >= 0:
                    out[i] = t[g]
            return out

        n = len(problem.channels)
        xs = [x[rows].contiguous() for x in problem.xs]
        dys = [dy[rows].contiguous() for dy in problem.dys]
        hs = [pool(x, hist) for x in problem.xs]
        fs = [pool(dy, fut) for dy in problem.dys]
        if activation == "silu":
            fs = [torch.cat([f, pool(x, fut)]) for f, x in zip(fs, problem.xs)]
        ys = [torch.empty_like(x) for x in xs]
        dxs = [torch.empty_like(x) for x in xs]
        dws = [torch.empty_like(w) for w in problem.ws]
        dbs = [torch.empty_like(b) for b in biases] if biases is not None else []
        P = _lib.pointer_array
        ptr = lambda ts: P([t.data_ptr() for t in ts])  # noqa: E731
        ch = _lib.int64_array(problem.channels)
        from cake._ops import conv_params
        fwd = conv_params(activation, list(biases or []))
        bwd = conv_params(activation, list(biases or []), dbs)
        ref = lambda p: None if p is None else ctypes.byref(p)  # noqa: E731
        _lib.check(lib.c.cake_cpu_forward(plan, n, ch, ptr(xs), ptr(problem.ws), ref(fwd),
                                          ptr(hs), ptr(ys), None))
        _lib.check(lib.c.cake_cpu_backward(plan, n, ch, ptr(xs), ptr(problem.ws), ref(bwd),
                                           ptr(hs), ptr(dys), ptr(fs), ptr(dxs), ptr(dws),
                                           None))
        if biases is not None:
            return rows, ys, dxs, dws, dbs
        return rows, ys, dxs, dws
    finally:
        lib.c.cake_plan_destroy(plan)
        lib.c.cake_partition_destroy(part)


def single_rank_reference(problem, activation="none", biases=None):
    """The whole batch through the C library's single-rank entry points (cake.h:
    cake_cpu_forward_single_rank / cake_cpu_backward_single_rank): (ys, dxs, dws, dbs)."""
    lib = _lib.get()
    from cake._ops import conv_params
    n = len(problem.channels)
    ys = [torch.empty_like(x) for x in problem.xs]
    dxs = [torch.empty_like(x) for x in problem.xs]
    dws = [torch.empty_like(w) for w in problem.ws]
    dbs = [torch.empty_like(b) for b in biases] if biases is not None else []
    P = _lib.pointer_array
    ptr = lambda ts: P([t.data_ptr() for t in ts])  # noqa: E731
    ch = _lib.int64_array(problem.channels)
    cu = _lib.int64_array(problem.cu)
    fwd = conv_params(activation, list(biases or []))
    bwd = conv_params(activation, list(biases or []), dbs)
    ref = lambda p: None if p is None else ctypes.byref(p)  # noqa: E731
    _lib.check(lib.c.cake_cpu_forward_single_rank(cu, len(problem.cu) - 1, n, ch,
                                                  ptr(problem.xs), ptr(problem.ws), ref(fwd),
                                                  ptr(ys), None))
    _lib.check(lib.c.cake_cpu_backward_single_rank(cu, len(problem.cu) - 1, n, ch,
                                                   ptr(problem.xs), ptr(problem.ws), ref(bwd),
                                                   ptr(problem.dys), ptr(dxs), ptr(dws), None))
    return ys, dxs, dws, dbs


def bits(t):
    """The bit patterns of a tensor, so that equality is bitwise (-0.0 != +0.0, NaN == NaN)."""
    t = t.detach().cpu().contiguous()
    return t.view({torch.bfloat16: torch.int16, torch.float32: torch.int32}[t.dtype])


def assert_bitwise(name, got, expected):
    assert got.shape == expected.shape, f"{name}: shape {list(got.shape)} != " \
                                        f"{list(expected.shape)}"
    a, b = bits(got), bits(expected)
    if not torch.equal(a, b):
        diff = int((a != b).sum())
        raise AssertionError(f"{name}: {diff} of {a.numel()} elements differ bitwise")


VARIANT_OUTPUTS = ("y", "dx", "dw", "dbias")  # run_variant's results, in order


def assert_all_bitwise(got, want, where):
    """Every tensor of two run_variant results (y, dx, dw, dbias lists) bitwise equal."""
    for j, name in enumerate(VARIANT_OUTPUTS):
        assert len(got[j]) == len(want[j]), (name, where)
        for i, (g, w) in enumerate(zip(got[j], want[j])):
            assert_bitwise(f"{name}[{i}] {where}", g, w)


def warm_up_for_capture(step, leaves, times=3):
    """Runs step() `times` on a side stream (the context's tables, the allocator) before a CUDA
    graph capture, clearing the leaves' gradients each time, as torch.cuda.graph asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            for t in leaves:
                t.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)


def assert_compiled_calls(got, eager, where=""):
    """The C calls of a compiled step (a delta of ctx.stats()) against the eager step's (which,
    under checkpoint, recomputes each forward once: forward_calls = 2 x backward_calls). The
    same backward calls and exchanges; forward calls either eager's, the recompute reading the
    handle as often as eager's (torch 2.6 and 2.15 recompute in the compiled backward), or one
    per backward and no recompute at all (torch 2.11: its partitioner leaves the ops inside a
    traced autograd.Function out of checkpoint's recompute policy and saves their outputs). A
    recompute that bypasses the handle, an extra call or a missing one fails."""
    saved = dict(eager, forward_calls=eager["backward_calls"], forwards_from_handle=0)
    assert got == eager or got == saved, (where, got, "eager:", eager, "or saved:", saved)


def assert_workers_ok(results):
    for r, res in enumerate(results):
        if isinstance(res, dict) and "worker_error" in res:
            pytest.fail(f"rank {r} failed:\n{res['worker_error']}", pytrace=False)


def cuda_ready():
    if not torch.cuda.is_available():
        return False
    from cake import _lib
    try:
        return _lib.get().has_cuda
    except ImportError:
        return False
