"""A drop-in for FLA's ``fla.modules.ShortConvolution`` computing cake's convolution (docs/NUMERICS.md with
bias and SiLU), with context parallelism, and a helper that runs a layer's q, k and v
convolutions as one multi call.

``from cake import ShortConvolution`` in place of ``from fla.modules import ShortConvolution``:
the same constructor arguments, the same parameters (``weight [D, 1, 4]``, ``bias [D]``) and
state_dict keys, the same forward signature and return value ``(y, None)``.
"""
import atexit
import collections
import numbers
import threading
import warnings
import weakref

import torch
from torch import nn

from ._context import SINGLE_PROCESS, ContextDetKcp
from ._handle import RecomputeHandleDetKcp
from ._ops import aligned
from .causal_conv1d_det_train_kcp import conv_det_kcp

__all__ = ["ShortConvolution", "short_convolution_multi", "set_conv_context"]

_BF16, _F32 = torch.bfloat16, torch.float32
_compiling = torch.compiler.is_compiling
_ACTIVATIONS = {None: None, "silu": "silu", "swish": "silu"}  # FLA's names -> cake's
_BACKENDS = (None, "triton", "cuda", "cake")


# ---- single-process contexts built from cu_seqlens (or from T), cached --------------------

_CACHE_SIZE = 32
_lock = threading.Lock()
_by_offsets = collections.OrderedDict()   # tuple(cu_seqlens) -> ContextDetKcp
_by_tensor = {}                           # id(tensor) -> (weakref, version, offsets)


def _offsets_of(cu_seqlens):
    """cu_seqlens (a tensor on any device, or a sequence) as a tuple of ints; a tensor seen
    before, unchanged, is not read again (so a CUDA cu_seqlens costs one copy to the host per
    batch, not one per layer)."""
    if not isinstance(cu_seqlens, torch.Tensor):
        return tuple(int(v) for v in cu_seqlens)
    key = id(cu_seqlens)
    entry = _by_tensor.get(key)
    if entry is not None and entry[0]() is cu_seqlens and entry[1] == cu_seqlens._version:
        return entry[2]
    if cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point or \
            cu_seqlens.dtype == torch.bool:
        raise ValueError(f"cu_seqlens: expected a 1-D integer tensor, got {cu_seqlens.dtype} "
                         f"{list(cu_seqlens.shape)}")
    offsets = tuple(cu_seqlens.tolist())
    if len(_by_tensor) >= 4 * _CACHE_SIZE:
        for k in [k for k, e in _by_tensor.items() if e[0]() is None] or list(_by_tensor):
            del _by_tensor[k]
    _by_tensor[key] = (weakref.ref(cu_seqlens), cu_seqlens._version, offsets)
    return offsets


def _local_context(cu_seqlens, cu_seqlens_cpu, batch, rows):
    """The single-process context of a call without one: over cu_seqlens (cu_seqlens_cpu, the
    host copy FLA's callers may pass, preferred), or B sequences of T rows without them.
    Cached by the offsets; building one plans the batch, which costs more than a call.
    Called through _lookup, its torch.compiler.disable'd form (it reads tensor values and
    calls C: a graph break under torch.compile, never traced)."""
    if cu_seqlens is None:
        offsets = tuple(range(0, batch * rows + 1, rows)) if rows else (0,)
    else:
        offsets = _offsets_of(cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens)
        if not offsets or offsets[-1] != rows:
            raise ValueError(f"cu_seqlens: expected offsets ending at T = {rows} (the rows of x), "
                             f"got {list(offsets[-1:]) or 'none'} as the last")
    with _lock:
        ctx = _by_offsets.get(offsets)
        if ctx is not None and not ctx._closed:
            _by_offsets.move_to_end(offsets)
            return ctx
    ctx = ContextDetKcp(list(offsets), SINGLE_PROCESS)
    with _lock:
        _by_offsets[offsets] = ctx
        while len(_by_offsets) > _CACHE_SIZE:
            _by_offsets.popitem(last=False)  # freed once no autograd graph holds it
    return ctx


# torch.compiler.disable(_local_context), made when the first ShortConvolution is built (never
# inside a traced function): wrapping imports torch._dynamo, about a second that `import cake`
# should not cost a program that uses only the seed's functions.
_lookup = None


def _make_lookup():
    global _lookup
    if _lookup is None:
        _lookup = torch.compiler.disable(_local_context)
    return _lookup


@atexit.register
def _release_cached_contexts():
    """Frees the cached contexts at exit while torch is still whole (freed later, during the
    interpreter's teardown, they sometimes ended the process with std::terminate)."""
    with _lock:
        contexts = list(_by_offsets.values())
        _by_offsets.clear()
        _by_tensor.clear()
    for ctx in contexts:
        ctx.close()


def _in_backward():
    """True while the autograd engine runs a backward on this thread: a forward then is the
    recompute of activation checkpointing (torch.utils.checkpoint runs it there)."""
    return torch._C._current_graph_task_id() != -1


# ---- the module ----------------------------------------------------------------------------

class ShortConvolution(nn.Conv1d):
    """Drop-in for FLA's ``fla.modules.ShortConvolution``: a depthwise causal convolution of
    width 4 with optional bias and SiLU, over packed variable-length sequences, computed by
    cake (bitwise reproducible, docs/NUMERICS.md) with context parallelism.

    Parameters
    ----------
    hidden_size : int
        Channels D (input and output), a positive multiple of 8 (ValueError otherwise).
    kernel_size : int
        Must be 4, cake's width; any other value raises ValueError.
    bias : bool, default False
        Whether the module has a per-channel bias ``[D]``.
    activation : str or None, default 'silu'
        ``'silu'`` (or FLA's alias ``'swish'``) or None. Anything else raises ValueError (FLA
        raises AssertionError).
    backend : str or None, default 'triton'
        FLA's kernel choice, accepted for compatibility (``'triton'``, ``'cuda'``, ``'cake'`` or
        None) and ignored: cake's kernels run on either device. Another string raises
        ValueError, as FLA does for an invalid backend. The attribute ``backend`` reads
        ``'cake'``.
    device, dtype : optional
        Of the parameters, as for ``nn.Conv1d``. Any floating dtype: the weight and bias are
        cast to fp32 for the kernels (exactly, from bf16 or fp16) and their gradients cast
        back by autograd.
    **kwargs
        Other FLA keywords (``use_fast_conv1d``, deprecated there) are accepted and ignored,
        as FLA does.

    Attributes
    ----------
    weight : nn.Parameter
        ``[D, 1, 4]``, the parameter of ``nn.Conv1d(D, D, 4, padding=3, groups=D)``, initialised
        as FLA's: ``weight[d, 0, k]`` multiplies ``x[t - 3 + k]`` (``k = 3``: the current row),
        which is cake's ``w[d][k]``.
    bias : nn.Parameter or None
        ``[D]``. The state_dict keys are FLA's (``weight``, ``bias``): an FLA checkpoint loads
        unchanged, and the reverse.
    hidden_size, activation, backend
        As FLA's (``activation`` as given; ``backend`` is ``'cake'``).
    context : ContextDetKcp or None
        The context used when ``forward`` gets no ``ctx``; set it once per batch layout (for
        all modules of a model: :func:`cake.set_conv_context`). Not saved in the state_dict and
        not pickled.
    recompute_handle : RecomputeHandleDetKcp or None
        The handle used when ``forward`` gets no ``recompute_handle``, in training mode only
        (``module.training``); see Notes. Not saved, not pickled.

    Notes
    -----
    **forward** ``(x, residual=None, mask=None, cache=None, output_final_state=False,
    cu_seqlens=None, chunk_indices=None, *, ctx=None, recompute_handle=None, cooperative=None,
    **kwargs) -> (y, None)``: FLA's signature, plus three keyword-only arguments.

    * ``x``: BF16 ``[1, T, D]`` (any strides; a contiguous 16-byte aligned copy is made where
      needed), or ``[B, T, D]`` with ``B > 1`` when there is neither ``cu_seqlens`` nor a
      context (B independent sequences of T rows, as FLA computes them). Other dtypes raise
      TypeError (cake's kernels read bf16). ``y`` has x's shape and dtype; the second element
      of the returned tuple is None, as FLA returns without ``output_final_state``.
    * **The context decides the sequences and the ranks.** In order: the ``ctx`` argument,
      else the module's ``context`` attribute, else a *single-process* context built from
      ``cu_seqlens`` (FLA's ``cu_seqlens_cpu`` keyword, when given, is read instead, saving a
      device sync) or from B and T without it: the local convolution FLA's module computes,
      whether or not torch.distributed is initialised. Those contexts are cached by their
      offsets (and a ``cu_seqlens`` tensor seen before, unchanged, is not read again), since
      building one plans the batch and costs more than a call.
      With a context (argument or attribute), ``cu_seqlens`` is not read: the context's global
      ``cu_seqlens`` and partition define the sequences, and x must be this rank's rows,
      ``[1, ctx.local_rows, D]``, in the partition's order (``x_global[:, ctx.global_rows()]``).
      Every rank of the context's group then calls the module once per layer, in the same
      order (the halo exchange is a collective). dw and dbias are this rank's contributions:
      sum them over the group, as for any weight under context parallelism.
    * ``recompute_handle``: as for :func:`cake.cake_causal_conv1d_det_kcp`, one per call and
      micro-step, created outside the checkpoint region: under ``torch.utils.checkpoint`` the
      recompute inside the backward then issues no collective. Passing it is the robust way.
      The ``recompute_handle`` attribute is the convenience for layers that cannot pass it
      (FLA's layers call ``conv(x=..., cu_seqlens=...)``): set a fresh handle on every module
      before each micro-step (:func:`cake.set_conv_context` with ``recompute_handles=True``).
      It is used only in training mode, and only when each micro-step's backward runs before
      the next micro-step's forward (with interleaved micro-batches, as in pipeline schedules,
      pass ``recompute_handle=`` per call instead). A forward outside a backward that finds
      its attribute handle already filled (a handle left from an earlier step) raises
      ValueError instead of silently reusing that step's rows.
    * ``cooperative``: the GPU launch form (see :func:`cake.cake_causal_conv1d_det_kcp`).
    * Unsupported FLA features raise ValueError naming them: ``residual`` (FLA adds it in fp32
      before rounding), ``mask``, ``cache`` and ``output_final_state=True`` (decoding state),
      FLA's own ``cp_context`` (use a cake context), ``cu_seqlens`` with ``B > 1``, and
      ``B > 1`` with a context. ``chunk_indices``, ``cu_seqlens_cpu`` and ``seq_idx`` (FLA's
      precomputed kernel indices) are accepted; another keyword raises TypeError.
      :meth:`step` (FLA's decoding step) raises NotImplementedError.

    **torch.compile**: with a context (argument or attribute) the forward traces with
    ``fullgraph=True`` and no graph break, forward and backward, checkpointed or not. Without
    one, building or finding the single-process context needs the values of cu_seqlens (a
    graph break there; ``fullgraph=True`` then fails): pass ``ctx`` or set ``context``.

    Numerics: docs/NUMERICS.md (``a = conv + bias`` in fp32, ``y = bf16(silu(a))`` by cake's fixed fp32
    sequence), bitwise the same for every partition and rank count (y, dx), run to run and on
    CPU or GPU (dw, dbias); within bf16 rounding of FLA's Triton kernels.

    Examples
    --------
    >>> from cake import ShortConvolution              # was: from fla.modules import ...
    >>> conv = ShortConvolution(1024, kernel_size=4, bias=True, activation="silu")
    >>> y, _ = conv(x, cu_seqlens=cu_seqlens)          # one process, as FLA's module
    >>> ctx = cake.ContextDetKcp(cu_seqlens_global, group, partition="zigzag")
    >>> handle = cake.RecomputeHandleDetKcp()          # per call and micro-step
    >>> y, _ = conv(x_local, ctx=ctx, recompute_handle=handle)   # context parallel
    """

    def __init__(self, hidden_size, kernel_size, bias=False, activation="silu",
                 backend="triton", device=None, dtype=None, **kwargs):
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, numbers.Integral) or \
                kernel_size != 4:
            raise ValueError(f"kernel_size: cake.ShortConvolution supports only kernel_size=4 "
                             f"(cake's width), got {kernel_size!r}")
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, numbers.Integral) or \
                hidden_size <= 0 or hidden_size % 8:
            raise ValueError(f"hidden_size: cake.ShortConvolution needs a positive multiple of "
                             f"8 (cake's channel counts), got {hidden_size!r}")
        if not (activation is None or isinstance(activation, str)) or \
                activation not in _ACTIVATIONS:
            raise ValueError(f"activation: expected 'silu' (or 'swish') or None, got "
                             f"{activation!r}")
        if not (backend is None or isinstance(backend, str)) or backend not in _BACKENDS:
            raise ValueError(f"Invalid backend: {backend}, must be one of ['cuda', 'triton'] "
                             f"(accepted for FLA compatibility; cake runs its own kernels)")
        super().__init__(in_channels=hidden_size, out_channels=hidden_size, kernel_size=4,
                         padding=3, groups=hidden_size, bias=bias, device=device, dtype=dtype)
        _make_lookup()
        self.hidden_size = int(hidden_size)
        self.activation = activation
        self.backend = "cake"
        self.context = None
        self.recompute_handle = None
        if "use_fast_conv1d" in kwargs:
            warnings.warn("The `use_fast_conv1d` parameter is deprecated and will be ignored "
                          "(cake.ShortConvolution runs cake's kernels).")

    # ---- FLA's other members -------------------------------------------------------------

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}, groups={self.groups}")
        if self.bias is None:
            s += ", bias=False"
        if self.activation is not None:
            s += f", activation={self.activation}"
        return s + f", backend={self.backend}"

    @property
    def state_size(self):
        return self.hidden_size * self.kernel_size[0]

    def step(self, x, residual=None, cache=None, output_final_state=False, cu_seqlens=None):
        raise NotImplementedError("cake.ShortConvolution.step: decoding (one token per sequence "
                                  "with a cache) is not supported; cake's convolution is for "
                                  "training (use FLA's module for decoding)")

    def __getstate__(self):
        state = super().__getstate__().copy()
        state["context"] = None  # C objects: neither pickled nor deep-copied
        state["recompute_handle"] = None
        return state

    # ---- forward -------------------------------------------------------------------------

    def _activation(self):
        act = self.activation
        if act not in _ACTIVATIONS:
            raise ValueError(f"activation: expected 'silu' (or 'swish') or None, got {act!r}")
        return _ACTIVATIONS[act]

    def _params(self, device):
        """The fp32 weight (``[D, 1, 4]``: the kernels read it as ``[D, 4]``, the same memory)
        and ``[D]`` bias (None) the kernels read, on x's device."""
        w = self.weight
        b = self.bias
        if w.device != device:
            raise ValueError(f"x: expected the device of the module's weight ({w.device}), got "
                             f"{device}")
        if w.dtype is not _F32:
            w = w.float()
        if not w.is_contiguous():
            w = w.contiguous()
        if b is not None:
            if b.dtype is not _F32:
                b = b.float()
            if not b.is_contiguous():
                b = b.contiguous()
        if not _compiling():  # (compiled: the op aligns at run time)
            w = aligned(w)
            b = None if b is None else aligned(b)
        return w, b

    def _rows(self, x, name):
        """x [B, T, D] as the rows cake reads ([1, T, D] as it is when contiguous, else a
        contiguous, 16-byte aligned copy; B > 1 as [B*T, D]), and (B, T)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dtype is not _BF16:
            raise TypeError(f"{name}: expected dtype torch.bfloat16 (cake's kernels read bf16 "
                            f"activations), got {x.dtype}")
        shape = x.shape
        if len(shape) != 3:
            raise ValueError(f"{name}: expected shape [B, T, D], got {list(shape)}")
        B, T, D = shape
        if D != self.hidden_size:
            raise ValueError(f"{name}: expected D = hidden_size = {self.hidden_size} channels, "
                             f"got shape {list(shape)}")
        rows = x if x.is_contiguous() else x.contiguous()
        if B != 1:
            rows = rows.view(B * T, D)
        if not _compiling():
            rows = aligned(rows)
        return rows, B, T

    def _handle(self, recompute_handle):
        if recompute_handle is not None or not self.training:
            return recompute_handle
        handle = self.recompute_handle
        if handle is not None and not _compiling() and isinstance(handle, RecomputeHandleDetKcp) \
                and not handle._closed and not _in_backward() and handle.contains("conv"):
            raise ValueError(
                "recompute_handle: this module's recompute_handle attribute already holds the "
                "rows of an earlier forward (a handle serves one forward and its recompute); "
                "set a fresh one before each micro-step (cake.set_conv_context(model, ctx, "
                "recompute_handles=True)) or pass recompute_handle= to the call")
        return handle

    def forward(self, x, residual=None, mask=None, cache=None, output_final_state=False,
                cu_seqlens=None, chunk_indices=None, *, ctx=None, recompute_handle=None,
                cooperative=None, **kwargs):
        """See the class docstring: FLA's forward, returning ``(y, None)``."""
        cu_seqlens_cpu = None
        if residual is not None or mask is not None or cache is not None or \
                output_final_state or kwargs:
            cu_seqlens_cpu = _refuse_unsupported(residual, mask, cache, output_final_state,
                                                 kwargs)
        rows, B, T = self._rows(x, "x")
        ctx = _resolve_context(ctx, self.context, cu_seqlens, cu_seqlens_cpu, B, T, "x")
        w, b = self._params(rows.device)
        y = conv_det_kcp(rows, w, ctx, biases=b, activation=self._activation(),
                         recompute_handle=self._handle(recompute_handle),
                         cooperative=cooperative, multi=False)
        return (y if B == 1 else y.view(B, T, self.hidden_size)), None


def _refuse_unsupported(residual, mask, cache, output_final_state, kwargs):
    """ValueError naming an FLA feature cake does not offer; returns cu_seqlens_cpu."""
    if residual is not None:
        raise ValueError("residual: not supported by cake.ShortConvolution (FLA adds it in fp32 "
                         "before rounding y); add it to the output yourself")
    if mask is not None:
        raise ValueError("mask: not supported by cake.ShortConvolution (padded batches); pack "
                         "the sequences with cu_seqlens, or multiply x by the mask first")
    if cache is not None:
        raise ValueError("cache: decoding caches are not supported by cake.ShortConvolution "
                         "(it trains; use FLA's module for decoding)")
    if output_final_state:
        raise ValueError("output_final_state=True: the final (decoding) state is not supported "
                         "by cake.ShortConvolution")
    if kwargs.get("cp_context") is not None:
        raise ValueError("cp_context: FLA's context parallelism is not supported by "
                         "cake.ShortConvolution; pass a cake.ContextDetKcp as ctx= (or set the "
                         "module's context)")
    unknown = sorted(set(kwargs) - {"cu_seqlens_cpu", "seq_idx", "cp_context", "chunk_size"})
    if unknown:
        raise TypeError(f"cake.ShortConvolution.forward got an unexpected keyword argument "
                        f"{unknown[0]!r}")
    return kwargs.get("cu_seqlens_cpu")


def _resolve_context(ctx, attribute, cu_seqlens, cu_seqlens_cpu, B, T, name):
    if ctx is None:
        ctx = attribute
    if ctx is None:
        if cu_seqlens is not None and B != 1:
            raise ValueError(f"{name}: with cu_seqlens (packed sequences) expected B = 1, got "
                             f"B = {B}")
        return (_lookup or _make_lookup())(cu_seqlens, cu_seqlens_cpu, B, T)
    if not isinstance(ctx, ContextDetKcp):
        raise TypeError(f"ctx: expected a cake.ContextDetKcp or None, got {type(ctx).__name__}")
    if B != 1:
        raise ValueError(f"{name}: with a context expected B = 1 (this rank's packed rows, "
                         f"[1, ctx.local_rows, D]), got B = {B}")
    return ctx


def _module_list(convs):
    if isinstance(convs, nn.ModuleList):
        convs = list(convs)
    if isinstance(convs, nn.Module) or not isinstance(convs, (list, tuple)) or not convs:
        raise TypeError(f"convs: expected a non-empty list, tuple or nn.ModuleList of "
                        f"cake.ShortConvolution, got {type(convs).__name__}")
    for i, m in enumerate(convs):
        if not isinstance(m, ShortConvolution):
            raise TypeError(f"convs[{i}]: expected a cake.ShortConvolution, got "
                            f"{type(m).__module__}.{type(m).__name__}")
    return convs


def short_convolution_multi(convs, xs, *, cu_seqlens=None, ctx=None, recompute_handle=None,
                            cooperative=None, **kwargs):
    """A layer's ShortConvolutions (q, k and v, say) as one multi call: one halo exchange per
    direction instead of one per module, bitwise equal to calling each module.

    Parameters
    ----------
    convs : list, tuple or nn.ModuleList of ShortConvolution
        n >= 1 cake modules; their channel counts may differ, but they must share the
        activation and whether they have a bias (one ``cake_conv_params`` per C call): mixing
        raises ValueError.
    xs : list or tuple of torch.Tensor
        One BF16 ``[B, T, D_i]`` input per module, all of the same B and T.
    cu_seqlens : optional
        As for :class:`ShortConvolution` (with neither this nor a context: B sequences of T).
        ``cu_seqlens_cpu=`` (FLA's) is accepted too.
    ctx : ContextDetKcp, optional
        The context; else the modules' ``context`` attribute (all the same object), else the
        single-process context of ``cu_seqlens``, as for the module.
    recompute_handle : RecomputeHandleDetKcp, optional
        One handle for the whole call (its ``"conv"`` entry then holds a multi call's pools);
        else, in training mode, the first module's ``recompute_handle`` attribute, with the
        module's rules.
    cooperative : bool, optional
        The GPU launch form.

    Returns
    -------
    tuple of torch.Tensor
        The n outputs y_i, each of its input's shape (the modules return ``(y, None)``; this
        returns the ys).

    Notes
    -----
    Outputs and every gradient (dx, each module's weight and bias gradients) are bitwise those
    of ``tuple(conv(x, ...)[0] for conv, x in zip(convs, xs))`` with the same context.

    Examples
    --------
    >>> q, k, v = cake.short_convolution_multi((self.q_conv1d, self.k_conv1d, self.v_conv1d),
    ...                                        (q, k, v), cu_seqlens=cu_seqlens)
    """
    convs = _module_list(convs)
    if isinstance(xs, torch.Tensor) or not isinstance(xs, (list, tuple)):
        raise TypeError(f"xs: expected a list or tuple of tensors, got {type(xs).__name__}")
    if len(xs) != len(convs):
        raise ValueError(f"xs: expected {len(convs)} tensors (one per module of convs), got "
                         f"{len(xs)}")
    cu_seqlens_cpu = _refuse_unsupported(None, None, None, False, kwargs) if kwargs else None
    first = convs[0]
    act = first._activation()
    has_bias = first.bias is not None
    for i, m in enumerate(convs[1:], 1):
        if m._activation() != act or (m.bias is not None) != has_bias:
            raise ValueError(
                f"convs[{i}]: activation {m.activation!r} and bias={m.bias is not None} differ "
                f"from convs[0]'s ({first.activation!r}, bias={has_bias}); one multi call "
                f"takes one activation and bias setting for all its tensors: call the modules "
                f"separately (or group them by setting)")
    rows, shape = [], None
    for i, (m, x) in enumerate(zip(convs, xs)):
        r, B, T = m._rows(x, f"xs[{i}]")
        if shape is None:
            shape = (B, T)
        elif (B, T) != shape:
            raise ValueError(f"xs[{i}]: expected B = {shape[0]} and T = {shape[1]} (those of "
                             f"xs[0]), got shape {list(x.shape)}")
        rows.append(r)
    B, T = shape
    attribute = first.context
    if ctx is None and any(m.context is not attribute for m in convs[1:]):
        raise ValueError("ctx: the modules' context attributes differ; pass ctx= or set the "
                         "same context on all of them (cake.set_conv_context)")
    ctx = _resolve_context(ctx, attribute, cu_seqlens, cu_seqlens_cpu, B, T, "xs[0]")
    params = [m._params(rows[0].device) for m in convs]
    ws = [p[0] for p in params]
    bs = [p[1] for p in params] if has_bias else None
    ys = conv_det_kcp(rows, ws, ctx, biases=bs, activation=act,
                      recompute_handle=first._handle(recompute_handle),
                      cooperative=cooperative, multi=True)
    if B == 1:
        return tuple(ys)
    return tuple(y.view(B, T, m.hidden_size) for y, m in zip(ys, convs))


def set_conv_context(module, ctx, *, recompute_handles=False):
    """Sets the context (and fresh recompute handles) of every :class:`ShortConvolution` in
    `module` (the module itself included), for layers that call them FLA's way
    (``conv(x=..., cu_seqlens=...)``), which cannot pass ``ctx=``.

    Parameters
    ----------
    module : nn.Module or list or tuple of nn.Module
        A model, a layer or one ShortConvolution (or several).
    ctx : ContextDetKcp or None
        The context of the batch layout (None: back to single-process contexts built from
        cu_seqlens). Set it once per batch layout.
    recompute_handles : bool, default False
        True: give each module a fresh :class:`RecomputeHandleDetKcp` (call it so before each
        micro-step's forward, when training under activation checkpointing; each micro-step's
        backward must run before the next forward). False: the modules' handles are cleared.

    Returns
    -------
    list of ShortConvolution
        The modules that were set.
    """
    roots = list(module) if isinstance(module, (list, tuple)) else [module]
    for root in roots:
        if not isinstance(root, nn.Module):
            raise TypeError(f"module: expected an nn.Module (or a list or tuple of them), got "
                            f"{type(root).__name__}")
    if ctx is not None and not isinstance(ctx, ContextDetKcp):
        raise TypeError(f"ctx: expected a cake.ContextDetKcp or None, got {type(ctx).__name__}")
    found, seen = [], set()
    for root in roots:
        for m in root.modules():
            if isinstance(m, ShortConvolution) and id(m) not in seen:
                seen.add(id(m))
                found.append(m)
    for m in found:
        m.context = ctx
        m.recompute_handle = RecomputeHandleDetKcp() if recompute_handles else None
    return found
