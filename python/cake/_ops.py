"""The convolution's forward and backward: the C calls, the torch.library ops, the autograd
Function.

Three layers, one implementation:

* ``forward_impl`` / ``backward_impl`` make one C call (single or multi, CPU or CUDA) that
  fills output tensors the caller allocated. GPU calls run on the current stream of the
  tensors' device, with their workspace from torch's caching allocator (so no cudaMallocAsync
  per call, and CUDA graph capture takes it from the graph's pool); nothing here synchronises
  the host with the device.
* ``cake::conv_forward`` and ``cake::conv_backward``: torch.library custom ops over those two
  functions, with fake implementations, for torch.compile. They write into output buffers
  (``ys``, ``pool``; ``dxs``, ``dws``, ``dbias``) and declare the context's token (and the
  forward the handle's token) mutated, because a call has effects beyond its outputs: the halo
  exchange, a collective every rank must make in the same order, and the forward filling the
  recompute handle. Declared mutation keeps every call in the compiled graph (no common
  subexpression merging two calls, no dead-code removal of a call whose output is unused) and
  chains the calls on one context in program order, as eager code runs them. The tokens are
  not written; see _registry.py for what they are.
* ``ConvFunction``, the autograd.Function behind the public entry points. Eager, it calls the
  implementation directly (the dispatcher's Python custom-op path costs about 50 us a call);
  under torch.compile (dynamo traces the Function), it calls the ops. Both run the same C calls
  in the same order, so compiled results are bitwise the eager ones. Under
  ``torch.utils.checkpoint`` (use_reentrant=False) AOTAutograd recomputes ``conv_forward`` in
  the compiled backward, as eager checkpointing recomputes the forward, and the recompute reads
  the recompute handle the first forward filled.

Bias and activation (issue 12) travel as ``Tensor?[] bias`` (empty: no bias; else one fp32
``[C_i]`` per tensor), ``str activation`` (``"none"`` or ``"silu"``) and, in the backward,
``Tensor(c!)[] dbias`` (the bias gradients, written). They become one ``cake_conv_params`` per
C call (``conv_params``); the GPU workspace size depends on them, so the context's cache of
per-call sizes is keyed by them too (``_context._Spec``).
"""
import ctypes
from typing import List, Optional

import torch

from . import _lib, _pages, _registry

_P = ctypes.c_void_p
_PSIZE = ctypes.sizeof(_P)
_BF16 = torch.bfloat16
_compiling = torch.compiler.is_compiling
_ALIGN = _lib.CUDA_ALIGNMENT
_ALIGN_MASK = _ALIGN - 1


def _entry_name(multi):
    return "cake_causal_conv1d_det_multi_kcp" if multi else "cake_causal_conv1d_det_kcp"


_ACTIVATIONS = _lib.ACTIVATIONS  # {"none": 0, "silu": 1}


def activation_code(activation):
    """The C enum of an op's activation string; ValueError for anything else."""
    code = _ACTIVATIONS.get(activation) if isinstance(activation, str) else None
    if code is None:
        raise ValueError(f"activation: expected 'none' or 'silu', got {activation!r}")
    return code


def conv_params(activation, bias, dbias=None):
    """The cake_conv_params of one call: None for the plain op (no bias, no activation), else a
    ConvParams whose pointer arrays it keeps alive (`bias`, `dbias`: the tensors, or empty)."""
    code = activation if isinstance(activation, int) else activation_code(activation)
    if not bias:
        if dbias:
            raise ValueError(f"dbias: expected no tensors without a bias, got {len(dbias)}")
        return None if code == 0 else _lib.ConvParams(code, None, None)
    bias_array = (_P * len(bias))(*[b.data_ptr() for b in bias])
    params = _lib.ConvParams(code, ctypes.addressof(bias_array), None)
    params.keep = [bias_array]
    if dbias:
        dbias_array = (_P * len(dbias))(*[d.data_ptr() for d in dbias])
        params.dbias = ctypes.addressof(dbias_array)
        params.keep.append(dbias_array)
    return params


def _ref(params):
    return None if params is None else ctypes.byref(params)


class _Cuda:
    """The current device made the tensors' for one call, cheaply when it already is."""

    __slots__ = ("guard",)

    def __init__(self, index):
        self.guard = None if torch._C._cuda_getDevice() == index else torch.cuda.device(index)

    def __enter__(self):
        if self.guard is not None:
            self.guard.__enter__()

    def __exit__(self, *exc):
        if self.guard is not None:
            self.guard.__exit__(*exc)


def _workspace(ctx, spec, backward, device, params):
    nbytes = ctx._cuda_workspace_bytes(spec, backward, params)
    if not nbytes:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=device), nbytes


def new_pool(spec, x):
    """The history pools of one call in one bf16 buffer (see _Spec)."""
    return torch.empty(spec.pool_elems, dtype=_BF16, device=x.device)


def _pool_pointers(spec, pool):
    base = pool.data_ptr()
    return [base + offset for offset in spec.pool_offsets]


def forward_impl(ctx, handle, xs, ws, ys, pool, cooperative, multi, params=None, spec=None,
                 bs=()):
    """One C forward: fills ys (x's shape, bf16) and `pool` (new_pool: the history pools,
    [ctx.pool_rows, C_i] bf16 each), exchanging the history rows unless `handle` holds them.
    `params`: conv_params (None: the plain op); `bs`: its bias tensors (alignment check)."""
    if _lib._deferred:  # objects collected during a CUDA graph capture (_lib.Owned)
        _lib.close_deferred()
    if spec is None:
        spec = ctx._spec(xs)
    pp = _ref(params)
    handle_ptr = handle._ptr if handle is not None else None
    x0 = xs[0]
    c = ctx._lib.c
    if multi:
        n = len(xs)
        inputs = [t.data_ptr() for t in xs] + [t.data_ptr() for t in ws]
        arr = (_P * (4 * n))(*inputs, *[t.data_ptr() for t in ys], *_pool_pointers(spec, pool))
        base = ctypes.addressof(arr)
        step = n * _PSIZE
    else:
        inputs = [x0.data_ptr(), ws[0].data_ptr()]
    if x0.is_cuda and (any(p & _ALIGN_MASK for p in inputs) or
                       any(b.data_ptr() & _ALIGN_MASK for b in bs)):
        from ._checks import check_alignment
        check_alignment(xs, ws, multi, bs)  # raises, naming the tensor
    if not x0.is_cuda:
        _pages.advise_huge_pages(ys)  # y's first touch: a fault per 2 MiB, not per 4 KiB
        if multi:
            status = c.cake_forward_multi(ctx._ptr, n, spec.channels, base, base + step, pp,
                                          base + 2 * step, base + 3 * step, handle_ptr)
        else:
            status = c.cake_forward(ctx._ptr, spec.channel_list[0], inputs[0], inputs[1],
                                    pp, ys[0].data_ptr(), pool.data_ptr(), handle_ptr)
    else:
        index = x0.get_device()
        with _Cuda(index):
            stream = torch._C._cuda_getCurrentRawStream(index)
            workspace, nbytes = _workspace(ctx, spec, 0, x0.device, params)
            wptr = workspace.data_ptr() if workspace is not None else None
            if multi:
                status = c.cake_forward_multi_cuda(
                    ctx._ptr, n, spec.channels, base, base + step, pp, base + 2 * step,
                    base + 3 * step, handle_ptr, cooperative, wptr, nbytes, stream)
            else:
                status = c.cake_forward_cuda(
                    ctx._ptr, spec.channel_list[0], inputs[0], inputs[1], pp,
                    ys[0].data_ptr(), pool.data_ptr(), handle_ptr, cooperative, wptr, nbytes,
                    stream)
    if status:
        ctx._raise(status)


def aligned(t):
    """t, or a fresh (so aligned) copy of a GPU tensor the kernels cannot read where it is (a
    contiguous view at an odd offset: a slice of a bigger tensor)."""
    if t.is_cuda and t.data_ptr() & _ALIGN_MASK:
        return t.clone()
    return t


def backward_impl(ctx, xs, ws, pool, dys, dxs, dws, cooperative, multi, params=None):
    """One C backward: fills dxs (bf16, x's shape) and dws (this rank's fp32 [C_i, 4]), and with
    a bias the dbias tensors of `params`, from the contiguous bf16 dys (16-byte aligned on the
    GPU: aligned) and the forward's pool, exchanging the future rows of dy once (with
    SiLU, x rows beside them, inside the C call)."""
    spec = ctx._spec(xs)
    pp = _ref(params)
    x0 = xs[0]
    c = ctx._lib.c
    if multi:
        n = len(xs)
        arr = (_P * (6 * n))(*[t.data_ptr() for t in xs], *[t.data_ptr() for t in ws],
                             *_pool_pointers(spec, pool), *[t.data_ptr() for t in dys],
                             *[t.data_ptr() for t in dxs], *[t.data_ptr() for t in dws])
        base = ctypes.addressof(arr)
        step = n * _PSIZE
    if not x0.is_cuda:
        _pages.advise_huge_pages(dxs)
        if multi:
            status = c.cake_backward_multi(ctx._ptr, n, spec.channels, base, base + step,
                                           pp, base + 2 * step, base + 3 * step,
                                           base + 4 * step, base + 5 * step)
        else:
            status = c.cake_backward(ctx._ptr, spec.channel_list[0], x0.data_ptr(),
                                     ws[0].data_ptr(), pp, pool.data_ptr(),
                                     dys[0].data_ptr(), dxs[0].data_ptr(), dws[0].data_ptr())
    else:
        index = x0.get_device()
        with _Cuda(index):
            stream = torch._C._cuda_getCurrentRawStream(index)
            workspace, nbytes = _workspace(ctx, spec, 1, x0.device, params)
            wptr = workspace.data_ptr() if workspace is not None else None
            if multi:
                status = c.cake_backward_multi_cuda(
                    ctx._ptr, n, spec.channels, base, base + step, pp, base + 2 * step,
                    base + 3 * step, base + 4 * step, base + 5 * step, cooperative, wptr,
                    nbytes, stream)
            else:
                status = c.cake_backward_cuda(
                    ctx._ptr, spec.channel_list[0], x0.data_ptr(), ws[0].data_ptr(), pp,
                    pool.data_ptr(), dys[0].data_ptr(), dxs[0].data_ptr(),
                    dws[0].data_ptr(), cooperative, wptr, nbytes, stream)
    if status:
        ctx._raise(status)


# ---- torch.library ops (what torch.compile sees) ------------------------------------------------

def _objects(ctx_token, handle_token, xs, ws, multi):
    """The live context and handle of the tokens, and the library check the eager entry points
    make (dynamo traces no data pointers)."""
    from ._context import ContextDetKcp
    from ._handle import RecomputeHandleDetKcp
    ctx = _registry.lookup(ctx_token, ContextDetKcp, "ctx")
    handle = None if handle_token is None else \
        _registry.lookup(handle_token, RecomputeHandleDetKcp, "recompute_handle")
    if xs and xs[0].is_cuda:
        from ._checks import check_library_for
        check_library_for(xs[0].device)  # (alignment: forward_impl checks it)
    return ctx, handle


# Defined with torch.library.Library (not the custom_op decorator), with one kernel for every
# backend (CompositeExplicitAutograd): the compiled graph then reaches the implementation through
# one Python call of the dispatcher instead of three (ADInplaceOrView, Autograd and backend
# wrappers), which is most of an op's host cost under torch.compile. Autograd never reaches these
# ops (ConvFunction is their autograd), and fake tensors go to the register_fake functions.
_LIB = torch.library.Library("cake", "DEF")
_LIB.define("conv_forward(Tensor[] xs, Tensor[] weights, Tensor?[] bias, str activation, "
            "Tensor(a!)[] ys, Tensor(b!) pool, Tensor(c!) ctx_token, Tensor(d!)? handle_token, "
            "int cooperative, bool multi) -> ()")
_LIB.define("conv_backward(Tensor[] xs, Tensor[] weights, Tensor?[] bias, str activation, "
            "Tensor pool, Tensor[] dys, Tensor(a!)[] dxs, Tensor(b!)[] dws, Tensor(c!)[] dbias, "
            "Tensor(d!) ctx_token, int cooperative, bool multi) -> ()")


def _op_bias(bias, xs, name):
    """The bias list of an op call: [] or one tensor per tensor of xs."""
    if bias and (len(bias) != len(xs) or any(b is None for b in bias)):
        raise ValueError(f"{name}: expected no tensors or {len(xs)} (one per tensor of xs), got "
                         f"{len(bias)} with {sum(b is None for b in bias)} None")
    return list(bias)


def conv_forward(xs: List[torch.Tensor], weights: List[torch.Tensor],
                 bias: List[Optional[torch.Tensor]], activation: str, ys: List[torch.Tensor],
                 pool: torch.Tensor, ctx_token: torch.Tensor,
                 handle_token: Optional[torch.Tensor], cooperative: int, multi: bool) -> None:
    """cake::conv_forward: writes ys and the history pools of xs into `pool` (forward_impl).
    A GPU input at an address the kernels cannot read (a view at an odd offset) is copied
    first: a traced tensor's address is known only here, at run time."""
    bs = [aligned(b) for b in _op_bias(bias, xs, "bias")]
    params = conv_params(activation, bs)
    ctx, handle = _objects(ctx_token, handle_token, xs, weights, multi)
    xs, weights = [aligned(x) for x in xs], [aligned(w) for w in weights]
    forward_impl(ctx, handle, xs, weights, ys, pool, cooperative, multi, params, None, bs)


def conv_backward(xs: List[torch.Tensor], weights: List[torch.Tensor],
                  bias: List[Optional[torch.Tensor]], activation: str, pool: torch.Tensor,
                  dys: List[torch.Tensor], dxs: List[torch.Tensor], dws: List[torch.Tensor],
                  dbias: List[torch.Tensor], ctx_token: torch.Tensor, cooperative: int,
                  multi: bool) -> None:
    """cake::conv_backward: writes dxs, dws (and with a bias dbias) from the contiguous dys
    (backward_impl)."""
    bs = [aligned(b) for b in _op_bias(bias, xs, "bias")]
    if len(dbias) != len(bs):
        raise ValueError(f"dbias: expected {len(bs)} tensors (one per bias), got {len(dbias)}")
    params = conv_params(activation, bs, list(dbias))
    ctx, _ = _objects(ctx_token, None, xs, weights, multi)
    xs, weights = [aligned(x) for x in xs], [aligned(w) for w in weights]
    dys = [aligned(dy) for dy in dys]
    backward_impl(ctx, xs, weights, pool, dys, dxs, dws, cooperative, multi, params)


_LIB.impl("conv_forward", conv_forward, "CompositeExplicitAutograd")
_LIB.impl("conv_backward", conv_backward, "CompositeExplicitAutograd")


@torch.library.register_fake("cake::conv_forward", lib=_LIB)
def _conv_forward_fake(xs, weights, bias, activation, ys, pool, ctx_token, handle_token,
                       cooperative, multi):
    return None


@torch.library.register_fake("cake::conv_backward", lib=_LIB)
def _conv_backward_fake(xs, weights, bias, activation, pool, dys, dxs, dws, dbias, ctx_token,
                        cooperative, multi):
    return None


# ---- autograd ---------------------------------------------------------------------------------

def _prepare_dy(dy, x, index, multi):
    if dy.dtype is not _BF16 or dy.get_device() != x.get_device():
        name = f"grad of output {index}" if multi else "grad of the output"
        if dy.dtype != _BF16:
            raise TypeError(f"{name}: expected dtype torch.bfloat16, got {dy.dtype}")
        raise ValueError(f"{name}: expected device {x.device}, got {dy.device}")
    # Any strides (expanded, transposed, sliced): the C library reads contiguous rows.
    if dy.shape != x.shape:
        dy = dy.reshape(x.shape)
    dy = dy.contiguous()
    return dy if _compiling() else aligned(dy)  # (compiled: the op aligns, at run time)


class ConvFunction(torch.autograd.Function):
    """apply(ctx, handle, cooperative, multi, activation, has_bias, *xs, *ws[, *bs]) -> tuple
    of len(xs) ys.

    `cooperative` is the C enum (-1, 0, 1); `activation` "none" or "silu"; with `has_bias` the
    fp32 [C_i] biases follow the weights. Everything was checked by the entry point."""

    @staticmethod
    def forward(fctx, *args):
        # One *args parameter, unpacked here: torch 2.6's dynamo binds named parameters that
        # precede a *tensors parameter wrongly (shifted by one). The tensor count comes from
        # len(), never from an int argument (which a traced forward may see as symbolic).
        ctx, handle, cooperative, multi, activation, has_bias = args[:6]
        tensors = args[6:]
        n = len(tensors) // (3 if has_bias else 2)
        xs, ws, bs = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
        ys = [torch.empty_like(x) for x in xs]
        if _compiling():
            rows = ctx.pool_rows
            pool = xs[0].new_empty(sum(rows * x.shape[-1] for x in xs))
            torch.ops.cake.conv_forward(
                list(xs), list(ws), list(bs), activation, ys, pool, ctx._token,
                handle._token if handle is not None else None, cooperative, multi)
        else:
            spec = ctx._spec(xs)
            pool = new_pool(spec, xs[0])
            params = conv_params(activation, bs) if (bs or activation != "none") else None
            forward_impl(ctx, handle, xs, ws, ys, pool, cooperative, multi, params, spec, bs)
        fctx.cake = (ctx, cooperative, multi, n, activation)
        fctx.save_for_backward(*xs, *ws, *bs, pool)
        return tuple(ys)

    @staticmethod
    def backward(fctx, *dys):
        ctx, cooperative, multi, n, activation = fctx.cake
        if torch.is_grad_enabled():
            raise RuntimeError(
                f"{_entry_name(multi)}: double backward is not supported (a backward with "
                f"create_graph=True reached it, e.g. a gradient penalty): its backward is not "
                f"differentiable, and a second-order gradient through it would be wrong")
        saved = fctx.saved_tensors
        xs, ws, bs, pool = saved[:n], saved[n:2 * n], saved[2 * n:-1], saved[-1]
        dys = [_prepare_dy(dy, x, i, multi) for i, (dy, x) in enumerate(zip(dys, xs))]
        dxs = [torch.empty_like(x) for x in xs]
        dws = [torch.empty_like(w) for w in ws]
        dbs = [torch.empty_like(b) for b in bs]
        if _compiling():
            torch.ops.cake.conv_backward(list(xs), list(ws), list(bs), activation, pool, dys,
                                         dxs, dws, dbs, ctx._token, cooperative, multi)
        else:
            params = conv_params(activation, bs, dbs) if (bs or activation != "none") else None
            backward_impl(ctx, xs, ws, pool, dys, dxs, dws, cooperative, multi, params)
        need = fctx.needs_input_grad
        grads = dxs + dws + dbs
        return (None,) * 6 + tuple(g if need[6 + i] else None for i, g in enumerate(grads))
