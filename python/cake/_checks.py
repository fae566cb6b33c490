"""Argument checks of the public entry points, before anything reaches C.

Every message names the argument, what was expected and what was given. Types (a tensor or
not, dtypes) raise TypeError; values (shapes, devices, contiguity, counts) raise ValueError.
"""
import torch

from . import _lib
from ._context import ContextDetKcp
from ._handle import RecomputeHandleDetKcp


def _shape(t):
    return list(t.shape)


def check_common(ctx, recompute_handle, cooperative):
    if not isinstance(ctx, ContextDetKcp):
        raise TypeError(f"ctx: expected a ContextDetKcp, got {type(ctx).__name__}")
    ctx._handle  # raises if closed
    if recompute_handle is not None:
        if not isinstance(recompute_handle, RecomputeHandleDetKcp):
            raise TypeError(f"recompute_handle: expected a RecomputeHandleDetKcp or None, got "
                            f"{type(recompute_handle).__name__}")
        recompute_handle._handle  # raises if closed
    if cooperative is not None and not isinstance(cooperative, bool):
        raise TypeError(f"cooperative: expected True, False or None, got "
                        f"{type(cooperative).__name__}")


def check_sequences(xs, weights):
    for name, seq in (("xs", xs), ("weights", weights)):
        if isinstance(seq, torch.Tensor) or not isinstance(seq, (list, tuple)):
            raise TypeError(f"{name}: expected a list or tuple of tensors, got "
                            f"{type(seq).__name__}")
    if len(xs) < 1:
        raise ValueError("xs: expected at least 1 tensor, got 0")
    if len(weights) != len(xs):
        raise ValueError(f"weights: expected {len(xs)} tensors (one per tensor of xs), got "
                         f"{len(weights)}")


def check_pair(ctx, x, w, x_name, w_name, device):
    """Checks one (x, w); `device` is the device every tensor must share (None: x's)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{x_name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"{x_name}: expected dtype torch.bfloat16, got {x.dtype}")
    if x.layout != torch.strided:
        raise ValueError(f"{x_name}: expected a dense (strided) tensor, got layout {x.layout}")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{x_name}: expected a CPU or CUDA tensor, got device {x.device}")
    if device is not None and x.device != device:
        raise ValueError(f"{x_name}: expected device {device} (every tensor of the call on one "
                         f"device), got {x.device}")
    if not (x.dim() == 2 or (x.dim() == 3 and x.shape[0] == 1)):
        raise ValueError(f"{x_name}: expected shape [S_local, C] or [1, S_local, C], got "
                         f"{_shape(x)}")
    rows, channels = x.shape[-2], x.shape[-1]
    if channels <= 0 or channels % 8 != 0:
        raise ValueError(f"{x_name}: channel count {channels} is not a positive multiple of 8")
    if not x.is_contiguous():
        raise ValueError(f"{x_name}: expected a contiguous tensor, got strides "
                         f"{list(x.stride())} for shape {_shape(x)} (call .contiguous())")
    if rows != ctx.local_rows:
        raise ValueError(f"{x_name}: expected {ctx.local_rows} rows (this rank's local rows in "
                         f"ctx), got {rows}")
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{w_name}: expected a torch.Tensor, got {type(w).__name__}")
    if w.dtype != torch.float32:
        raise TypeError(f"{w_name}: expected dtype torch.float32, got {w.dtype}")
    if w.layout != torch.strided:
        raise ValueError(f"{w_name}: expected a dense (strided) tensor, got layout {w.layout}")
    if w.device != x.device:
        raise ValueError(f"{w_name}: expected device {x.device} (the device of {x_name}), got "
                         f"{w.device}")
    if tuple(w.shape) != (channels, 4):
        raise ValueError(f"{w_name}: expected shape [{channels}, 4] (the channels of {x_name}, "
                         f"4 taps), got {_shape(w)}")
    if not w.is_contiguous():
        raise ValueError(f"{w_name}: expected a contiguous tensor, got strides "
                         f"{list(w.stride())} (call .contiguous())")
    if x.device.type == "cuda":
        for name, t in ((x_name, x), (w_name, w)):
            if t.numel() and t.data_ptr() % _lib.CUDA_ALIGNMENT:
                raise ValueError(f"{name}: expected a {_lib.CUDA_ALIGNMENT}-byte aligned data "
                                 f"pointer on the GPU, got one {t.data_ptr() % 16} bytes past "
                                 f"(a view at storage offset {t.storage_offset()}; pass a copy)")
    return x.device


def check_library_for(device):
    lib = _lib.get()
    if device.type == "cuda":
        if not lib.has_cuda:
            raise RuntimeError(f"cake: CUDA tensors were passed, but the loaded C library "
                               f"({lib.path}) has no GPU kernels; build it where nvcc exists "
                               f"and load libcake_cuda.so (or set CAKE_LIBRARY)")
    return lib


def cooperative_flag(cooperative):
    if cooperative is None:
        return _lib.COOPERATIVE_AUTO
    return _lib.COOPERATIVE_ON if cooperative else _lib.COOPERATIVE_OFF
