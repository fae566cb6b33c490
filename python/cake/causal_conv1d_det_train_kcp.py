"""Deterministic context-parallel short causal convolutions (width 4) for training.

The public API: :func:`cake_causal_conv1d_det_kcp` (one tensor),
:func:`cake_causal_conv1d_det_multi_kcp` (several tensors of one layer, one halo exchange per
direction), :class:`ContextDetKcp` (process group + partition) and
:class:`RecomputeHandleDetKcp` (activation checkpointing without a second exchange).

Every result is bitwise reproducible (docs/NUMERICS.md): the same bits on every run, thread count,
launch form, CPU or GPU; y and dx are bitwise the same for every partition and number of ranks;
the multi entry point is bitwise the single calls.

Both entry points work eagerly and under ``torch.compile`` (fullgraph, forward and backward,
with or without ``torch.utils.checkpoint``): they run as the torch.library ops
``cake::conv_forward`` and ``cake::conv_backward`` there, with bitwise the eager results.
"""
from . import _checks
from ._context import ContextDetKcp
from ._handle import RecomputeHandleDetKcp
from ._ops import ConvFunction

__all__ = ["cake_causal_conv1d_det_kcp", "cake_causal_conv1d_det_multi_kcp", "ContextDetKcp",
           "RecomputeHandleDetKcp"]

ContextDetKcp.__module__ = __name__
RecomputeHandleDetKcp.__module__ = __name__


def cake_causal_conv1d_det_kcp(x, w, ctx, *, recompute_handle=None, cooperative=None):
    """Autograd-enabled context-parallel causal depthwise convolution of one tensor.

    For local row t and channel c, in fp32 with one fused multiply-add per tap:
    ``y[t, c] = bf16(sum_k w[c, k] * x(t - 3 + k, c))``, where ``x(t - d, c)`` is the row d
    positions before t *in t's sequence* (global order): a local row, a row of another rank
    (the halo, exchanged over ``ctx``'s group), or +0.0 before the sequence's start.

    Parameters
    ----------
    x : torch.Tensor
        BF16 ``[S_local, C]`` or ``[1, S_local, C]``, contiguous: this rank's rows of the packed
        batch, in the partition's order (``S_local = ctx.local_rows``, may be 0). C is a
        positive multiple of 8. CPU or CUDA; on CUDA the data pointer must be 16-byte aligned.
    w : torch.Tensor
        FP32 ``[C, 4]``, contiguous, on x's device; ``w[c, 3]`` multiplies the current row.
    ctx : ContextDetKcp
        The process group and partition. Every rank of the group calls this function once per
        layer, in the same order, with the same channel count.
    recompute_handle : RecomputeHandleDetKcp, optional
        Keyword-only, default None. One handle per call and micro-step, created outside the
        outermost activation-checkpoint region: the original forward stores the history pools
        in its ``"conv"`` entry and the recompute inside the backward reads them back, issuing
        no collective (the backward still exchanges once). Every rank passes one or none. The
        entry serves one single call; reusing it for a multi call, or another channel count,
        raises ValueError.
    cooperative : bool, optional
        Keyword-only, the GPU launch form: True, one grid-synchronised kernel per direction
        (RuntimeError where the device cannot launch cooperatively); False, ordinary launches;
        None, the library picks. Results never depend on it. Accepted and ignored on the CPU.

    Returns
    -------
    torch.Tensor
        y, BF16, x's shape, on x's device (GPU work enqueued on the current stream).

    Raises
    ------
    TypeError
        x or w is not a tensor or has the wrong dtype; ctx, recompute_handle or cooperative
        has the wrong type.
    ValueError
        Wrong shape, device, contiguity, channel count (``C % 8``), weight shape, row count
        (not ``ctx.local_rows``), a misaligned GPU pointer, a closed ctx or handle, or a
        recompute handle misused (the C library's message).
    RuntimeError
        A failed exchange (:class:`cake.CakeError`, chained to the process group's exception),
        a timeout, a mismatch in check mode, a CUDA error, CUDA tensors with a C library built
        without GPU kernels, or a double backward (``create_graph=True`` through this op).

    Notes
    -----
    dx is BF16 of x's shape; dw is FP32 ``[C, 4]``, *this rank's* contribution: sum it over
    the group (as for any weight under data or context parallelism). The incoming gradient may
    have any strides (it is made contiguous). The backward issues one exchange (the next rows
    of dy), so every rank must run it. The backward is not differentiable: a backward with
    ``create_graph=True`` (a gradient penalty, say) raises RuntimeError instead of returning a
    wrong second-order gradient.

    Under ``torch.compile`` the call traces without a graph break (fullgraph); ctx and the
    handle reach the compiled graph as small CPU token tensors, so a new handle every
    micro-step reuses the compiled graph. Create contexts and handles outside the compiled
    function.

    Deliberately not checked (it would cost a collective or a device sync): that the other
    ranks make the same call (same order, channel count, handle passed or not; use the
    context's ``check=True`` to compare them), that ``x`` holds the rows the partition says
    this rank holds, and the values themselves (NaN and infinities propagate as IEEE says).

    Examples
    --------
    >>> import torch, torch.distributed as dist
    >>> from torch.utils.checkpoint import checkpoint
    >>> from cake import ContextDetKcp, RecomputeHandleDetKcp, cake_causal_conv1d_det_kcp
    >>> cu_seqlens = [0, 300, 1000, 1024]            # the global packed batch
    >>> ctx = ContextDetKcp(cu_seqlens, dist.group.WORLD, partition="zigzag")
    >>> x = x_global[ctx.global_rows()]              # this rank's rows, bf16 [S_local, C]
    >>> handle = RecomputeHandleDetKcp()             # outside the checkpoint region
    >>> y = checkpoint(lambda t: cake_causal_conv1d_det_kcp(t, w, ctx, recompute_handle=handle),
    ...                x, use_reentrant=False)
    >>> y.float().square().sum().backward()          # w.grad: this rank's part; all_reduce it
    """
    flag = _checks.check_call(ctx, (x,), (w,), recompute_handle, cooperative, False)
    (y,) = ConvFunction.apply(ctx, recompute_handle, flag, False, "none", False, x, w)
    return y


def cake_causal_conv1d_det_multi_kcp(xs, weights, ctx, *, recompute_handle=None,
                                     cooperative=None):
    """Autograd-enabled context-parallel convolutions of several tensors of one layer.

    For example a layer's q, k and v, with one halo exchange per direction for all of them.
    The result is bitwise ``tuple(cake_causal_conv1d_det_kcp(x, w, ctx) for x, w in
    zip(xs, weights))``: outputs and every gradient, dw included (each tensor keeps its own
    kernels and fixed-order reduction). The forward issues one halo exchange instead of one per
    tensor (the history rows of all tensors travel side by side and are copied out after the
    wait), and so does the backward.

    Parameters
    ----------
    xs : list or tuple of torch.Tensor
        n >= 1 BF16 ``[S_local, C_i]`` or ``[1, S_local, C_i]`` contiguous packed activations of
        this rank's rows, in the partition's order; each C_i a positive multiple of 8 (they may
        differ). All on one device (CPU or CUDA; 16-byte aligned on CUDA).
    weights : list or tuple of torch.Tensor
        FP32 ``[C_i, 4]`` contiguous taps, one per tensor of xs, on the same device.
    ctx : ContextDetKcp
        As in :func:`cake_causal_conv1d_det_kcp`. Every rank calls this function once per
        layer, in the same order, with the same tensor count and channel counts. The ranks are
        not compared (that would cost a collective) unless the context's check mode is on: a
        different count, channel count or order hangs the exchange or silently corrupts the
        history rows.
    recompute_handle : RecomputeHandleDetKcp, optional
        Keyword-only, default None. One handle for the whole call: the original forward stores
        the n history pools under ``"conv"`` and the recompute inside the backward reads them
        back, so the recompute issues no collective; the backward still exchanges once. The
        rules of :func:`cake_causal_conv1d_det_kcp` apply; the ``"conv"`` entry serves one
        multi call or one single call, never both.
    cooperative : bool, optional
        As in :func:`cake_causal_conv1d_det_kcp`, one form for every tensor of the call.

    Returns
    -------
    tuple of torch.Tensor
        The n BF16 outputs, each of its input's shape.

    Raises
    ------
    TypeError, ValueError, RuntimeError
        As in :func:`cake_causal_conv1d_det_kcp`, naming the tensor (``xs[i]``,
        ``weights[i]``); also ValueError when ``len(weights) != len(xs)`` or xs is empty, and
        TypeError when xs or weights is not a list or tuple.

    Notes
    -----
    Gradients as in :func:`cake_causal_conv1d_det_kcp` (each dw is this rank's contribution).
    Not checked: as in :func:`cake_causal_conv1d_det_kcp`.

    Examples
    --------
    >>> q, k, v = cake_causal_conv1d_det_multi_kcp([q, k, v], [w_q, w_k, w_v], ctx,
    ...                                            recompute_handle=handle)
    """
    _checks.check_sequences(xs, weights)
    flag = _checks.check_call(ctx, xs, weights, recompute_handle, cooperative, True)
    return ConvFunction.apply(ctx, recompute_handle, flag, True, "none", False, *xs, *weights)


def conv_det_kcp(xs, weights, ctx, *, biases=None, activation=None, recompute_handle=None,
                 cooperative=None, multi=True):
    """The convolution with bias and activation (docs/NUMERICS.md): internal, behind
    :class:`cake.ShortConvolution` and :func:`cake.short_convolution_multi`.

    As :func:`cake_causal_conv1d_det_multi_kcp` (``multi=True``: xs and weights are sequences,
    one exchange per direction for all) or :func:`cake_causal_conv1d_det_kcp` (``multi=False``:
    one tensor each, and `biases` one tensor or None; weights may also be ``[C_i, 1, 4]``,
    nn.Conv1d's depthwise layout, the same memory), plus: `biases` None or one FP32 ``[C_i]``
    contiguous tensor per tensor, on x's device (``a = acc + bias[c]``, one fp32 add), and
    `activation` None or ``"silu"`` (``y = bf16(silu(a))`` by the fixed fp32 sequence of
    docs/NUMERICS.md). Differentiable in xs, weights and biases: the bias's gradient is this
    rank's dbias (FP32 ``[C_i]``, the fixed-tree sum of g over its rows; sum it over the group
    as dw). Returns a tuple of ys (multi) or y.
    """
    if multi:
        _checks.check_sequences(xs, weights)
    else:
        xs, weights = (xs,), (weights,)
    flag = _checks.check_call(ctx, xs, weights, recompute_handle, cooperative, multi, True)
    act = _checks.check_activation(activation)
    bs = _checks.check_biases(xs, biases, multi)
    ys = ConvFunction.apply(ctx, recompute_handle, flag, multi, act, len(bs) != 0, *xs, *weights,
                            *bs)
    return ys if multi else ys[0]
