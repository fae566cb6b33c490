"""CUDA graphs: a whole training step (forward and backward, under torch.utils.checkpoint with
a recompute handle) captured with torch.cuda.graph and replayed on new data is bitwise the eager
step; the recompute inside the captured step reads the handle (no exchange)."""
import time

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import cake
from _problems import Problem, assert_bitwise, cuda_ready, warm_up_for_capture

pytestmark = pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and libcake_cuda")


def make_step(ctx, xs, ws, dys, multi):
    n = len(xs)

    def body(*t):
        if multi:
            ys = cake.cake_causal_conv1d_det_multi_kcp(list(t[:n]), list(t[n:]), ctx,
                                                       recompute_handle=handles[0])
        else:
            ys = [cake.cake_causal_conv1d_det_kcp(x, w, ctx, recompute_handle=h)
                  for x, w, h in zip(t[:n], t[n:], handles)]
        return tuple(torch.relu(y) * 2 for y in ys)

    handles = []

    def step():
        """One step: handles made and closed inside it, as eager training does."""
        handles[:] = [cake.RecomputeHandleDetKcp() for _ in range(1 if multi else n)]
        outs = checkpoint(body, *xs, *ws, use_reentrant=False)
        torch.autograd.backward(list(outs), dys)
        for h in handles:
            h.close()
        return outs
    return step


def eager_step(ctx, xs, ws, dys, multi):
    """The same step eagerly on fresh leaves: (outputs, grads)."""
    xs = [x.detach().clone().requires_grad_() for x in xs]
    ws = [w.detach().clone().requires_grad_() for w in ws]
    outs = make_step(ctx, xs, ws, dys, multi)()
    return [o.detach() for o in outs], [t.grad for t in xs + ws]


@pytest.mark.parametrize("multi", [True, False])
def test_captured_training_step_replays_bitwise(multi):
    p = Problem(950 + multi, 1, max_rows=3000, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    xs = [x.cuda().requires_grad_() for x in p.xs]
    ws = [w.cuda().requires_grad_() for w in p.ws]
    dys = [dy.cuda() for dy in p.dys]
    step = make_step(ctx, xs, ws, dys, multi)

    warm_up_for_capture(step, xs + ws)
    for t in xs + ws:
        t.grad = None

    graph = torch.cuda.CUDAGraph()
    before = ctx.stats()
    with torch.cuda.graph(graph):
        static_outs = step()
    after = ctx.stats()
    calls = 1 if multi else len(xs)
    delta = {k: after[k] - before[k] for k in before}
    # captured: the forward, the recompute (read from the handle) and the backward
    assert delta["forward_calls"] == 2 * calls and delta["backward_calls"] == calls, delta
    assert delta["forwards_from_handle"] == calls, delta
    assert delta["exchanges"] == 0, delta
    static_grads = [t.grad for t in xs + ws]

    g = torch.Generator().manual_seed(960 + multi)
    for k in range(3):  # new data in the static inputs, replay, compare with the eager step
        with torch.no_grad():
            for t in xs:
                t.copy_((torch.randn(t.shape, generator=g) * 2).to(torch.bfloat16))
            for t in ws:
                t.copy_(torch.rand(t.shape, generator=g) - 0.5)
            for t in dys:
                t.copy_(torch.randn(t.shape, generator=g).to(torch.bfloat16))
        stats = ctx.stats()
        graph.replay()
        torch.cuda.synchronize()
        assert ctx.stats() == stats  # a replay runs no host code of the library
        outs, grads = eager_step(ctx, xs, ws, dys, multi)
        for i, (a, b) in enumerate(zip(static_outs, outs)):
            assert_bitwise(f"out[{i}] replay {k}", a, b)
        for i, (a, b) in enumerate(zip(static_grads, grads)):
            assert_bitwise(f"grad[{i}] replay {k}", a, b)
    # and the eager GPU step is bitwise the CPU one (SPEC 3), on the last data
    cpu_outs, cpu_grads = eager_step(ctx, [x.cpu() for x in xs], [w.cpu() for w in ws],
                                     [d.cpu() for d in dys], multi)
    for i, (a, b) in enumerate(zip(static_outs, cpu_outs)):
        assert_bitwise(f"out[{i}] against the CPU", a, b)
    for i, (a, b) in enumerate(zip(static_grads, cpu_grads)):
        assert_bitwise(f"grad[{i}] against the CPU", a, b)


def test_eager_step_never_synchronises():
    """The single-process GPU path enqueues work without waiting for the device: a step's host
    calls return while a long kernel queued before them is still running."""
    p = Problem(970, 1, max_rows=3000, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    xs = [x.cuda().requires_grad_() for x in p.xs]
    ws = [w.cuda().requires_grad_() for w in p.ws]
    dys = [dy.cuda() for dy in p.dys]
    step = make_step(ctx, xs, ws, dys, True)
    for _ in range(3):  # warm: the context's tables (uploaded once, synchronously), allocators
        step()
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second of GPU time queued ahead of the step
    start = time.perf_counter()
    step()
    host = time.perf_counter() - start
    done = torch.cuda.Event()
    done.record()
    assert host < 0.3 and not done.query(), f"the step waited for the device ({host:.3f} s)"
    torch.cuda.synchronize()
