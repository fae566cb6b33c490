"""Bad input raises TypeError or ValueError naming the argument, the expected and the given."""
import pytest
import torch

import cake

S, C = 12, 16


@pytest.fixture(scope="module")
def ctx():
    return cake.ContextDetKcp([0, 5, S])


def good():
    return torch.zeros(S, C, dtype=torch.bfloat16), torch.zeros(C, 4)


def single(ctx, x, w, **kw):
    return cake.cake_causal_conv1d_det_kcp(x, w, ctx, **kw)


def multi(ctx, xs, ws, **kw):
    return cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx, **kw)


X, W = good()
CASES = [
    # (call, error, message)
    (lambda c: single(c, X.float(), W), TypeError,
     "x: expected dtype torch.bfloat16, got torch.float32"),
    (lambda c: single(c, X, W.double()), TypeError,
     "w: expected dtype torch.float32, got torch.float64"),
    (lambda c: single(c, X.tolist(), W), TypeError, "x: expected a torch.Tensor, got list"),
    (lambda c: single(c, X, None), TypeError, "w: expected a torch.Tensor, got NoneType"),
    (lambda c: single(c, X[None, None], W), ValueError,
     r"x: expected shape \[S_local, C\] or \[1, S_local, C\], got \[1, 1, 12, 16\]"),
    (lambda c: single(c, torch.zeros(2, S, C, dtype=torch.bfloat16), W), ValueError,
     r"got \[2, 12, 16\]"),
    (lambda c: single(c, torch.zeros(S, 12, dtype=torch.bfloat16), torch.zeros(12, 4)),
     ValueError, "x: channel count 12 is not a positive multiple of 8"),
    (lambda c: single(c, torch.zeros(C, S, dtype=torch.bfloat16).t(), W), ValueError,
     r"x: expected a contiguous tensor, got strides \[1, 12\]"),
    (lambda c: single(c, torch.zeros(S + 1, C, dtype=torch.bfloat16), W), ValueError,
     "x: expected 12 rows \\(this rank's local rows in ctx\\), got 13"),
    (lambda c: single(c, X, torch.zeros(C, 3)), ValueError,
     r"w: expected shape \[16, 4\] \(the channels of x, 4 taps\), got \[16, 3\]"),
    (lambda c: single(c, X, torch.zeros(8, 4)), ValueError,
     r"w: expected shape \[16, 4\]"),
    (lambda c: single(c, X, torch.zeros(4, C).t()), ValueError,
     "w: expected a contiguous tensor"),
    (lambda c: single(c, X.to_sparse(), W), ValueError, "x: expected a dense"),
    (lambda c: single(c, torch.zeros(S, C, dtype=torch.bfloat16, device="meta"), W),
     ValueError, "x: expected a CPU or CUDA tensor, got device meta"),
    (lambda c: single(c, X, W, cooperative=1), TypeError,
     "cooperative: expected True, False or None, got int"),
    (lambda c: single(c, X, W, recompute_handle=object()), TypeError,
     "recompute_handle: expected a RecomputeHandleDetKcp or None, got object"),
    (lambda c: single(None, X, W), TypeError, "ctx: expected a ContextDetKcp, got NoneType"),
    (lambda c: multi(c, [X, X.float()], [W, W]), TypeError,
     r"xs\[1\]: expected dtype torch.bfloat16, got torch.float32"),
    (lambda c: multi(c, [X, X], [W, W.half()]), TypeError,
     r"weights\[1\]: expected dtype torch.float32, got torch.float16"),
    (lambda c: multi(c, [X, X, X], [W, W]), ValueError,
     "weights: expected 3 tensors \\(one per tensor of xs\\), got 2"),
    (lambda c: multi(c, [], []), ValueError, "xs: expected at least 1 tensor, got 0"),
    (lambda c: multi(c, X, [W]), TypeError,
     "xs: expected a list or tuple of tensors, got Tensor"),
    (lambda c: multi(c, [X], W), TypeError,
     "weights: expected a list or tuple of tensors, got Tensor"),
    (lambda c: multi(c, [X, torch.zeros(S, 20, dtype=torch.bfloat16)], [W, W]), ValueError,
     r"xs\[1\]: channel count 20 is not a positive multiple of 8"),
    (lambda c: multi(c, [X, torch.zeros(S, 8, dtype=torch.bfloat16)], [W, W]), ValueError,
     r"weights\[1\]: expected shape \[8, 4\] \(the channels of xs\[1\], 4 taps\), got \[16, 4\]"),
    (lambda c: multi(c, [X, torch.zeros(S - 1, C, dtype=torch.bfloat16)], [W, W]), ValueError,
     r"xs\[1\]: expected 12 rows"),
]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_bad_input(ctx, index):
    call, error, message = CASES[index]
    with pytest.raises(error, match=message):
        call(ctx)


def test_nothing_written_on_failure(ctx):
    """A call that fails its checks leaves the handle and the context untouched."""
    handle = cake.RecomputeHandleDetKcp()
    before = ctx.stats()
    with pytest.raises(ValueError):
        multi(ctx, [X, torch.zeros(S, 12, dtype=torch.bfloat16)], [W, torch.zeros(12, 4)],
              recompute_handle=handle)
    assert not handle.contains("conv") and ctx.stats() == before


def test_closed_objects(ctx):
    closed = cake.ContextDetKcp([0, S])
    closed.close()
    with pytest.raises(ValueError, match="ctx: this ContextDetKcp was closed"):
        single(closed, X, W)
    handle = cake.RecomputeHandleDetKcp()
    handle.close()
    with pytest.raises(ValueError, match="recompute_handle: this RecomputeHandleDetKcp was "
                                         "closed"):
        single(ctx, X, W, recompute_handle=handle)


def test_c_library_messages_surface_as_value_error():
    """Checks only the C library makes (here: cu_seqlens) come back as ValueError."""
    with pytest.raises(ValueError, match="cu_seqlens"):
        cake.ContextDetKcp([1, 5])


def test_cuda_tensors_need_the_cuda_library(ctx, monkeypatch):
    from cake import _lib
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setattr(_lib.get(), "has_cuda", False)
    with pytest.raises(RuntimeError, match="has no GPU kernels"):
        single(ctx, X.cuda(), W.cuda())
