"""cake.ShortConvolution, the drop-in for FLA's fla.modules.ShortConvolution, and
cake.short_convolution_multi, on the CPU (one process): constructor, parameters and state_dict,
forward signature and return value, errors, numerics against float64 (nn.Conv1d's formula, the
one FLA's module computes) and bitwise against the internal op, contexts (argument, attribute,
cached single-process ones), recompute handles, the multi helper, torch.compile.

The tests against FLA's own module (signatures, state_dict both ways, same initialisation,
errors) need the fla-core wheel (scripts/install-python-deps.sh installs it) and skip without
it; FLA's kernels need CUDA, so the numerical comparison with them is test_fla_cuda.py."""
import copy
import inspect
import pickle
import warnings

import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import cake
from cake.causal_conv1d_det_train_kcp import conv_det_kcp
from cake import short_convolution as sc
from _problems import assert_bitwise


def fla_modules():
    """FLA's modules, or a skip: fla-core absent, or not importable here (it imports Triton's
    runtime at import; with torch 2.6's Triton 3.2, below its 3.3, that raises RuntimeError on
    a machine without a GPU)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Triton is not supported on current platform"
            import fla.modules
    except ImportError:
        pytest.skip("needs fla-core (FLA's modules)")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"fla-core does not import here: {type(e).__name__}: {str(e)[:200]}")
    return fla.modules


def packed(seed, cu, D, B=1):
    g = torch.Generator().manual_seed(seed)
    T = cu[-1] if B == 1 else cu
    x = (torch.randn(B, T, D, generator=g) * 2).to(torch.bfloat16)
    dy = torch.randn(B, T, D, generator=g).to(torch.bfloat16)
    return x, dy


def make_conv(D, bias=True, activation="silu", dtype=None, seed=0):
    torch.manual_seed(seed)
    conv = cake.ShortConvolution(D, 4, bias=bias, activation=activation, dtype=dtype)
    with torch.no_grad():  # the default init's bias is tiny: make it matter
        if conv.bias is not None:
            conv.bias.normal_(0, 0.5)
    return conv


def conv1d_reference(module, x, cu, dy):
    """float64 through nn.Conv1d's own forward on each sequence, as FLA documents its module
    (F.conv1d(x, weight, bias, padding=W-1, groups=D)[..., :T], then SiLU): y, dx, dw, db."""
    m64 = copy.deepcopy(module).double()
    x64 = x.detach().double().requires_grad_()
    pieces = []
    for a, e in zip(cu[:-1], cu[1:]):
        if e == a:
            continue
        seg = x64[:, a:e].transpose(1, 2)
        out = torch.nn.Conv1d.forward(m64, seg)[..., :e - a]
        if module.activation in ("silu", "swish"):
            out = F.silu(out)
        pieces.append(out.transpose(1, 2))
    y = torch.cat(pieces, 1)
    y.backward(dy.double())
    return (y.detach(), x64.grad, m64.weight.grad,
            m64.bias.grad if m64.bias is not None else None)


def assert_close_scaled(name, got, ref, tol):
    """max |got - ref| <= tol * max |ref| (+ a tiny floor)."""
    err = (got.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
    scale = ref.double().abs().max().item() if ref.numel() else 0.0
    assert err <= tol * scale + 1e-30, f"{name}: max error {err} > {tol} * {scale}"


# ---- constructor, parameters, state_dict -----------------------------------------------------

def test_parameters_and_state_dict_keys():
    conv = cake.ShortConvolution(64, 4, bias=True)
    assert isinstance(conv, torch.nn.Conv1d)
    assert conv.weight.shape == (64, 1, 4) and conv.bias.shape == (64,)
    assert list(conv.state_dict()) == ["weight", "bias"]
    assert (conv.in_channels, conv.out_channels, conv.groups, conv.padding, conv.kernel_size) \
        == (64, 64, 64, (3,), (4,))
    assert conv.hidden_size == 64 and conv.activation == "silu" and conv.state_size == 256
    assert conv.backend == "cake" and conv.context is None and conv.recompute_handle is None
    assert "activation=silu" in repr(conv) and "backend=cake" in repr(conv)
    plain = cake.ShortConvolution(16, kernel_size=4, activation=None)
    assert plain.bias is None and list(plain.state_dict()) == ["weight"]
    assert plain.activation is None and "bias=False" in repr(plain)
    typed = cake.ShortConvolution(16, 4, bias=True, device="cpu", dtype=torch.bfloat16)
    assert typed.weight.dtype == torch.bfloat16 and typed.bias.dtype == torch.bfloat16


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(hidden_size=16, kernel_size=3), ValueError,
     "kernel_size: cake.ShortConvolution supports only kernel_size=4 .*got 3"),
    (dict(hidden_size=16, kernel_size=2), ValueError, "kernel_size.*4"),
    (dict(hidden_size=16, kernel_size=4.0), ValueError, "kernel_size.*got 4.0"),
    (dict(hidden_size=12, kernel_size=4), ValueError,
     "hidden_size: cake.ShortConvolution needs a positive multiple of 8.*got 12"),
    (dict(hidden_size=16, kernel_size=4, activation="gelu"), ValueError,
     "activation: expected 'silu' \\(or 'swish'\\) or None, got 'gelu'"),
    (dict(hidden_size=16, kernel_size=4, backend="tilelang"), ValueError,
     "Invalid backend: tilelang"),
])
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        cake.ShortConvolution(**kwargs)


def test_constructor_accepts_fla_options():
    for backend in ("triton", "cuda", None, "cake"):
        assert cake.ShortConvolution(16, 4, backend=backend).backend == "cake"
    assert cake.ShortConvolution(16, 4, activation="swish").activation == "swish"
    with pytest.warns(UserWarning, match="use_fast_conv1d"):
        cake.ShortConvolution(16, 4, use_fast_conv1d=True)
    cake.ShortConvolution(16, 4, some_future_option=1)  # FLA ignores other keywords too


def test_pickle_and_deepcopy_drop_the_c_objects():
    conv = make_conv(16)
    conv.context = cake.ContextDetKcp([0, 8])
    conv.recompute_handle = cake.RecomputeHandleDetKcp()
    for other in (copy.deepcopy(conv), pickle.loads(pickle.dumps(conv))):
        assert other.context is None and other.recompute_handle is None
        assert torch.equal(other.weight, conv.weight) and torch.equal(other.bias, conv.bias)
    assert conv.context is not None  # the original keeps them


# ---- forward: numerics -------------------------------------------------------------------

@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_forward_backward_against_float64_conv1d(activation, bias, dtype):
    cu = [0, 1, 40, 40, 41, 300, 333]
    conv = make_conv(48, bias=bias, activation=activation, dtype=dtype, seed=1)
    x, dy = packed(2, cu, 48)
    xl = x.clone().requires_grad_()
    out = conv(xl, cu_seqlens=torch.tensor(cu))
    assert isinstance(out, tuple) and len(out) == 2 and out[1] is None
    y = out[0]
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    y.backward(dy)
    y64, dx64, dw64, db64 = conv1d_reference(conv, x, cu, dy)
    assert conv.weight.grad.dtype == dtype and conv.weight.grad.shape == (48, 1, 4)
    assert_close_scaled("y", y, y64, 2.0 ** -7)
    assert_close_scaled("dx", xl.grad, dx64, 2.0 ** -7)
    wtol = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}.get(dtype, 2.0 ** -16)
    assert_close_scaled("dw", conv.weight.grad, dw64, wtol)
    if bias:
        assert conv.bias.grad.dtype == dtype
        assert_close_scaled("dbias", conv.bias.grad, db64, wtol)


def test_forward_is_bitwise_the_internal_op():
    """The module computes cake's op on w = weight.view(D, 4) (w[c][3] the current row)."""
    cu = [0, 7, 100, 129]
    conv = make_conv(24, seed=3)
    x, dy = packed(4, cu, 24)
    xl = x.clone().requires_grad_()
    y, _ = conv(xl, cu_seqlens=cu)
    y.backward(dy)
    x2 = x[0].clone().requires_grad_()
    w2 = conv.weight.detach().view(24, 4).clone().requires_grad_()
    b2 = conv.bias.detach().clone().requires_grad_()
    y2 = conv_det_kcp(x2, w2, cake.ContextDetKcp(cu), biases=b2, activation="silu", multi=False)
    y2.backward(dy[0])
    assert_bitwise("y", y[0], y2)
    assert_bitwise("dx", xl.grad[0], x2.grad)
    assert_bitwise("dw", conv.weight.grad.view(24, 4), w2.grad)
    assert_bitwise("dbias", conv.bias.grad, b2.grad)


def test_batch_of_equal_sequences_without_cu_seqlens():
    """[B, T, D] without cu_seqlens: B independent sequences, as FLA computes them."""
    conv = make_conv(16, seed=5)
    x, dy = packed(6, 50, 16, B=3)
    xl = x.clone().requires_grad_()
    y, state = conv(xl)
    assert y.shape == (3, 50, 16) and state is None
    y.backward(dy)
    packed_x = x.reshape(1, 150, 16).clone().requires_grad_()
    conv2 = copy.deepcopy(conv)
    conv2.zero_grad()
    y2, _ = conv2(packed_x, cu_seqlens=[0, 50, 100, 150])
    y2.backward(dy.reshape(1, 150, 16))
    assert_bitwise("y", y.reshape(1, 150, 16), y2)
    assert_bitwise("dx", xl.grad.reshape(1, 150, 16), packed_x.grad)
    assert_bitwise("dw", conv.weight.grad, conv2.weight.grad)


def test_noncontiguous_input_and_no_grad():
    conv = make_conv(16, seed=7)
    x, _ = packed(8, [0, 30], 16)
    wide = torch.cat([x, x], dim=-1)[..., :16]  # a strided view, as after a split
    assert not wide.is_contiguous()
    with torch.no_grad():
        y, _ = conv(wide)
        y_ref, _ = conv(x.contiguous())
    assert_bitwise("y", y, y_ref)
    with torch.no_grad():  # one token per sequence without grad (FLA's decoding branch)
        y1, s1 = conv(x[:, :3], cu_seqlens=[0, 1, 2, 3])
    assert s1 is None and y1.shape == (1, 3, 16)


# ---- forward: errors ---------------------------------------------------------------------

X16 = torch.zeros(1, 12, 16, dtype=torch.bfloat16)
FORWARD_ERRORS = [
    (dict(residual=X16), ValueError, "residual: not supported"),
    (dict(mask=torch.ones(1, 12)), ValueError, "mask: not supported"),
    (dict(cache=torch.zeros(1, 16, 4)), ValueError, "cache: decoding caches are not supported"),
    (dict(output_final_state=True), ValueError, "output_final_state=True: .*not supported"),
    (dict(cp_context=object()), ValueError, "cp_context: FLA's context parallelism is not"),
    (dict(recompute_handel=None), TypeError, "unexpected keyword argument 'recompute_handel'"),
    (dict(cu_seqlens=[0, 5, 11]), ValueError,
     r"cu_seqlens: expected offsets ending at T = 12"),
    (dict(ctx="ctx"), TypeError, "ctx: expected a cake.ContextDetKcp or None, got str"),
    (dict(recompute_handle=3), TypeError, "recompute_handle: expected a RecomputeHandleDetKcp"),
]


@pytest.mark.parametrize("index", range(len(FORWARD_ERRORS)))
def test_forward_errors_name_the_feature(index):
    kwargs, error, match = FORWARD_ERRORS[index]
    with pytest.raises(error, match=match):
        make_conv(16)(X16, **kwargs)


def test_forward_input_errors():
    conv = make_conv(16)
    with pytest.raises(TypeError, match="x: expected dtype torch.bfloat16 .*got torch.float32"):
        conv(X16.float())
    with pytest.raises(ValueError, match=r"x: expected D = hidden_size = 16 channels, got shape "
                                         r"\[1, 12, 8\]"):
        conv(torch.zeros(1, 12, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"x: expected shape \[B, T, D\], got \[12, 16\]"):
        conv(X16[0])
    with pytest.raises(ValueError, match="with cu_seqlens .*expected B = 1, got B = 2"):
        conv(torch.zeros(2, 6, 16, dtype=torch.bfloat16), cu_seqlens=[0, 6])
    ctx = cake.ContextDetKcp([0, 6, 12])
    with pytest.raises(ValueError, match="with a context expected B = 1"):
        conv(torch.zeros(2, 6, 16, dtype=torch.bfloat16), ctx=ctx)
    with pytest.raises(ValueError, match="x: expected 12 rows"):
        conv(torch.zeros(1, 11, 16, dtype=torch.bfloat16), ctx=ctx)
    with pytest.raises(NotImplementedError, match="decoding"):
        conv.step(X16, None, None)


# ---- contexts ----------------------------------------------------------------------------

def test_single_process_contexts_are_cached():
    conv = make_conv(16)
    x = torch.zeros(1, 12, 16, dtype=torch.bfloat16)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    a = sc._local_context(cu, None, 1, 12)
    assert a is sc._local_context(cu, None, 1, 12)              # the same tensor
    assert a is sc._local_context([0, 5, 12], None, 1, 12)      # the same offsets
    assert a is sc._local_context(cu.clone(), None, 1, 12)
    assert a.world_size == 1 and a.num_seqs == 2 and a.total_rows == 12
    assert sc._local_context(None, None, 2, 6).num_seqs == 2    # [B, T]: B sequences
    before = a.stats()["forward_calls"]
    conv(x, cu_seqlens=cu)
    conv(x, cu_seqlens=torch.tensor([0, 5, 12]))
    assert a.stats()["forward_calls"] == before + 2
    cu.add_(0)  # an in-place change (version bump): read again, same offsets, same context
    assert sc._local_context(cu, None, 1, 12) is a


def test_cu_seqlens_cpu_is_read_instead(monkeypatch):
    seen = []
    original = sc._offsets_of
    monkeypatch.setattr(sc, "_offsets_of", lambda t: seen.append(t) or original(t))
    cu = torch.tensor([0, 4, 12])
    cpu = torch.tensor([0, 4, 12])
    make_conv(16)(X16, cu_seqlens=cu, cu_seqlens_cpu=cpu, chunk_indices=None, seq_idx=None)
    assert len(seen) == 1 and seen[0] is cpu


def test_explicit_context_ignores_cu_seqlens_and_attribute_context():
    conv = make_conv(16, seed=9)
    x, _ = packed(10, [0, 12], 16)
    whole = cake.ContextDetKcp([0, 12])
    split = cake.ContextDetKcp([0, 3, 12])
    y_whole, _ = conv(x, cu_seqlens=[0, 12])
    y_split, _ = conv(x, cu_seqlens=[0, 3, 12])
    assert_bitwise("ctx=", conv(x, cu_seqlens=[0, 12], ctx=split)[0], y_split)
    conv.context = split
    assert_bitwise("attribute", conv(x)[0], y_split)
    assert_bitwise("argument wins", conv(x, ctx=whole)[0], y_whole)
    assert cake.set_conv_context(conv, None) == [conv] and conv.context is None
    assert_bitwise("no context", conv(x)[0], y_whole)


def test_set_conv_context_on_a_model():
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_conv1d = cake.ShortConvolution(16, 4)
            self.k_conv1d = cake.ShortConvolution(16, 4)
            self.other = torch.nn.Linear(4, 4)

    model = torch.nn.Sequential(Layer(), Layer())
    ctx = cake.ContextDetKcp([0, 12])
    found = cake.set_conv_context(model, ctx, recompute_handles=True)
    assert len(found) == 4 and all(m.context is ctx for m in found)
    handles = [m.recompute_handle for m in found]
    assert len({id(h) for h in handles}) == 4
    assert all(isinstance(h, cake.RecomputeHandleDetKcp) for h in handles)
    cake.set_conv_context(model, ctx, recompute_handles=True)
    assert all(m.recompute_handle is not h for m, h in zip(found, handles))
    cake.set_conv_context(model, ctx)
    assert all(m.recompute_handle is None for m in found)
    assert cake.set_conv_context([found[0], model], ctx) == [found[0]] + found[1:]
    with pytest.raises(TypeError, match="module: expected an nn.Module"):
        cake.set_conv_context("model", ctx)
    with pytest.raises(TypeError, match="ctx: expected a cake.ContextDetKcp or None"):
        cake.set_conv_context(model, [0, 12])


# ---- recompute handles -------------------------------------------------------------------

@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_with_attribute_handles(use_reentrant):
    """FLA-style calls (no ctx, no handle in the call) under checkpoint: handles set per step
    on the modules; the recompute reads them; a stale handle is refused, not reused."""
    cu = [0, 20, 64]
    conv = make_conv(16, seed=11)
    ctx = cake.ContextDetKcp(cu)
    x, dy = packed(12, cu, 16)
    plain = copy.deepcopy(conv)
    xp = x.clone().requires_grad_()
    yp, _ = plain(xp, ctx=ctx)
    yp.backward(dy)
    for step in range(2):
        cake.set_conv_context(conv, ctx, recompute_handles=True)
        conv.zero_grad()
        xl = x.clone().requires_grad_()
        before = ctx.stats()["forwards_from_handle"]
        y = checkpoint(lambda t: conv(t)[0] * 1.0, xl, use_reentrant=use_reentrant)
        y.backward(dy)
        assert ctx.stats()["forwards_from_handle"] == before + 1, step
        assert_bitwise("y", y, yp)
        assert_bitwise("dx", xl.grad, xp.grad)
        assert_bitwise("dw", conv.weight.grad, plain.weight.grad)
        assert_bitwise("dbias", conv.bias.grad, plain.bias.grad)
    with pytest.raises(ValueError, match="already holds the rows of an earlier forward"):
        conv(x)  # the last step's handle, not refreshed
    conv.eval()  # evaluation never uses (or fills) the attribute handle
    with torch.no_grad():
        assert_bitwise("eval", conv(x)[0], yp)


# ---- the multi helper ----------------------------------------------------------------------

def qkv_modules(seed, bias=True, activation="silu", dims=(32, 32, 48)):
    return [make_conv(d, bias=bias, activation=activation, seed=seed + i)
            for i, d in enumerate(dims)]


@pytest.mark.parametrize("bias, activation", [(True, "silu"), (False, "silu"), (True, None),
                                              (False, None)])
def test_multi_helper_bitwise_separate_calls(bias, activation):
    cu = [0, 3, 3, 120, 300]
    convs = qkv_modules(20, bias, activation)
    twins = copy.deepcopy(convs)
    g = torch.Generator().manual_seed(21)
    xs = [(torch.randn(1, 300, m.hidden_size, generator=g) * 2).to(torch.bfloat16)
          for m in convs]
    dys = [torch.randn(1, 300, m.hidden_size, generator=g).to(torch.bfloat16) for m in convs]
    ctx = cake.ContextDetKcp(cu)
    leaves = [x.clone().requires_grad_() for x in xs]
    before = ctx.stats()["exchanges"], ctx.stats()["forward_calls"]
    ys = cake.short_convolution_multi(convs, leaves, ctx=ctx)
    assert ctx.stats()["forward_calls"] == before[1] + 1  # one call for the three
    torch.autograd.backward(list(ys), dys)
    leaves2 = [x.clone().requires_grad_() for x in xs]
    ys2 = [m(x, ctx=ctx)[0] for m, x in zip(twins, leaves2)]
    torch.autograd.backward(ys2, dys)
    for i in range(3):
        assert ys[i].shape == xs[i].shape
        assert_bitwise(f"y[{i}]", ys[i], ys2[i])
        assert_bitwise(f"dx[{i}]", leaves[i].grad, leaves2[i].grad)
        assert_bitwise(f"dw[{i}]", convs[i].weight.grad, twins[i].weight.grad)
        if bias:
            assert_bitwise(f"dbias[{i}]", convs[i].bias.grad, twins[i].bias.grad)
    # and without a context: the single-process context of cu_seqlens, as the modules'
    ys3 = cake.short_convolution_multi(convs, xs, cu_seqlens=torch.tensor(cu))
    for i in range(3):
        assert_bitwise(f"y[{i}] from cu_seqlens", ys3[i], ys2[i])


def test_multi_helper_errors():
    convs = qkv_modules(30)
    xs = [torch.zeros(1, 12, m.hidden_size, dtype=torch.bfloat16) for m in convs]
    mixed = convs[:2] + [make_conv(48, bias=False)]
    with pytest.raises(ValueError, match=r"convs\[2\]: activation 'silu' and bias=False differ "
                                         r"from convs\[0\]'s \('silu', bias=True\)"):
        cake.short_convolution_multi(mixed, xs)
    with pytest.raises(ValueError, match=r"convs\[1\]: activation None"):
        cake.short_convolution_multi([convs[0], make_conv(32, activation=None)], xs[:2])
    with pytest.raises(TypeError, match=r"convs\[1\]: expected a cake.ShortConvolution, got "
                                        r"torch.nn.modules.conv.Conv1d"):
        cake.short_convolution_multi([convs[0], torch.nn.Conv1d(4, 4, 4)], xs[:2])
    with pytest.raises(TypeError, match="convs: expected a non-empty list, tuple or "
                                        "nn.ModuleList"):
        cake.short_convolution_multi(convs[0], xs[:1])
    ys = cake.short_convolution_multi(torch.nn.ModuleList(convs), xs)  # a ModuleList is fine
    assert [y.shape for y in ys] == [x.shape for x in xs]
    with pytest.raises(ValueError, match=r"xs: expected 3 tensors \(one per module of convs\), "
                                         r"got 2"):
        cake.short_convolution_multi(convs, xs[:2])
    with pytest.raises(ValueError, match=r"xs\[1\]: expected B = 1 and T = 12"):
        cake.short_convolution_multi(convs, [xs[0], xs[1][:, :5], xs[2]])
    with pytest.raises(TypeError, match=r"xs\[2\]: expected dtype torch.bfloat16"):
        cake.short_convolution_multi(convs, [xs[0], xs[1], xs[2].float()])
    convs[0].context = cake.ContextDetKcp([0, 12])
    with pytest.raises(ValueError, match="ctx: the modules' context attributes differ"):
        cake.short_convolution_multi(convs, xs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'residual'"):
        cake.short_convolution_multi(convs, xs, residual=xs)


# ---- torch.compile -------------------------------------------------------------------------

@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_layer_with_context(fresh_dynamo):
    """A layer calling its three modules FLA's way and the multi helper, with the context as
    the modules' attribute and a handle per step: fullgraph, no graph break, bitwise eager."""
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_conv1d, self.k_conv1d, self.v_conv1d = qkv_modules(40, dims=(16, 16, 24))

        def forward(self, q, k, v, handle):
            q, _ = self.q_conv1d(x=q, cu_seqlens=None)
            k, _ = self.k_conv1d(k)
            (v,) = cake.short_convolution_multi([self.v_conv1d], [v], recompute_handle=handle)
            return q.float().sum(-1) + k.float().sum(-1) + v.float().mean(-1)

    cu = [0, 10, 80, 128]
    ctx = cake.ContextDetKcp(cu)
    layer = Layer()
    cake.set_conv_context(layer, ctx)
    g = torch.Generator().manual_seed(41)
    inputs = [(torch.randn(1, 128, d, generator=g) * 2).to(torch.bfloat16) for d in (16, 16, 24)]
    dy = torch.randn(1, 128, generator=g)

    def step(fn):
        leaves = [t.clone().requires_grad_() for t in inputs]
        layer.zero_grad()
        with cake.RecomputeHandleDetKcp() as handle:
            out = checkpoint(fn, *leaves, handle, use_reentrant=False)
            out.backward(dy)
        return [out.detach()] + [t.grad for t in leaves] + \
            [p.grad.clone() for p in layer.parameters()]

    explained = torch._dynamo.explain(layer)(*inputs, cake.RecomputeHandleDetKcp())
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    eager = step(layer)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(layer, fullgraph=True, backend=counter)
    for k in range(2):
        got = step(compiled)
        for i, (a, b) in enumerate(zip(got, eager)):
            assert_bitwise(f"[{i}] step {k}", a, b)
    assert counter.frame_count == 1


# ---- against FLA's module (the fla-core wheel; CPU: no FLA kernels) ------------------------

def test_signatures_match_fla():
    fla = fla_modules()
    for name in ("__init__", "forward"):
        theirs = inspect.signature(getattr(fla.ShortConvolution, name)).parameters
        ours = inspect.signature(getattr(cake.ShortConvolution, name)).parameters
        for pname, param in theirs.items():
            assert pname in ours, (name, pname)
            mine = ours[pname]
            assert (mine.kind, mine.default) == (param.kind, param.default), (name, pname)
        assert list(ours)[:len(theirs) - 1] == [p for p in theirs if p != "kwargs"], name
    extra = [p for p, v in inspect.signature(cake.ShortConvolution.forward).parameters.items()
             if v.kind is inspect.Parameter.KEYWORD_ONLY]
    assert extra == ["ctx", "recompute_handle", "cooperative"]
    assert issubclass(fla.ShortConvolution, torch.nn.Conv1d)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_state_dict_both_ways_and_same_init(bias, dtype):
    fla = fla_modules()
    torch.manual_seed(123)
    theirs = fla.ShortConvolution(64, 4, bias=bias, activation="silu", dtype=dtype)
    torch.manual_seed(123)
    ours = cake.ShortConvolution(64, 4, bias=bias, activation="silu", dtype=dtype)
    sd = theirs.state_dict()
    assert list(ours.state_dict()) == list(sd)
    for k, v in ours.state_dict().items():  # the same nn.Conv1d initialisation
        assert v.shape == sd[k].shape and v.dtype == sd[k].dtype and torch.equal(v, sd[k]), k
    # FLA -> cake, from a saved checkpoint, strict
    import io
    buf = io.BytesIO()
    with torch.no_grad():
        for p in theirs.parameters():
            p.uniform_(-1, 1)
    torch.save(theirs.state_dict(), buf)
    buf.seek(0)
    ours.load_state_dict(torch.load(buf))
    for k, v in ours.state_dict().items():
        assert torch.equal(v, theirs.state_dict()[k]), k
    # cake -> FLA
    with torch.no_grad():
        for p in ours.parameters():
            p.uniform_(-2, 2)
    theirs.load_state_dict(ours.state_dict())
    for k, v in theirs.state_dict().items():
        assert torch.equal(v, ours.state_dict()[k]), k
    for attr in ("hidden_size", "activation", "state_size", "kernel_size", "padding", "groups",
                 "in_channels", "out_channels"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr


def test_fla_formula_against_float64_through_the_fla_module():
    """FLA's module's own parameters and formula (nn.Conv1d's forward, padding W-1, cut to T,
    then SiLU: what FLA documents; its kernels need CUDA, see test_fla_cuda.py) against cake
    with the FLA state_dict loaded: within bf16 rounding."""
    fla = fla_modules()
    torch.manual_seed(7)
    theirs = fla.ShortConvolution(32, 4, bias=True, activation="silu")
    with torch.no_grad():
        theirs.bias.normal_(0, 0.5)
    ours = cake.ShortConvolution(32, 4, bias=True, activation="silu")
    ours.load_state_dict(theirs.state_dict())
    cu = [0, 2, 90, 200]
    x, dy = packed(8, cu, 32)
    xl = x.clone().requires_grad_()
    y, _ = ours(xl, cu_seqlens=torch.tensor(cu, dtype=torch.int32))
    y.backward(dy)
    y64, dx64, dw64, db64 = conv1d_reference(theirs, x, cu, dy)
    assert_close_scaled("y", y, y64, 2.0 ** -7)
    assert_close_scaled("dx", xl.grad, dx64, 2.0 ** -7)
    assert_close_scaled("dw", ours.weight.grad, dw64, 2.0 ** -16)
    assert_close_scaled("dbias", ours.bias.grad, db64, 2.0 ** -16)


def test_errors_as_fla_gives_them():
    fla = fla_modules()
    for cls in (fla.ShortConvolution, cake.ShortConvolution):
        with pytest.raises(ValueError, match="Invalid backend"):
            cls(16, 4, backend="tilelang")
        with pytest.raises((AssertionError, ValueError), match="gelu"):
            cls(16, 4, activation="gelu")
        with pytest.raises(TypeError):
            cls(16)  # kernel_size is required by both


def test_exported_names():
    assert cake.ShortConvolution is sc.ShortConvolution
    assert cake.short_convolution_multi is sc.short_convolution_multi
    assert cake.set_conv_context is sc.set_conv_context
    for name in ("ShortConvolution", "short_convolution_multi", "set_conv_context"):
        assert name in cake.__all__ and getattr(cake, name).__doc__


def test_compiled_without_context(fresh_dynamo):
    """Without a context the module finds its single-process context from cu_seqlens' values:
    compiled without fullgraph that is a graph break there (same results, a new layout works);
    fullgraph=True refuses it (pass ctx= or set the module's context)."""
    conv = make_conv(16, seed=50)
    x, _ = packed(51, [0, 40], 16)
    fn = torch.compile(lambda x, cu: conv(x, cu_seqlens=cu)[0] * 2)
    for cu in ([0, 10, 40], [0, 30, 31, 40]):
        cu_t = torch.tensor(cu)
        assert_bitwise(f"y {cu}", fn(x, cu_t), conv(x, cu_seqlens=cu_t)[0] * 2)
    strict = torch.compile(lambda x, cu: conv(x, cu_seqlens=cu)[0], fullgraph=True)
    with pytest.raises(Exception, match="disable"):
        strict(x, torch.tensor([0, 40]))
