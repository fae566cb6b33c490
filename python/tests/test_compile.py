"""torch.compile(fullgraph=True) of functions and modules calling the entry points: no graph
break (torch._dynamo.explain), bitwise the eager results forward and backward, single and
multi, with and without torch.utils.checkpoint and recompute handles; a new handle every step
reuses the compiled graph; the compiled backward recomputes the forward from the handle, as
eager checkpointing does (the same C calls, counted by ctx.stats())."""
import pytest
import torch
import torch._dynamo.testing
from torch.utils.checkpoint import checkpoint

import cake
from _problems import Problem, assert_bitwise, assert_compiled_calls, cuda_ready

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not cuda_ready(), reason="needs a CUDA device and libcake_cuda"))]
MODES = ["plain", "checkpoint", "checkpoint+handle", "reentrant+handle"]
COUNTED = ("forward_calls", "backward_calls", "forwards_from_handle", "exchanges")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def conv(multi, xs, ws, ctx, handles):
    if multi:
        return cake.cake_causal_conv1d_det_multi_kcp(
            list(xs), list(ws), ctx, recompute_handle=handles[0] if handles else None)
    return tuple(cake.cake_causal_conv1d_det_kcp(x, w, ctx, recompute_handle=h)
                 for x, w, h in zip(xs, ws, handles or [None] * len(xs)))


def make_step(multi, mode, n):
    """A step: the convolution and an elementwise op whose bits no compiler can change
    (relu, times 2), under checkpoint or not."""
    def body(ctx, handles, *t):
        ys = conv(multi, t[:n], t[n:], ctx, handles)
        return tuple(torch.relu(y) * 2 for y in ys)

    def step(ctx, handles, *t):
        if mode == "plain":
            return body(ctx, handles, *t)
        return checkpoint(body, ctx, handles, *t, use_reentrant=mode.startswith("reentrant"))
    return step


def handles_for(multi, mode, n):
    if not mode.endswith("handle"):
        return None
    return [cake.RecomputeHandleDetKcp() for _ in range(1 if multi else n)]


def run(step, ctx, p, device, multi, mode):
    """One forward and backward of `step` on fresh leaves: (outputs, dxs, dws, stats delta)."""
    n = len(p.xs)
    xs = [x.to(device).requires_grad_() for x in p.xs]
    ws = [w.to(device).requires_grad_() for w in p.ws]
    handles = handles_for(multi, mode, n)
    before = ctx.stats()
    outs = step(ctx, handles, *xs, *ws)
    torch.autograd.backward(list(outs), [dy.to(device) for dy in p.dys])
    after = ctx.stats()
    for h in handles or []:
        assert h.contains("conv")
        h.close()
    delta = {k: after[k] - before[k] for k in COUNTED}
    return [o.detach() for o in outs], [x.grad for x in xs], [w.grad for w in ws], delta


def assert_same(got, want, where):
    for j, name in enumerate(("out", "dx", "dw")):
        for i, (g, w) in enumerate(zip(got[j], want[j])):
            assert_bitwise(f"{name}[{i}] {where}", g, w)


@pytest.mark.parametrize("multi", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_no_graph_break(multi, mode):
    p = Problem(7000 + MODES.index(mode), 1, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    n = len(p.xs)
    step = make_step(multi, mode, n)
    xs = [x.clone().requires_grad_() for x in p.xs]
    ws = [w.clone().requires_grad_() for w in p.ws]
    explained = torch._dynamo.explain(step)(ctx, handles_for(multi, mode, n), *xs, *ws)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1, explained


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("multi", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_compiled_step_is_bitwise_eager(device, multi, mode):
    p = Problem(7100 + 10 * MODES.index(mode) + multi, 1, max_rows=400, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    n = len(p.xs)
    step = make_step(multi, mode, n)
    eager = run(step, ctx, p, device, multi, mode)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, fullgraph=True, backend=counter)
    for k in range(3):  # new leaves and new handles every step: one compiled graph
        got = run(compiled, ctx, p, device, multi, mode)
        assert_same(got[:3], eager[:3], f"step {k}, {device}, multi={multi}, {mode}")
        # the same C calls as eager: with a handle a compiled backward that recomputes the
        # forward reads it (no exchange), as torch.utils.checkpoint does eagerly
        assert_compiled_calls(got[3], eager[3], f"step {k}, {device}, multi={multi}, {mode}")
    assert counter.frame_count == 1
    calls = 1 if multi else n
    expected_from_handle = calls if mode.endswith("handle") else 0
    assert eager[3]["forwards_from_handle"] == expected_from_handle
    assert eager[3]["forward_calls"] == calls * (1 if mode == "plain" else 2)
    assert eager[3]["backward_calls"] == calls


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_module(device):
    """An nn.Module with the three weights as Parameters, compiled whole."""
    class QKVConv(torch.nn.Module):
        def __init__(self, ws):
            super().__init__()
            self.ws = torch.nn.ParameterList([torch.nn.Parameter(w.clone()) for w in ws])

        def forward(self, xs, ctx, handle):
            ys = cake.cake_causal_conv1d_det_multi_kcp(xs, list(self.ws), ctx,
                                                       recompute_handle=handle)
            return torch.cat([y.float() for y in ys], dim=-1)

    p = Problem(7200, 1, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    eager_mod = QKVConv(p.ws).to(device)
    compiled_mod = torch.compile(QKVConv(p.ws).to(device), fullgraph=True)
    dy = torch.cat([dy.float() for dy in p.dys], dim=-1).to(device)
    results = []
    for mod in (eager_mod, compiled_mod, compiled_mod):
        xs = [x.to(device).requires_grad_() for x in p.xs]
        mod.zero_grad()
        with cake.RecomputeHandleDetKcp() as handle:
            out = checkpoint(mod, xs, ctx, handle, use_reentrant=False)
            out.backward(dy)
        results.append((out.detach(), [x.grad for x in xs], [w.grad.clone() for w in mod.ws]))
    for got in results[1:]:
        assert_bitwise("out", got[0], results[0][0])
        for i in range(len(p.xs)):
            assert_bitwise(f"dx[{i}]", got[1][i], results[0][1][i])
            assert_bitwise(f"dw[{i}]", got[2][i], results[0][2][i])


def test_compiled_calls_are_kept_and_ordered():
    """Two identical calls are two calls (the ops declare their effects; nothing merges them),
    and an unused output still runs its call: the C call counts equal eager's."""
    p = Problem(7300, 1, max_tensors=1)
    ctx = cake.ContextDetKcp(p.cu)

    def fn(x, w):
        a = cake.cake_causal_conv1d_det_kcp(x, w, ctx)
        b = cake.cake_causal_conv1d_det_kcp(x, w, ctx)  # the same inputs
        cake.cake_causal_conv1d_det_kcp(x, w, ctx)      # unused
        return a, b

    x, w = p.xs[0], p.ws[0]
    before = ctx.stats()["forward_calls"]
    eager = fn(x, w)
    middle = ctx.stats()["forward_calls"]
    compiled = torch.compile(fn, fullgraph=True)(x, w)
    after = ctx.stats()["forward_calls"]
    assert middle - before == 3 and after - middle == 3
    for g, e in zip(compiled, eager):
        assert_bitwise("y", g, e)


def test_double_backward_raises():
    """create_graph=True through the op (a gradient penalty) is refused, eagerly and under
    checkpoint, naming the entry point."""
    p = Problem(7400, 1, max_tensors=2)
    ctx = cake.ContextDetKcp(p.cu)
    x = p.xs[0].clone().requires_grad_()
    w = p.ws[0].clone().requires_grad_()
    y = cake.cake_causal_conv1d_det_kcp(x, w, ctx)
    with pytest.raises(RuntimeError, match="cake_causal_conv1d_det_kcp: double backward is "
                                           "not supported"):
        torch.autograd.grad(y.float().square().sum(), [x, w], create_graph=True)
    ys = cake.cake_causal_conv1d_det_multi_kcp([x], [w], ctx)
    with pytest.raises(RuntimeError, match="cake_causal_conv1d_det_multi_kcp: double backward"):
        torch.autograd.grad(ys[0].float().sum(), [w], create_graph=True)
    # a plain backward afterwards still works (nothing was left half done)
    y = cake.cake_causal_conv1d_det_kcp(x, w, ctx)
    (gx,) = torch.autograd.grad(y.float().sum(), [x])
    assert gx.shape == x.shape


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_with_graph_breaks(device):
    """Without fullgraph, around a graph break: the case that raised AttributeError
    ('torch.Stream' object has no attribute 'cuda_stream') on CUDA. The stream is read inside
    the op, as a raw pointer, never from a traced Stream object."""
    p = Problem(7500, 1, max_tensors=2)
    ctx = cake.ContextDetKcp(p.cu)

    def fn(xs, ws):
        a = cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx)
        torch._dynamo.graph_break()
        return cake.cake_causal_conv1d_det_multi_kcp([y.contiguous() for y in a], ws, ctx)

    xs = [x.to(device) for x in p.xs]
    ws = [w.to(device) for w in p.ws]
    side = torch.cuda.Stream() if device == "cuda" else None
    eager = fn(xs, ws)
    compiled = torch.compile(fn)
    if side is not None:  # on a side stream too
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = compiled(xs, ws)
        torch.cuda.current_stream().wait_stream(side)
    else:
        got = compiled(xs, ws)
    for i, (g, e) in enumerate(zip(got, eager)):
        assert_bitwise(f"y[{i}]", g, e)


def test_new_context_and_temporary_handle_every_step():
    """A new batch layout every step (new cu_seqlens, new row count, a new context) and a
    handle the caller does not keep: at most one recompile (dynamo makes the sizes dynamic),
    and the compiled backward's recompute still finds the handle (its token keeps it alive,
    as the eager checkpoint's closure does)."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def step(xs, ws, ctx, handle):
        return checkpoint(lambda *t: cake.cake_causal_conv1d_det_multi_kcp(
            list(t[:2]), list(t[2:]), ctx, recompute_handle=handle), *xs, *ws,
            use_reentrant=False)

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    for k, cu in enumerate(([0, 40, 96], [0, 10, 30, 120], [0, 5, 50, 60, 200], [0, 64],
                            [0, 20, 21, 22, 96])):
        ctx = cake.ContextDetKcp(cu)
        g = torch.Generator().manual_seed(7600 + k)
        xs = [torch.randn(cu[-1], 16, generator=g).to(torch.bfloat16) for _ in range(2)]
        ws = [torch.rand(16, 4, generator=g) - 0.5 for _ in range(2)]
        dys = [torch.randn(cu[-1], 16, generator=g).to(torch.bfloat16) for _ in range(2)]
        want = run_op_eager(ctx, xs, ws, dys)
        leaves = [x.clone().requires_grad_() for x in xs] + [w.clone().requires_grad_()
                                                            for w in ws]
        before = ctx.stats()
        ys = compiled(leaves[:2], leaves[2:], ctx, cake.RecomputeHandleDetKcp())
        torch.autograd.backward(list(ys), dys)
        after = ctx.stats()
        assert_compiled_calls({k: after[k] - before[k] for k in COUNTED},
                              {"forward_calls": 2, "backward_calls": 1, "forwards_from_handle": 1,
                               "exchanges": 0}, f"step {k}")
        for i in range(2):
            assert_bitwise(f"y[{i}] step {k}", ys[i], want[0][i])
            assert_bitwise(f"dx[{i}] step {k}", leaves[i].grad, want[1][i])
            assert_bitwise(f"dw[{i}] step {k}", leaves[2 + i].grad, want[2][i])
    assert counter.frame_count <= 2, counter.frame_count


def run_op_eager(ctx, xs, ws, dys):
    xs = [x.clone().requires_grad_() for x in xs]
    ws = [w.clone().requires_grad_() for w in ws]
    ys = cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx)
    torch.autograd.backward(list(ys), dys)
    return [y.detach() for y in ys], [x.grad for x in xs], [w.grad for w in ws]
