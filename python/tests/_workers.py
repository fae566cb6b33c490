"""Multi-process tests: a spawn helper (torch.multiprocessing, a FileStore, a deadline) and the
cases the worker processes run. Each worker saves what it computed; the test compares."""
import datetime
import math
import os
import pickle
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.checkpoint import checkpoint

import cake
from _problems import VARIANTS, Problem, make_biases, run_op, run_variant


def spawn(case, world_size, tmp_path, *args, backend="gloo", deadline=150):
    """Runs CASES[case](rank, world_size, *args) in world_size new processes joined in one
    process group; returns their results (one per rank). Raises on a worker's error or past
    the deadline (killing the workers)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    store, out = str(tmp_path / "store"), str(tmp_path)
    context = mp.start_processes(_entry, args=(world_size, store, out, backend, case, args),
                                 nprocs=world_size, join=False, start_method="spawn")
    end = time.monotonic() + deadline
    try:
        while not context.join(timeout=0.5):
            if time.monotonic() > end:
                raise TimeoutError(f"case {case!r}: the workers did not finish in {deadline} s")
    finally:
        for p in context.processes:
            if p.is_alive():
                p.kill()
    results = []
    for r in range(world_size):
        with open(os.path.join(out, f"rank{r}.pkl"), "rb") as f:
            results.append(pickle.load(f))
    return results


def _entry(rank, world_size, store, out, backend, case, args):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("CAKE_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, store=dist.FileStore(store, world_size), rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=60))
    try:
        result = CASES[case](rank, world_size, *args)
    except BaseException:
        result = {"worker_error": traceback.format_exc()}
    with open(os.path.join(out, f"rank{rank}.pkl.tmp"), "wb") as f:
        pickle.dump(result, f)
    os.replace(os.path.join(out, f"rank{rank}.pkl.tmp"), os.path.join(out, f"rank{rank}.pkl"))
    if isinstance(result, dict) and result.get("skip_teardown"):
        os._exit(0)  # a broken exchange may leave operations pending: skip the group's teardown
    dist.barrier()
    dist.destroy_process_group()


def _cpu(ts):
    return [t.detach().cpu() for t in ts]


# ---- cases -------------------------------------------------------------------------------------

def case_match(rank, world_size, seeds, device="cpu"):
    """For each seed: multi call, single calls, the multi call again, and [1, S, C] inputs."""
    out = []
    for seed in seeds:
        p = Problem(seed, world_size)
        check = seed % 3 == 0  # check mode on some, so it is exercised too
        # the default group through None on some, through the group object on the others
        group = None if seed % 2 else dist.group.WORLD
        ctx = cake.ContextDetKcp(p.cu, group, partition=p.partition, check=check)
        assert ctx.world_size == world_size
        rows = ctx.global_rows()
        xs = [x[rows].to(device) for x in p.xs]
        ws = [w.to(device) for w in p.ws]
        dys = [dy[rows].to(device) for dy in p.dys]
        multi = run_op(ctx, xs, ws, dys, True)
        single = run_op(ctx, xs, ws, dys, False)
        again = run_op(ctx, xs, ws, dys, True)
        batched = run_op(ctx, [x[None] for x in xs], ws, [dy[None] for dy in dys], True)
        out.append({"rows": rows, "multi": [_cpu(t) for t in multi],
                    "single": [_cpu(t) for t in single], "again": [_cpu(t) for t in again],
                    "batched": [_cpu(t) for t in batched], "stats": ctx.stats(),
                    "local_rows": ctx.local_rows})
        ctx.close()
    return out


class _Counter:
    """Counts dist.batch_isend_irecv calls (the transport's one collective per exchange)."""

    def __init__(self):
        self.calls = 0
        self.original = dist.batch_isend_irecv

    def __enter__(self):
        def counted(ops):
            self.calls += 1
            return self.original(ops)
        dist.batch_isend_irecv = counted
        return self

    def __exit__(self, *exc):
        dist.batch_isend_irecv = self.original


def case_checkpoint(rank, world_size, seed):
    """Collectives of forward and backward under torch.utils.checkpoint, with and without a
    recompute handle, for both use_reentrant settings; gradients against the plain run."""
    p = Problem(seed, world_size, partition="contiguous", cu=[0, 37, 37, 130])
    ctx = cake.ContextDetKcp(p.cu, dist.group.WORLD, partition=p.partition)
    rows = ctx.global_rows()
    xs = [x[rows] for x in p.xs]
    dys = [dy[rows] for dy in p.dys]
    plain = run_op(ctx, xs, p.ws, dys, True)
    out = {"plain": plain, "runs": {}}
    for reentrant in (True, False):
        for use_handle in (True, False):
            for multi in (True, False):
                xl = [x.clone().requires_grad_() for x in xs]
                wl = [w.clone().requires_grad_() for w in p.ws]
                handles = ([cake.RecomputeHandleDetKcp()] if multi else
                           [cake.RecomputeHandleDetKcp() for _ in xl]) if use_handle else None

                def block(*tensors):
                    n = len(xl)
                    a, b = tensors[:n], tensors[n:]
                    if multi:
                        ys = cake.cake_causal_conv1d_det_multi_kcp(
                            list(a), list(b), ctx, recompute_handle=handles[0] if handles
                            else None)
                    else:
                        ys = [cake.cake_causal_conv1d_det_kcp(
                            x, w, ctx, recompute_handle=handles[i] if handles else None)
                            for i, (x, w) in enumerate(zip(a, b))]
                    return tuple(y.float() * 1.0 for y in ys)

                before = ctx.stats()
                with _Counter() as fwd:
                    ys = checkpoint(block, *xl, *wl, use_reentrant=reentrant)
                middle = ctx.stats()
                with _Counter() as bwd:
                    torch.autograd.backward(list(ys), [dy.float() for dy in dys])
                after = ctx.stats()
                out["runs"][(reentrant, use_handle, multi)] = {
                    "forward_calls": fwd.calls, "backward_calls": bwd.calls,
                    "ys": [y.detach().to(torch.bfloat16) for y in ys],
                    "dxs": [x.grad for x in xl], "dws": [w.grad for w in wl],
                    "exchanges": (middle["exchanges"] - before["exchanges"],
                                  after["exchanges"] - middle["exchanges"]),
                    "from_handle": after["forwards_from_handle"] -
                    before["forwards_from_handle"],
                    "handle_filled": [h.contains("conv") for h in handles] if handles else None}
    return out


def case_failure(rank, world_size):
    """An exception inside the exchange reaches Python, chained, and the context is then
    refused."""
    ctx = cake.ContextDetKcp(list(range(0, 200, 50)), dist.group.WORLD)
    x = torch.zeros(ctx.local_rows, 8, dtype=torch.bfloat16)
    w = torch.zeros(8, 4)
    original = dist.batch_isend_irecv

    def broken(ops):
        raise RuntimeError("injected failure")

    dist.batch_isend_irecv = broken
    try:
        cake.cake_causal_conv1d_det_kcp(x, w, ctx)
        first = None
    except Exception as e:
        first = (type(e).__name__, str(e), type(e.__cause__).__name__, getattr(e, "status", None))
    finally:
        dist.batch_isend_irecv = original
    try:
        cake.cake_causal_conv1d_det_kcp(x, w, ctx)
        second = None
    except Exception as e:
        second = (type(e).__name__, str(e))
    return {"first": first, "second": second, "skip_teardown": True}


def case_timeout(rank, world_size):
    """Rank 1 waits for history rows rank 0 never sends: a timeout, not a hang."""
    ctx = cake.ContextDetKcp([0, 64], dist.group.WORLD, timeout_seconds=1.0)
    store = dist.distributed_c10d._get_default_store()
    result = {"skip_teardown": True}
    if rank == 1:
        x = torch.zeros(ctx.local_rows, 8, dtype=torch.bfloat16)
        start = time.monotonic()
        try:
            cake.cake_causal_conv1d_det_kcp(x, torch.zeros(8, 4), ctx)
            result["error"] = None
        except Exception as e:
            result["error"] = (type(e).__name__, str(e), getattr(e, "status", None))
        result["seconds"] = time.monotonic() - start
        store.set("timeout_done", "1")
    else:
        store.wait(["timeout_done"], datetime.timedelta(seconds=60))
    return result


def case_mismatch(rank, world_size):
    """Check mode: ranks calling with different channel counts fail with a clear error."""
    ctx = cake.ContextDetKcp([0, 40], dist.group.WORLD, check=True)
    channels = 8 if rank == 0 else 16
    x = torch.zeros(ctx.local_rows, channels, dtype=torch.bfloat16)
    try:
        cake.cake_causal_conv1d_det_kcp(x, torch.zeros(channels, 4), ctx)
        return {"error": None}
    except Exception as e:
        return {"error": (type(e).__name__, str(e), getattr(e, "status", None)),
                "skip_teardown": True}


def case_timeout_inf(rank, world_size, seed):
    """timeout_seconds=inf: no limit, and the exchanges work (they raised OverflowError)."""
    p = Problem(seed, world_size)
    ctx = cake.ContextDetKcp(p.cu, partition=p.partition, timeout_seconds=math.inf)
    rows = ctx.global_rows()
    out = run_op(ctx, [x[rows] for x in p.xs], p.ws, [dy[rows] for dy in p.dys], True)
    return {"rows": rows, "out": out, "exchanges": ctx.stats()["exchanges"]}


def case_compile(rank, world_size, seed):
    """torch.compile(fullgraph) of a checkpointed step with a recompute handle on each rank:
    bitwise the eager step, the same exchanges (forward 1, backward 1: a recompute in the
    compiled backward, where torch makes one, reads the handle)."""
    torch._dynamo.reset()
    p = Problem(seed, world_size, partition="zigzag", max_rows=200)
    ctx = cake.ContextDetKcp(p.cu, partition=p.partition)
    rows = ctx.global_rows()
    xs0, dys = [x[rows] for x in p.xs], [dy[rows] for dy in p.dys]

    def step(xs, ws, handle):
        def body(*t):
            n = len(t) // 2
            ys = cake.cake_causal_conv1d_det_multi_kcp(list(t[:n]), list(t[n:]), ctx,
                                                       recompute_handle=handle)
            return tuple(torch.relu(y) * 2 for y in ys)
        return checkpoint(body, *xs, *ws, use_reentrant=False)

    compiled = torch.compile(step, fullgraph=True)
    runs = []
    for fn in (step, compiled, compiled):
        xs = [x.clone().requires_grad_() for x in xs0]
        ws = [w.clone().requires_grad_() for w in p.ws]
        handle = cake.RecomputeHandleDetKcp()
        a = ctx.stats()
        ys = fn(xs, ws, handle)
        b = ctx.stats()
        torch.autograd.backward(list(ys), dys)
        c = ctx.stats()
        handle.close()
        runs.append({"ys": [y.detach() for y in ys], "dxs": [x.grad for x in xs],
                     "dws": [w.grad for w in ws],
                     "exchanges": (b["exchanges"] - a["exchanges"],
                                   c["exchanges"] - b["exchanges"]),
                     "from_handle": c["forwards_from_handle"] - a["forwards_from_handle"]})
    return {"runs": runs, "rows": rows}


def case_bias_silu(rank, world_size, seeds, device="cpu"):
    """For each seed and variant (activation, bias): the multi call, single calls and the multi
    call again through the internal entry point; then a checkpointed SiLU + bias multi call
    with a recompute handle, counting collectives."""
    out = []
    for seed in seeds:
        p = Problem(seed, world_size)
        ctx = cake.ContextDetKcp(p.cu, partition=p.partition, check=seed % 2 == 0)
        rows = ctx.global_rows()
        xs = [x[rows].to(device) for x in p.xs]
        ws = [w.to(device) for w in p.ws]
        dys = [dy[rows].to(device) for dy in p.dys]
        bs = [b.to(device) for b in make_biases(p)]
        res = {"rows": rows, "variants": {}}
        for act, with_bias in VARIANTS:
            b = bs if with_bias else None
            res["variants"][(act, with_bias)] = {
                kind: [_cpu(t) for t in run_variant(ctx, xs, ws, b, dys, multi, act)]
                for kind, multi in (("multi", True), ("single", False), ("again", True))}
        n = len(xs)
        leaves = [t.clone().requires_grad_() for t in xs + ws + bs]
        handle = cake.RecomputeHandleDetKcp()
        from cake.causal_conv1d_det_train_kcp import conv_det_kcp

        def body(*t):
            return conv_det_kcp(list(t[:n]), list(t[n:2 * n]), ctx, biases=list(t[2 * n:]),
                                activation="silu", recompute_handle=handle)

        plain_leaves = [t.clone().requires_grad_() for t in xs + ws + bs]
        a = ctx.stats()
        ys = body(*plain_leaves)  # without checkpoint: the exchanges of one call
        handle.close()
        handle = cake.RecomputeHandleDetKcp()
        b_ = ctx.stats()
        torch.autograd.backward(list(ys), dys)
        c = ctx.stats()
        res["plain_exchanges"] = (b_["exchanges"] - a["exchanges"],
                                  c["exchanges"] - b_["exchanges"])
        a = ctx.stats()
        with _Counter() as fwd:
            ys = checkpoint(body, *leaves, use_reentrant=False)
        b_ = ctx.stats()
        with _Counter() as bwd:
            torch.autograd.backward(list(ys), dys)
        c = ctx.stats()
        res["checkpoint"] = {
            "collectives": (fwd.calls, bwd.calls),
            "exchanges": (b_["exchanges"] - a["exchanges"], c["exchanges"] - b_["exchanges"]),
            "check_rounds": (b_["check_rounds"] - a["check_rounds"],
                             c["check_rounds"] - b_["check_rounds"]),
            "from_handle": c["forwards_from_handle"] - a["forwards_from_handle"],
            "out": [_cpu([y.detach() for y in ys]), _cpu([t.grad for t in leaves[:n]]),
                    _cpu([t.grad for t in leaves[n:2 * n]]),
                    _cpu([t.grad for t in leaves[2 * n:]])]}
        out.append(res)
        ctx.close()
    return out


def short_conv_layer(seed):
    """Three cake.ShortConvolution modules (q, k, v; different widths), bias and SiLU."""
    torch.manual_seed(seed)
    convs = [cake.ShortConvolution(d, 4, bias=True, activation="silu") for d in (16, 16, 24)]
    with torch.no_grad():
        for m in convs:
            m.bias.normal_(0, 0.5)
    return convs


def short_conv_inputs(seed, T):
    g = torch.Generator().manual_seed(seed + 1)
    xs = [(torch.randn(1, T, d, generator=g) * 2).to(torch.bfloat16) for d in (16, 16, 24)]
    dys = [torch.randn(1, T, d, generator=g).to(torch.bfloat16) for d in (16, 16, 24)]
    return xs, dys


def case_short_conv(rank, world_size, seed, cu, partition):
    """cake.ShortConvolution under context parallelism: the modules called FLA's way with the
    context and handles set on them (set_conv_context), under checkpoint; then the multi
    helper with an explicit context and handle. Outputs, gradients and exchange counts."""
    convs = short_conv_layer(seed)
    xs_global, dys_global = short_conv_inputs(seed, cu[-1])
    ctx = cake.ContextDetKcp(cu, partition=partition)
    rows = ctx.global_rows()
    xs = [x[:, rows] for x in xs_global]
    dys = [dy[:, rows] for dy in dys_global]
    out = {"rows": rows}
    for kind in ("modules", "multi"):
        for m in convs:
            m.zero_grad()
        leaves = [x.clone().requires_grad_() for x in xs]
        handle = cake.RecomputeHandleDetKcp()
        if kind == "modules":
            cake.set_conv_context(convs, ctx, recompute_handles=True)
            fn = lambda *t: tuple(m(x=x, cu_seqlens=None)[0] for m, x in zip(convs, t))  # noqa
        else:
            cake.set_conv_context(convs, None)
            fn = lambda *t: cake.short_convolution_multi(  # noqa: E731
                convs, list(t), ctx=ctx, recompute_handle=handle)
        a = ctx.stats()
        ys = checkpoint(fn, *leaves, use_reentrant=False)
        b = ctx.stats()
        torch.autograd.backward(list(ys), dys)
        c = ctx.stats()
        out[kind] = {"ys": _cpu(ys), "dxs": _cpu([t.grad for t in leaves]),
                     "dws": [m.weight.grad.clone() for m in convs],
                     "dbs": [m.bias.grad.clone() for m in convs],
                     "exchanges": (b["exchanges"] - a["exchanges"],
                                   c["exchanges"] - b["exchanges"]),
                     "calls": (b["forward_calls"] - a["forward_calls"],
                               c["forward_calls"] - b["forward_calls"]),
                     "from_handle": c["forwards_from_handle"] - a["forwards_from_handle"]}
    return out


def case_nccl(rank, world_size, seeds):
    """A world-size-1 NCCL group: CUDA results through the group's context, against CPU."""
    out = case_match(rank, world_size, seeds, device="cuda")
    assert dist.get_backend() == "nccl"
    ctx = cake.ContextDetKcp([0, 10, 40], dist.group.WORLD)
    assert ctx._transport.device_exchange
    return out


def case_release(rank, world_size, seed):
    """What a context holds after its calls: the exchanged tensors are released by gloo before
    the call returns (counted through a wrapper of batch_isend_irecv), and close() lets go of
    the transport and so of the group without the collector's help (gc disabled)."""
    import gc
    import weakref
    from cake import _transport
    seen = []
    real = _transport.dist.batch_isend_irecv

    def recording(ops):
        seen.extend(op.tensor for op in ops)
        return real(ops)

    p = Problem(seed, world_size, max_rows=300)
    gc.disable()
    try:
        ctx = cake.ContextDetKcp(p.cu, partition=p.partition)
        rows = ctx.global_rows()
        _transport.dist.batch_isend_irecv = recording
        try:
            run_op(ctx, [x[rows] for x in p.xs], p.ws, [dy[rows] for dy in p.dys], True)
        finally:
            _transport.dist.batch_isend_irecv = real
        held = [t._use_count() for t in seen]  # the list's reference alone: 1
        transport = weakref.ref(ctx._transport)
        ctx.close()
        del ctx
        freed = transport() is None
    finally:
        gc.enable()
    return {"exchanged": len(seen), "held": held, "transport_freed": freed}


CASES = {"release": case_release, "match": case_match, "checkpoint": case_checkpoint,
         "failure": case_failure, "timeout": case_timeout, "mismatch": case_mismatch,
         "nccl": case_nccl, "timeout_inf": case_timeout_inf, "compile": case_compile,
         "bias_silu": case_bias_silu, "short_conv": case_short_conv}
