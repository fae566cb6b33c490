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
    # nn.Conv1d's [C, 1, 4] is for the internal calls of cake.ShortConvolution only
    (lambda c: single(c, X, torch.zeros(C, 1, 4)), ValueError,
     r"w: expected shape \[16, 4\] \(the channels of x, 4 taps\), got \[16, 1, 4\]"),
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


# ---- Python ints past int64 / C int, timeouts, groups --------------------------------------

BIG = 2 ** 64 + 100  # ctypes would keep its low 64 bits: 100


@pytest.mark.parametrize("kwargs, match", [
    (dict(cu_seqlens=[0, BIG]), r"cu_seqlens\[1\]: 18446744073709551716 does not fit in int64"),
    (dict(cu_seqlens=[0, 2 ** 63]), r"cu_seqlens\[1\]: 9223372036854775808 does not fit"),
    (dict(cu_seqlens=[-(2 ** 63) - 1, 4]), r"cu_seqlens\[0\]: -9223372036854775809 does not"),
    (dict(cu_seqlens=[0, 4], partition=[0, BIG]), r"partition\[1\]: 18446744073709551716 does "
                                                  r"not fit in int64"),
    (dict(cu_seqlens=[0, 4], partition=[[(0, BIG)]]), r"partition\[0\]\[0\]\[1\]: "
                                                      r"18446744073709551716 does not fit"),
    (dict(cu_seqlens=[0, 4], num_threads=2 ** 31), r"num_threads: expected 0 \(the default\) "
                                                   r"\.\. 2147483647 \(a C int\), got 2147483648"),
    (dict(cu_seqlens=[0, 4], num_threads=2 ** 64 + 1), r"num_threads: .* got 18446744073709551617"),
    (dict(cu_seqlens=[0, 4], timeout_seconds=float("nan")), r"timeout_seconds: expected >= 0"),
])
def test_integers_that_ctypes_would_truncate(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cake.ContextDetKcp(**kwargs)


def test_uint64_tensor_past_int64():
    cu = torch.tensor([0, 2 ** 63 + 5], dtype=torch.uint64)
    with pytest.raises(ValueError, match=r"cu_seqlens\[1\]: 9223372036854775813 does not fit"):
        cake.ContextDetKcp(cu)


def test_timeout_inf_is_no_limit():
    """inf is accepted (no limit); the exchange with it is tested over gloo in
    test_distributed.py."""
    import math
    from cake import _transport
    ctx = cake.ContextDetKcp([0, S], timeout_seconds=math.inf)
    assert ctx.local_rows == S
    assert not _transport._limited(math.inf) and not _transport._limited(0.0)
    assert _transport._limited(2.5)


def test_group_none_without_torch_distributed(monkeypatch):
    """None is one process when torch.distributed is not initialised (dist.group.WORLD is then
    None too); but not in a process a launcher started as one of several."""
    import torch.distributed as dist
    assert not dist.is_initialized() and dist.group.WORLD is None
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert cake.ContextDetKcp([0, S], dist.group.WORLD).world_size == 1
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="group: None means torch.distributed's default group, "
                                         "but torch.distributed is not initialised in this "
                                         "process, which its launcher started as one of "
                                         "WORLD_SIZE=2 processes"):
        cake.ContextDetKcp([0, S])
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert cake.ContextDetKcp([0, S]).world_size == 1


def test_explicit_group_needs_torch_distributed():
    with pytest.raises(ValueError, match="group: torch.distributed is not initialised"):
        cake.ContextDetKcp([0, S], object())


def test_ops_refuse_closed_objects_by_token(ctx):
    """The compiled path finds contexts and handles by token: a closed one is named."""
    x, w = good()
    y, pool = torch.empty_like(x), torch.empty(ctx.pool_rows * C, dtype=torch.bfloat16)
    closed = cake.ContextDetKcp([0, 5, S])
    token = closed._token
    closed.close()
    with pytest.raises(ValueError, match="ctx: this ContextDetKcp was closed"):
        torch.ops.cake.conv_forward([x], [w], [], "none", [y], pool, token, None, -1, False)
    handle = cake.RecomputeHandleDetKcp()
    htoken = handle._token
    handle.close()
    with pytest.raises(ValueError, match="recompute_handle: this RecomputeHandleDetKcp was "
                                         "closed"):
        torch.ops.cake.conv_forward([x], [w], [], "none", [y], pool, ctx._token, htoken, -1,
                                    False)
    with pytest.raises(ValueError, match="activation: expected 'none' or 'silu', got 'gelu'"):
        torch.ops.cake.conv_forward([x], [w], [], "gelu", [y], pool, ctx._token, None, -1,
                                    False)
    with pytest.raises(ValueError, match=r"bias: expected no tensors or 1 \(one per tensor of "
                                         r"xs\), got 2"):
        torch.ops.cake.conv_forward([x], [w], [torch.zeros(C), torch.zeros(C)], "none", [y],
                                    pool, ctx._token, None, -1, False)


def test_closed_objects_under_compile():
    """A compiled graph outlives the objects it was traced with: a closed context or handle
    raises the eager message (ValueError) when the graph runs."""
    torch._dynamo.reset()
    ctx = cake.ContextDetKcp([0, 5, S])
    fn = torch.compile(lambda x, w, h: cake.cake_causal_conv1d_det_kcp(x, w, ctx,
                                                                      recompute_handle=h),
                       fullgraph=True)
    x, w = good()
    fn(x, w, cake.RecomputeHandleDetKcp())
    handle = cake.RecomputeHandleDetKcp()
    handle.close()
    with pytest.raises(ValueError, match="recompute_handle: this RecomputeHandleDetKcp was "
                                         "closed"):
        fn(x, w, handle)
    ctx.close()
    with pytest.raises(ValueError, match="ctx: this ContextDetKcp was closed"):
        fn(x, w, cake.RecomputeHandleDetKcp())


def test_bad_input_under_compile_names_the_argument():
    """Checks of shapes and dtypes run while dynamo traces: with fullgraph=True dynamo reports
    the raise as unsupported, with the entry point's message in it (torch 2.15; 2.6's dynamo
    drops the message)."""
    torch._dynamo.reset()
    ctx = cake.ContextDetKcp([0, 5, S])
    fn = torch.compile(lambda x, w: cake.cake_causal_conv1d_det_kcp(x, w, ctx), fullgraph=True)
    x, w = good()
    version = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    message = "x: expected dtype torch.bfloat16, got torch.float32" if version >= (2, 15) \
        else None
    with pytest.raises(Exception, match=message):
        fn(x.float(), w)
