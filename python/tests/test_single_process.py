"""One process (no process group): numerics against float64, entry points, shapes, strides,
recompute handles and contexts."""
import pytest
import torch
from torch.utils.checkpoint import checkpoint

import cake
from _problems import (Problem, assert_bitwise, assert_close64, reference64, run_op)


@pytest.mark.parametrize("seed", range(8))
def test_within_bf16_rounding_of_float64(seed):
    p = Problem(seed, 1, max_rows=600)
    ys, dxs, dws = run_op(cake.ContextDetKcp(p.cu), p.xs, p.ws, p.dys, True)
    for i in range(len(p.channels)):
        y64, dx64, dw64, ay, adx, adw = reference64(p.cu, p.xs[i], p.ws[i], p.dys[i])
        # one bf16 rounding of an fp32 sum of 4 products (relative 2^-8 covers both)
        assert_close64(f"y[{i}] {p}", ys[i], y64, ay, 2.0 ** -8, 2.0 ** -16)
        assert_close64(f"dx[{i}] {p}", dxs[i], dx64, adx, 2.0 ** -8, 2.0 ** -16)
        # fp32 sums over 256-row blocks, then a tree: far inside 300 ulps of the sum of |terms|
        assert_close64(f"dw[{i}] {p}", dws[i], dw64, adw, 0, 300 * 2.0 ** -24)


def test_conv1d_by_hand():
    """A tiny case written out: causal taps, a sequence boundary, an empty sequence."""
    cu = [0, 2, 2, 5]
    x = torch.arange(1, 6, dtype=torch.float32)[:, None].repeat(1, 8).to(torch.bfloat16)
    w = torch.tensor([[1.0, 2.0, 4.0, 8.0]]).repeat(8, 1)  # w[c][3] multiplies the current row
    y = cake.cake_causal_conv1d_det_kcp(x, w, cake.ContextDetKcp(cu))
    expected = [8 * 1, 4 * 1 + 8 * 2, 8 * 3, 4 * 3 + 8 * 4, 2 * 3 + 4 * 4 + 8 * 5]
    assert y[:, 0].float().tolist() == expected


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_multi_equals_single_calls_and_thread_counts(seed):
    p = Problem(seed, 1, max_tensors=4)
    multi = run_op(cake.ContextDetKcp(p.cu, num_threads=2), p.xs, p.ws, p.dys, True)
    single = run_op(cake.ContextDetKcp(p.cu, num_threads=1), p.xs, p.ws, p.dys, False)
    for j, name in enumerate(("y", "dx", "dw")):
        for i in range(len(p.channels)):
            assert_bitwise(f"{name}[{i}]", single[j][i], multi[j][i])


def test_batched_shape_and_noncontiguous_grad():
    p = Problem(21, 1, max_tensors=1)
    ctx = cake.ContextDetKcp(p.cu)
    x, w, dy = p.xs[0], p.ws[0], p.dys[0]
    base = run_op(ctx, [x], [w], [dy], False)
    # [1, S, C] input, and an incoming gradient with other strides (a transposed copy)
    xb = x[None].clone().requires_grad_()
    wb = w.clone().requires_grad_()
    y = cake.cake_causal_conv1d_det_kcp(xb, wb, ctx)
    assert y.shape == xb.shape and y.dtype == torch.bfloat16
    dy_t = dy.t().contiguous().t()[None]  # same values, column-major
    assert not dy_t.is_contiguous()
    y.backward(dy_t)
    assert_bitwise("y", y[0], base[0][0])
    assert_bitwise("dx", xb.grad[0], base[1][0])
    assert_bitwise("dw", wb.grad, base[2][0])
    # an expanded (stride 0) gradient: y.sum()
    x2 = x.clone().requires_grad_()
    cake.cake_causal_conv1d_det_kcp(x2, w, ctx).sum().backward()
    ones = run_op(ctx, [x], [w], [torch.ones_like(dy)], False)
    assert_bitwise("dx from y.sum()", x2.grad, ones[1][0])


def test_empty_batch():
    ctx = cake.ContextDetKcp([0])
    assert ctx.local_rows == 0 and ctx.pool_rows == 0
    x = torch.empty(0, 16, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(16, 4, requires_grad=True)
    y = cake.cake_causal_conv1d_det_kcp(x, w, ctx)
    y.sum().backward()
    assert y.shape == (0, 16) and x.grad.shape == (0, 16)
    assert_bitwise("dw", w.grad, torch.zeros(16, 4))


def test_gradients_only_where_asked():
    p = Problem(31, 1, max_tensors=1)
    ctx = cake.ContextDetKcp(p.cu)
    x = p.xs[0].clone()
    w = p.ws[0].clone().requires_grad_()
    cake.cake_causal_conv1d_det_kcp(x, w, ctx).float().sum().backward()
    assert x.grad is None and w.grad is not None


def test_cooperative_accepted_on_cpu():
    p = Problem(41, 1)
    ctx = cake.ContextDetKcp(p.cu)
    base = run_op(ctx, p.xs, p.ws, p.dys, True)
    for coop in (True, False):
        got = run_op(ctx, p.xs, p.ws, p.dys, True, cooperative=coop)
        for j in range(3):
            for i in range(len(p.channels)):
                assert_bitwise(f"cooperative={coop}", got[j][i], base[j][i])


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_with_handle_one_process(use_reentrant):
    p = Problem(51, 1, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    base = run_op(ctx, p.xs, p.ws, p.dys, True)
    handle = cake.RecomputeHandleDetKcp()
    xs = [x.clone().requires_grad_() for x in p.xs]
    ws = [w.clone().requires_grad_() for w in p.ws]
    n = len(xs)
    before = ctx.stats()["forwards_from_handle"]
    ys = checkpoint(lambda *t: cake.cake_causal_conv1d_det_multi_kcp(
        list(t[:n]), list(t[n:]), ctx, recompute_handle=handle), *xs, *ws,
        use_reentrant=use_reentrant)
    assert handle.contains("conv")
    torch.autograd.backward(list(ys), p.dys)
    assert ctx.stats()["forwards_from_handle"] == before + 1
    for i in range(n):
        assert_bitwise("y", ys[i], base[0][i])
        assert_bitwise("dx", xs[i].grad, base[1][i])
        assert_bitwise("dw", ws[i].grad, base[2][i])


def test_handle_misuse_raises_the_c_message():
    p = Problem(61, 1, max_tensors=2)
    ctx = cake.ContextDetKcp(p.cu)
    x = torch.zeros(p.T, 8, dtype=torch.bfloat16)
    w = torch.zeros(8, 4)
    handle = cake.RecomputeHandleDetKcp()
    cake.cake_causal_conv1d_det_multi_kcp([x], [w], ctx, recompute_handle=handle)
    with pytest.raises(ValueError, match="filled by a multi call, this is a single call"):
        cake.cake_causal_conv1d_det_kcp(x, w, ctx, recompute_handle=handle)
    x16 = torch.zeros(p.T, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"channels\[0\] = 8, this call has 16"):
        cake.cake_causal_conv1d_det_multi_kcp([x16], [torch.zeros(16, 4)], ctx,
                                              recompute_handle=handle)
    with pytest.raises(ValueError, match="holds 1 tensors, this call has 2"):
        cake.cake_causal_conv1d_det_multi_kcp([x, x], [w, w], ctx, recompute_handle=handle)
    other = cake.ContextDetKcp([0, p.T + 8])
    with pytest.raises(ValueError, match="filled through another context"):
        cake.cake_causal_conv1d_det_multi_kcp([torch.zeros(p.T + 8, 8, dtype=torch.bfloat16)],
                                              [w], other, recompute_handle=handle)
    handle.erase("conv")
    assert not handle.contains("conv")
    cake.cake_causal_conv1d_det_kcp(x, w, ctx, recompute_handle=handle)  # now a single call's


def test_handle_other_keys():
    with cake.RecomputeHandleDetKcp() as handle:
        assert "kda" not in handle
        handle.set("kda", b"\x00state\x01")
        handle.set("other", bytearray(3))
        assert handle.get("kda") == b"\x00state\x01" and "kda" in handle
        handle.set("kda", memoryview(b"new"))
        assert handle.get("kda") == b"new" and handle.get("other") == b"\x00\x00\x00"
        handle.set("empty", b"")
        assert handle.get("empty") == b""
        handle.erase("other")
        assert not handle.contains("other")
        with pytest.raises(ValueError, match='"conv" is reserved'):
            handle.set("conv", b"x")
        with pytest.raises(ValueError, match='"conv" is reserved'):
            handle.get("conv")
        with pytest.raises(ValueError, match='no entry "missing"'):
            handle.get("missing")
        with pytest.raises(TypeError, match="key: expected a str"):
            handle.set(3, b"")
    with pytest.raises(ValueError, match="closed"):
        handle.get("kda")


def test_context_partitions_and_rows():
    cu = torch.tensor([0, 3, 3, 10])
    for partition in ("contiguous", "zigzag", [0, 10], [[(4, 10), (0, 4)]], [[(0, 0), (0, 10)]]):
        ctx = cake.ContextDetKcp(cu, partition=partition)
        assert (ctx.rank, ctx.world_size, ctx.local_rows, ctx.total_rows, ctx.num_seqs) == \
            (0, 1, 10, 10, 3)
        rows = ctx.global_rows().tolist()
        assert sorted(rows) == list(range(10))
        if partition == [[(4, 10), (0, 4)]]:
            assert rows == list(range(4, 10)) + list(range(4))
        assert "rank 0 of 1" in repr(ctx)
    ctx.close()
    with pytest.raises(ValueError, match="closed"):
        ctx.stats()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(cu_seqlens=[0, 5, 3]), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=[]), ValueError, "cu_seqlens: expected at least 1 offset"),
    (dict(cu_seqlens=[0, 2.5]), TypeError, r"cu_seqlens\[1\]: expected an int, got float"),
    (dict(cu_seqlens=torch.tensor([0.0, 4.0])), TypeError, "expected an integer tensor"),
    (dict(cu_seqlens=[0, 4], partition="stripes"), ValueError, "partition: expected"),
    (dict(cu_seqlens=[0, 4], partition=[0, 2, 4]), ValueError, "expected 2 boundaries"),
    (dict(cu_seqlens=[0, 4], partition=[0, 3]), ValueError, "boundaries"),
    (dict(cu_seqlens=[0, 4], partition=[[(0, 2)]]), ValueError, "ranges"),
    (dict(cu_seqlens=[0, 4], partition=[[(0, 2, 4)]]), ValueError, r"partition\[0\]\[0\]"),
    (dict(cu_seqlens=[0, 4], check=1), TypeError, "check: expected a bool"),
    (dict(cu_seqlens=[0, 4], num_threads=-1), ValueError, "num_threads"),
    (dict(cu_seqlens=[0, 4], timeout_seconds=-1.0), ValueError, "timeout_seconds"),
])
def test_context_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        cake.ContextDetKcp(**kwargs)


def test_public_names():
    import cake.causal_conv1d_det_train_kcp as mod
    names = {"cake_causal_conv1d_det_kcp", "cake_causal_conv1d_det_multi_kcp", "ContextDetKcp",
             "RecomputeHandleDetKcp"}
    assert set(cake.__all__) == names | {"CakeError", "ShortConvolution",
                                         "short_convolution_multi", "set_conv_context"}
    assert set(mod.__all__) == names
    for name in names:
        assert getattr(cake, name) is getattr(mod, name)
        assert getattr(mod, name).__doc__
    # the exception the docstrings name, with the C status
    assert cake.CakeError is cake._lib.CakeError and issubclass(cake.CakeError, RuntimeError)
    assert cake.CakeError("message", 4).status == 4
