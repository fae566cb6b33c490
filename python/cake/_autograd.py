"""The torch.autograd.Function over the C library's context calls, CPU and CUDA.

Forward: one C forward call (single or multi) filling y and the history pools; the pools are
saved for the backward (as tensors, so activation checkpointing frees and recomputes them).
Backward: one C backward call producing dx (bf16, x's shape) and this rank's dw (fp32).
GPU calls run on the current stream of the tensors' device, with a NULL workspace (the C
library allocates it on the stream).
"""
import torch

from . import _lib
from ._checks import check_library_for


def _ptrs(tensors):
    return _lib.pointer_array([t.data_ptr() for t in tensors])


def _stream_ptr(device):
    return torch.cuda.current_stream(device).cuda_stream


def run_forward(ctx, xs, ws, handle, cooperative, multi):
    """ys and history pools; xs, ws checked (same device, contiguous, rows of ctx)."""
    device = xs[0].device
    lib = check_library_for(device)
    n = len(xs)
    channels = [int(x.shape[-1]) for x in xs]
    ys = [torch.empty(x.shape, dtype=torch.bfloat16, device=device) for x in xs]
    pools = [torch.empty((ctx.pool_rows, c), dtype=torch.bfloat16, device=device)
             for c in channels]
    handle_ptr = handle._handle if handle is not None else None
    c = lib.c
    if device.type == "cpu":
        if multi:
            status = c.cake_forward_multi(ctx._handle, n, _lib.int64_array(channels), _ptrs(xs),
                                          _ptrs(ws), _ptrs(ys), _ptrs(pools), handle_ptr)
        else:
            status = c.cake_forward(ctx._handle, channels[0], xs[0].data_ptr(), ws[0].data_ptr(),
                                    ys[0].data_ptr(), pools[0].data_ptr(), handle_ptr)
    else:
        with torch.cuda.device(device):
            stream = _stream_ptr(device)
            if multi:
                status = c.cake_forward_multi_cuda(
                    ctx._handle, n, _lib.int64_array(channels), _ptrs(xs), _ptrs(ws), _ptrs(ys),
                    _ptrs(pools), handle_ptr, cooperative, None, 0, stream)
            else:
                status = c.cake_forward_cuda(
                    ctx._handle, channels[0], xs[0].data_ptr(), ws[0].data_ptr(),
                    ys[0].data_ptr(), pools[0].data_ptr(), handle_ptr, cooperative, None, 0,
                    stream)
    if status != _lib.SUCCESS:
        ctx._raise(status)
    return ys, pools


def run_backward(ctx, xs, ws, pools, dys, cooperative, multi):
    """dxs (bf16, shaped as xs) and dws (fp32 [C, 4]); dys contiguous bf16 on xs' device."""
    device = xs[0].device
    lib = check_library_for(device)
    n = len(xs)
    channels = [int(x.shape[-1]) for x in xs]
    dxs = [torch.empty(x.shape, dtype=torch.bfloat16, device=device) for x in xs]
    dws = [torch.empty(w.shape, dtype=torch.float32, device=device) for w in ws]
    c = lib.c
    if device.type == "cpu":
        if multi:
            status = c.cake_backward_multi(ctx._handle, n, _lib.int64_array(channels), _ptrs(xs),
                                           _ptrs(ws), _ptrs(pools), _ptrs(dys), _ptrs(dxs),
                                           _ptrs(dws))
        else:
            status = c.cake_backward(ctx._handle, channels[0], xs[0].data_ptr(),
                                     ws[0].data_ptr(), pools[0].data_ptr(), dys[0].data_ptr(),
                                     dxs[0].data_ptr(), dws[0].data_ptr())
    else:
        with torch.cuda.device(device):
            stream = _stream_ptr(device)
            if multi:
                status = c.cake_backward_multi_cuda(
                    ctx._handle, n, _lib.int64_array(channels), _ptrs(xs), _ptrs(ws),
                    _ptrs(pools), _ptrs(dys), _ptrs(dxs), _ptrs(dws), cooperative, None, 0,
                    stream)
            else:
                status = c.cake_backward_cuda(
                    ctx._handle, channels[0], xs[0].data_ptr(), ws[0].data_ptr(),
                    pools[0].data_ptr(), dys[0].data_ptr(), dxs[0].data_ptr(),
                    dws[0].data_ptr(), cooperative, None, 0, stream)
    if status != _lib.SUCCESS:
        ctx._raise(status)
    return dxs, dws


def _prepare_dy(dy, x, index, multi):
    name = f"grad of output {index}" if multi else "grad of the output"
    if dy.dtype != torch.bfloat16:
        raise TypeError(f"{name}: expected dtype torch.bfloat16, got {dy.dtype}")
    if dy.device != x.device:
        raise ValueError(f"{name}: expected device {x.device}, got {dy.device}")
    # Any strides (expanded, transposed, sliced): the C library reads contiguous rows.
    dy = dy.reshape(x.shape).contiguous()
    if dy.device.type == "cuda" and dy.numel() and dy.data_ptr() % _lib.CUDA_ALIGNMENT:
        dy = dy.clone()  # a contiguous view at an odd offset: a fresh allocation is aligned
    return dy


class ConvFunction(torch.autograd.Function):
    """apply(ctx, handle, cooperative, multi, n, *xs, *ws) -> tuple of n ys."""

    @staticmethod
    def forward(fctx, ctx, handle, cooperative, multi, n, *tensors):
        xs, ws = tensors[:n], tensors[n:]
        ys, pools = run_forward(ctx, xs, ws, handle, cooperative, multi)
        fctx.cake = (ctx, cooperative, multi, n)
        fctx.save_for_backward(*xs, *ws, *pools)
        return tuple(ys)

    @staticmethod
    def backward(fctx, *dys):
        ctx, cooperative, multi, n = fctx.cake
        saved = fctx.saved_tensors
        xs, ws, pools = saved[:n], saved[n:2 * n], saved[2 * n:]
        dys = [_prepare_dy(dy, x, i, multi) for i, (dy, x) in enumerate(zip(dys, xs))]
        dxs, dws = run_backward(ctx, xs, ws, pools, dys, cooperative, multi)
        need = fctx.needs_input_grad[5:]
        grads = [g if need[i] else None for i, g in enumerate(dxs + dws)]
        return (None, None, None, None, None, *grads)
