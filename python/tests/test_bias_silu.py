"""Bias and SiLU through the binding (the internal entry point behind cake.ShortConvolution), one
process: bitwise the C library's single-rank entry points, within bf16 rounding of float64,
multi = single calls, run to run and thread counts, checkpoint with a handle, torch.compile,
and the checks of the new arguments."""
import pytest
import torch
import torch._dynamo.testing
from torch.utils.checkpoint import checkpoint

import cake
from cake.causal_conv1d_det_train_kcp import conv_det_kcp
from _problems import (VARIANT_OUTPUTS, VARIANTS, Problem, assert_all_bitwise, assert_bitwise,
                       assert_close64, assert_compiled_calls, cuda_ready, make_biases,
                       reference64_params, run_variant, single_rank_reference, variant_id)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not cuda_ready(), reason="needs a CUDA device and libcake_cuda"))]



def biases_for(p, with_bias):
    return make_biases(p) if with_bias else None


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
@pytest.mark.parametrize("seed", range(3))
def test_bitwise_single_rank_entry_points(variant, seed):
    """The context path (cake_forward_multi / cake_backward_multi through the binding) against
    the C library's single-rank entry points given the same params: every output bitwise."""
    act, with_bias = variant
    p = Problem(8000 + seed, 1, max_rows=700, max_tensors=3)
    bs = biases_for(p, with_bias)
    got = run_variant(cake.ContextDetKcp(p.cu), p.xs, p.ws, bs, p.dys, True, act)
    want = single_rank_reference(p, act, bs)
    assert_all_bitwise(got, want, f"{act} bias={with_bias} {p}")


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
@pytest.mark.parametrize("seed", range(4))
def test_within_bf16_rounding_of_float64(variant, seed):
    act, with_bias = variant
    p = Problem(8100 + seed, 1, max_rows=600)
    bs = biases_for(p, with_bias)
    ys, dxs, dws, dbs = run_variant(cake.ContextDetKcp(p.cu), p.xs, p.ws, bs, p.dys, True, act)
    for i in range(len(p.channels)):
        b = bs[i] if bs else None
        y64, dx64, dw64, db64, ay, adx, adw, adb = reference64_params(
            p.cu, p.xs[i], p.ws[i], b, p.dys[i], act)
        where = f"[{i}] {act} bias={with_bias} {p}"
        # one bf16 rounding (2^-9 relative) of an fp32 value a few ulp off (terms * 2^-21)
        assert_close64(f"y{where}", ys[i], y64, ay, 2.0 ** -8, 2.0 ** -16)
        assert_close64(f"dx{where}", dxs[i], dx64, adx, 2.0 ** -8, 2.0 ** -16)
        # fp32 sums over 256-row blocks, then a tree, of terms a few ulp off
        assert_close64(f"dw{where}", dws[i], dw64, adw, 0, 300 * 2.0 ** -24)
        if with_bias:
            assert_close64(f"dbias{where}", dbs[i], db64, adb, 0, 300 * 2.0 ** -24)


def test_silu_by_hand():
    """A tiny case written out: y = bf16(silu(conv + bias)); bias [C] per channel."""
    cu = [0, 3]
    x = torch.tensor([1.0, 2.0, -1.0])[:, None].repeat(1, 8).to(torch.bfloat16)
    w = torch.tensor([[0.0, 0.0, 0.5, 1.0]]).repeat(8, 1)
    b = torch.arange(8, dtype=torch.float32) * 0.25
    y = conv_det_kcp(x, w, cake.ContextDetKcp(cu), biases=b, activation="silu", multi=False)
    a = torch.tensor([1.0, 2.5, 0.0])[:, None] + b[None]
    assert torch.equal(y, torch.nn.functional.silu(a.double()).to(torch.bfloat16))
    y = conv_det_kcp(x, w, cake.ContextDetKcp(cu), biases=b, multi=False)  # bias alone
    assert torch.equal(y, a.to(torch.bfloat16))


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_multi_equals_single_calls_threads_and_runs(variant):
    act, with_bias = variant
    p = Problem(8200 + VARIANTS.index(variant), 1, max_rows=900, max_tensors=4)
    bs = biases_for(p, with_bias)
    multi = run_variant(cake.ContextDetKcp(p.cu, num_threads=2), p.xs, p.ws, bs, p.dys, True,
                        act)
    single = run_variant(cake.ContextDetKcp(p.cu, num_threads=1), p.xs, p.ws, bs, p.dys, False,
                         act)
    again = run_variant(cake.ContextDetKcp(p.cu, num_threads=2), p.xs, p.ws, bs, p.dys, True,
                        act)
    assert_all_bitwise(single, multi, f"single vs multi {act} bias={with_bias}")
    assert_all_bitwise(again, multi, f"run to run {act} bias={with_bias}")


def test_variants_differ_and_plain_equals_seed_entry_point():
    """bias / SiLU change the results (they reach C), and activation=None without a bias is
    bitwise the seed's entry point."""
    p = Problem(8300, 1, max_rows=300, max_tensors=2)
    ctx = cake.ContextDetKcp(p.cu)
    from _problems import run_op
    seed = run_op(ctx, p.xs, p.ws, p.dys, True)
    plain = run_variant(ctx, p.xs, p.ws, None, p.dys, True, None)
    for j in range(3):
        for i in range(len(p.xs)):
            assert_bitwise(f"plain {VARIANT_OUTPUTS[j]}[{i}]", plain[j][i], seed[j][i])
    if p.T:
        silu = run_variant(ctx, p.xs, p.ws, None, p.dys, True, "silu")
        assert not torch.equal(silu[0][0], plain[0][0])


def test_bias_gradient_only_where_asked_and_shapes():
    p = Problem(8400, 1, max_rows=200, max_tensors=1)
    ctx = cake.ContextDetKcp(p.cu)
    x, w = p.xs[0], p.ws[0].clone().requires_grad_()
    b = make_biases(p)[0]  # no grad
    y = conv_det_kcp(x[None], w, ctx, biases=b, activation="silu", multi=False)
    assert y.shape == (1, p.T, p.channels[0]) and y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert w.grad is not None and b.grad is None
    b2 = make_biases(p)[0].requires_grad_()
    conv_det_kcp(x, p.ws[0], ctx, biases=b2, multi=False).float().sum().backward()
    assert b2.grad.shape == b2.shape and b2.grad.dtype == torch.float32


def test_empty_batch_dbias_is_zero():
    ctx = cake.ContextDetKcp([0])
    x = torch.empty(0, 16, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(16, 4, requires_grad=True)
    b = torch.randn(16, requires_grad=True)
    y = conv_det_kcp([x], [w], ctx, biases=[b], activation="silu")[0]
    y.sum().backward()
    assert_bitwise("dw", w.grad, torch.zeros(16, 4))
    assert_bitwise("dbias", b.grad, torch.zeros(16))


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("variant", [("silu", True), ("silu", False)], ids=variant_id)
def test_checkpoint_with_handle(variant, use_reentrant):
    """The recompute reads the handle (counted by the context); bitwise the plain run."""
    act, with_bias = variant
    p = Problem(8500, 1, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    bs = biases_for(p, with_bias)
    base = run_variant(ctx, p.xs, p.ws, bs, p.dys, True, act)
    handle = cake.RecomputeHandleDetKcp()
    n = len(p.xs)
    leaves = [t.clone().requires_grad_() for t in p.xs + p.ws + (bs or [])]
    before = ctx.stats()

    def body(*t):
        return conv_det_kcp(list(t[:n]), list(t[n:2 * n]), ctx,
                            biases=list(t[2 * n:]) if with_bias else None, activation=act,
                            recompute_handle=handle)

    ys = checkpoint(body, *leaves, use_reentrant=use_reentrant)
    torch.autograd.backward(list(ys), p.dys)
    after = ctx.stats()
    assert after["forwards_from_handle"] - before["forwards_from_handle"] == 1
    assert after["forward_calls"] - before["forward_calls"] == 2
    got = ([y.detach() for y in ys], [t.grad for t in leaves[:n]],
           [t.grad for t in leaves[n:2 * n]], [t.grad for t in leaves[2 * n:]])
    assert_all_bitwise(got, base, f"checkpoint {act} bias={with_bias}")


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["plain", "checkpoint+handle"])
@pytest.mark.parametrize("multi", [True, False])
def test_compiled_is_bitwise_eager(fresh_dynamo, multi, mode, device):
    """torch.compile(fullgraph) with bias and SiLU: no graph break, bitwise the eager step, the
    same C calls (the compiled backward's recompute reads the handle)."""
    p = Problem(8600 + multi, 1, max_rows=400, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    bs = [b.to(device) for b in make_biases(p)]
    xs, ws, dys = ([t.to(device) for t in ts] for ts in (p.xs, p.ws, p.dys))
    n = len(p.xs)

    def body(handles, *t):
        if multi:
            ys = conv_det_kcp(list(t[:n]), list(t[n:2 * n]), ctx, biases=list(t[2 * n:]),
                              activation="silu", recompute_handle=handles[0])
        else:
            ys = [conv_det_kcp(t[i], t[n + i], ctx, biases=t[2 * n + i], activation="silu",
                               recompute_handle=handles[i], multi=False) for i in range(n)]
        return tuple(torch.relu(y) * 2 for y in ys)

    def step(handles, *t):
        if mode == "plain":
            return body(handles, *t)
        return checkpoint(body, handles, *t, use_reentrant=False)

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in xs + ws + bs]
        handles = [cake.RecomputeHandleDetKcp() if mode != "plain" else None
                   for _ in range(1 if multi else n)]
        before = ctx.stats()
        outs = fn(handles, *leaves)
        torch.autograd.backward(list(outs), dys)
        after = ctx.stats()
        delta = {k: after[k] - before[k] for k in ("forward_calls", "backward_calls",
                                                   "forwards_from_handle")}
        return ([o.detach() for o in outs], [t.grad for t in leaves[:n]],
                [t.grad for t in leaves[n:2 * n]], [t.grad for t in leaves[2 * n:]]), delta

    explained = torch._dynamo.explain(step)(
        [cake.RecomputeHandleDetKcp() if mode != "plain" else None
         for _ in range(1 if multi else n)],
        *[t.clone().requires_grad_() for t in xs + ws + bs])
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    eager, eager_delta = run(step)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, fullgraph=True, backend=counter)
    for k in range(2):
        got, delta = run(compiled)
        assert_all_bitwise(got, eager, f"compiled step {k}, multi={multi}, {mode}")
        assert_compiled_calls(delta, eager_delta, f"step {k}, multi={multi}, {mode}")
    assert counter.frame_count == 1


BAD = [
    (lambda c, x, w: conv_det_kcp(x, w, c, biases=torch.zeros(16, dtype=torch.bfloat16),
                                  multi=False),
     TypeError, "bias: expected dtype torch.float32, got torch.bfloat16"),
    (lambda c, x, w: conv_det_kcp(x, w, c, biases=torch.zeros(8), multi=False),
     ValueError, r"bias: expected shape \[16\] \(the channels of x\), got \[8\]"),
    (lambda c, x, w: conv_det_kcp(x, w, c, biases=torch.zeros(16, 2)[:, 0], multi=False),
     ValueError, "bias: expected a contiguous tensor"),
    (lambda c, x, w: conv_det_kcp(x, w, c, biases=[1.0] * 16, multi=False),
     TypeError, "bias: expected a torch.Tensor, got list"),
    (lambda c, x, w: conv_det_kcp([x, x], [w, w], c, biases=[torch.zeros(16)]),
     ValueError, r"biases: expected 2 tensors \(one per tensor of xs\), got 1"),
    (lambda c, x, w: conv_det_kcp([x, x], [w, w], c, biases=torch.zeros(16)),
     TypeError, "biases: expected None or a list or tuple of tensors, got Tensor"),
    (lambda c, x, w: conv_det_kcp([x, x], [w, w], c, biases=[torch.zeros(16), None]),
     TypeError, r"biases\[1\]: expected a torch.Tensor, got NoneType"),
    (lambda c, x, w: conv_det_kcp([x], [w], c, activation="gelu"),
     ValueError, "activation: expected None or 'silu', got 'gelu'"),
    (lambda c, x, w: conv_det_kcp([x], [w], c, activation=1),
     ValueError, "activation: expected None or 'silu', got 1"),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_bias_and_activation(index):
    ctx = cake.ContextDetKcp([0, 5, 12])
    x, w = torch.zeros(12, 16, dtype=torch.bfloat16), torch.zeros(16, 4)
    call, error, message = BAD[index]
    before = ctx.stats()
    with pytest.raises(error, match=message):
        call(ctx, x, w)
    assert ctx.stats() == before  # refused before C


def test_seed_entry_points_unchanged():
    """The seed's two functions keep exactly their signatures and defaults (SPEC 4)."""
    import inspect
    s = inspect.signature(cake.cake_causal_conv1d_det_kcp)
    assert str(s) == "(x, w, ctx, *, recompute_handle=None, cooperative=None)"
    s = inspect.signature(cake.cake_causal_conv1d_det_multi_kcp)
    assert str(s) == "(xs, weights, ctx, *, recompute_handle=None, cooperative=None)"
