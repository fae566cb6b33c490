"""cake.ShortConvolution against FLA's own fla.modules.ShortConvolution (the fla-core wheel; its
Triton kernels need CUDA): the same state_dict, the same inputs, y, dx, dw and dbias within bf16
rounding of each other and of a float64 reference; the same returned tuple, shapes and dtypes.
Skipped without a GPU, without libcake_cuda, or without fla-core (scripts/install-python-deps.sh
installs it: pip install --no-deps fla-core==0.6.0 einops==0.8.2)."""
import warnings

import pytest
import torch

import cake
from _problems import cuda_ready, reference64_params

pytestmark = pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and libcake_cuda")


@pytest.fixture(scope="module")
def fla():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import fla.modules as modules
    except ImportError:
        pytest.skip("needs fla-core (FLA's modules): pip install --no-deps fla-core==0.6.0 "
                    "einops==0.8.2")
    except Exception as e:  # noqa: BLE001 (its import starts Triton's runtime)
        pytest.skip(f"fla-core does not import here: {type(e).__name__}: {str(e)[:300]}")
    try:  # FLA's kernels compile with Triton on first use: say so if they cannot here
        conv = modules.ShortConvolution(128, 4, bias=True, device="cuda")
        x = torch.randn(1, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        conv(x)[0].float().sum().backward()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"FLA's ShortConvolution does not run on this machine: "
                    f"{type(e).__name__}: {str(e)[:300]}")
    return modules


def lengths_to_cu(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


def batch(seed, T, D, B=1):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(B, T, D, generator=g) * 2).to(torch.bfloat16)
    dy = torch.randn(B, T, D, generator=g).to(torch.bfloat16)
    return x, dy


def run(module, x, dy, **kwargs):
    """Forward and backward of a module on CUDA: (returned tuple, dx, dw, dbias)."""
    module.zero_grad()
    xl = x.cuda().requires_grad_()
    out = module(xl, **kwargs)
    out[0].backward(dy.cuda())
    torch.cuda.synchronize()
    return (out, xl.grad, module.weight.grad.clone(),
            module.bias.grad.clone() if module.bias is not None else None)


def pair(fla, D, bias, activation, dtype, seed):
    torch.manual_seed(seed)
    theirs = fla.ShortConvolution(D, 4, bias=bias, activation=activation, device="cuda",
                                  dtype=dtype)
    with torch.no_grad():
        if bias:
            theirs.bias.uniform_(-0.5, 0.5)
    ours = cake.ShortConvolution(D, 4, bias=bias, activation=activation, device="cuda",
                                 dtype=dtype)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def check(name, got, want, bound):
    err = (got.double().cpu() - want.double().cpu()).abs()
    bad = err > bound
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {err.numel()} elements off; worst "
                           f"excess {float((err - bound).max()):.3g}, max error "
                           f"{float(err.max()):.3g}")


def compare(cu, x, dy, fla_out, cake_out, module, dtype, where):
    (f_ret, f_dx, f_dw, f_db), (c_ret, c_dx, c_dw, c_db) = fla_out, cake_out
    f_y, c_y = f_ret[0], c_ret[0]
    # the same return value, shapes and dtypes as FLA's module
    assert len(f_ret) == len(c_ret) == 2 and f_ret[1] is None and c_ret[1] is None, where
    for a, b in ((f_y, c_y), (f_dx, c_dx), (f_dw, c_dw)) + (((f_db, c_db),) if f_db is not None
                                                            else ()):
        assert a.shape == b.shape and a.dtype == b.dtype and b.is_cuda, (where, a.shape, b.shape,
                                                                         a.dtype, b.dtype)
    D = x.shape[-1]
    w = module.weight.detach().float().view(D, 4).cpu()
    b = module.bias.detach().float().cpu() if module.bias is not None else None
    act = "silu" if module.activation in ("silu", "swish") else "none"
    xr, dyr = x.reshape(-1, D), dy.reshape(-1, D)
    y64, dx64, dw64, db64, ay, adx, adw, adb = reference64_params(cu, xr, w, b, dyr, act)
    y64, dx64 = y64.view(x.shape), dx64.view(x.shape)
    ay, adx = ay.view(x.shape), adx.view(x.shape)
    dw64, adw = dw64.view(D, 1, 4), adw.view(D, 1, 4)
    param_round = 2.0 ** -8 if dtype == torch.bfloat16 else 0.0  # the gradient's own rounding
    # FLA's backward with SiLU reads the pre-activation a rounded to bf16 (its causal_conv1d_bwd
    # recomputes the forward without the activation into x's dtype): silu'(a) then moves by up
    # to max|silu''| * |a| * 2^-8 = 2^-9 |a| <= 2^-8 * (1.1 + 0.5 |a|), so each term of dx, dw and
    # dbias may be off by 2^-8 of its |term| bound. cake recomputes a in fp32 (2^-16 per term
    # covers its fp32 errors). y has no such step in either.
    fla_g = 2.0 ** -8 if act == "silu" else 0.0
    bounds = {  # name: (cake's bound, FLA's bound) against the float64 reference
        "y": (2.0 ** -8 * y64.abs() + 2.0 ** -16 * ay,) * 2,
        "dx": (2.0 ** -8 * dx64.abs() + 2.0 ** -16 * adx,
               2.0 ** -8 * dx64.abs() + (2.0 ** -16 + fla_g) * adx),
        # dw, dbias: fp32 sums over T rows (FLA's order is its own), then the parameter's dtype
        "dw": (param_round * dw64.abs() + 300 * 2.0 ** -24 * adw + 1e-30,
               param_round * dw64.abs() + (2.0 ** -12 + fla_g) * adw + 1e-30),
        "dbias": (param_round * db64.abs() + 300 * 2.0 ** -24 * adb + 1e-30,
                  param_round * db64.abs() + (2.0 ** -12 + fla_g) * adb + 1e-30)}
    pairs = [("y", c_y, f_y, y64), ("dx", c_dx, f_dx, dx64), ("dw", c_dw, f_dw, dw64)]
    if f_db is not None:
        pairs.append(("dbias", c_db, f_db, db64))
    for name, c, f, ref in pairs:
        mine, theirs = bounds[name]
        check(f"{name} cake vs float64 {where}", c, ref, mine)
        check(f"{name} FLA vs float64 {where}", f, ref, theirs)
        # within both libraries' roundings of each other (as bitwise equal is not promised)
        check(f"{name} cake vs FLA {where}", c, f.double().cpu(), mine + theirs)


VARLEN_CASES = [("silu", True, torch.float32), ("silu", False, torch.float32),
                (None, True, torch.float32), (None, False, torch.float32),
                ("silu", True, torch.bfloat16)]  # (FLA autotunes every variant: a few only)


@pytest.mark.parametrize("activation, bias, dtype", VARLEN_CASES,
                         ids=["silu-bias-fp32", "silu-fp32", "bias-fp32", "plain-fp32",
                              "silu-bias-bf16"])
def test_varlen_against_fla(fla, activation, bias, dtype):
    """Packed sequences (short ones, shorter than the kernel, and long ones), cu_seqlens int32
    on the GPU, as FLA's layers pass it; module parameters fp32 or bf16."""
    lengths = [1, 2, 3, 4, 5, 64, 700, 1, 1500, 33, 1789]
    cu = lengths_to_cu(lengths)
    D = 256
    x, dy = batch(11, cu[-1], D)
    theirs, ours = pair(fla, D, bias, activation, dtype, 12)
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    f = run(theirs, x, dy, cu_seqlens=cu_t)
    c = run(ours, x, dy, cu_seqlens=cu_t)
    compare(cu, x, dy, f, c, theirs, dtype, f"varlen {activation} bias={bias} {dtype}")


@pytest.mark.parametrize("activation", ["silu"])
def test_batch_without_cu_seqlens_against_fla(fla, activation):
    """[B, T, D] with B > 1 and no cu_seqlens: B independent sequences in both."""
    B, T, D = 3, 1000, 128
    x, dy = batch(21, T, D, B)
    theirs, ours = pair(fla, D, True, activation, torch.float32, 22)
    f = run(theirs, x, dy)
    c = run(ours, x, dy)
    compare(list(range(0, B * T + 1, T)), x, dy, f, c, theirs, torch.float32,
            f"B={B} {activation}")


def test_large_layer_against_fla(fla):
    """A KDA-sized convolution: 16384 packed tokens of 2048 channels, bias and SiLU."""
    g = torch.Generator().manual_seed(31)
    lengths = []
    while sum(lengths) < 16384:
        lengths.append(min(16384 - sum(lengths), int(torch.randint(1, 3000, (1,), generator=g))))
    cu = lengths_to_cu(lengths)
    D = 2048
    x, dy = batch(32, cu[-1], D)
    theirs, ours = pair(fla, D, True, "silu", torch.bfloat16, 33)
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    f = run(theirs, x, dy, cu_seqlens=cu_t)
    c = run(ours, x, dy, cu_seqlens=cu_t)
    compare(cu, x, dy, f, c, theirs, torch.bfloat16, "large")


def test_multi_helper_against_fla(fla):
    """cake.short_convolution_multi over q, k, v (different widths) against FLA's three
    modules."""
    cu = lengths_to_cu([5, 300, 2, 900])
    dims = (128, 128, 256)
    pairs = [pair(fla, d, True, "silu", torch.float32, 40 + i) for i, d in enumerate(dims)]
    data = [batch(50 + i, cu[-1], d) for i, d in enumerate(dims)]
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    fla_out = [run(t, x, dy, cu_seqlens=cu_t) for (t, _), (x, dy) in zip(pairs, data)]
    convs = [o for _, o in pairs]
    for m in convs:
        m.zero_grad()
    leaves = [x.cuda().requires_grad_() for x, _ in data]
    ys = cake.short_convolution_multi(convs, leaves, cu_seqlens=cu_t)
    torch.autograd.backward(list(ys), [dy.cuda() for _, dy in data])
    for i, ((theirs, ours), (x, dy)) in enumerate(zip(pairs, data)):
        c = ((ys[i], None), leaves[i].grad, ours.weight.grad, ours.bias.grad)
        compare(cu, x, dy, fla_out[i], c, theirs, torch.float32, f"multi [{i}]")


def test_cuda_module_bitwise_cpu_module(fla):
    """The module on CUDA is bitwise the module on the CPU (SPEC 3), so the comparisons above
    hold for the CPU too."""
    cu = lengths_to_cu([3, 400, 1, 77])
    D = 64
    x, dy = batch(60, cu[-1], D)
    _, ours = pair(fla, D, True, "silu", torch.float32, 61)
    gpu = run(ours, x, dy, cu_seqlens=torch.tensor(cu, device="cuda"))
    cpu_mod = cake.ShortConvolution(D, 4, bias=True, activation="silu")
    cpu_mod.load_state_dict({k: v.cpu() for k, v in ours.state_dict().items()})
    xl = x.clone().requires_grad_()
    y, _ = cpu_mod(xl, cu_seqlens=cu)
    y.backward(dy)
    for name, a, b in (("y", gpu[0][0], y), ("dx", gpu[1], xl.grad),
                       ("dw", gpu[2], cpu_mod.weight.grad), ("dbias", gpu[3], cpu_mod.bias.grad)):
        assert torch.equal(a.cpu().view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32),
                           b.view(torch.int16 if b.dtype == torch.bfloat16 else torch.int32)), name
