"""Argument checks of the public entry points, before anything reaches C.

Every message names the argument, what was expected and what was given. Types (a tensor or
not, dtypes) raise TypeError; values (shapes, devices, contiguity, counts) raise ValueError.

The checks run on every call, so the common case takes one fast pass (``_pair_ok``: a few
attribute reads per tensor); only when it fails do the detailed checks run, to find the first
broken rule and word its message. Under torch.compile the same code is traced by dynamo (it
becomes guards). The alignment of GPU tensors is checked where their data pointers are read,
in ``_ops.forward_impl`` (``check_alignment`` words the message).
"""
import torch

from . import _lib
from ._context import ContextDetKcp
from ._handle import RecomputeHandleDetKcp

_BF16, _F32, _STRIDED = torch.bfloat16, torch.float32, torch.strided
_compiling = torch.compiler.is_compiling


def _shape(t):
    return list(t.shape)


def check_common(ctx, recompute_handle, cooperative):
    """The context, handle and launch form; returns the C launch form (-1, 0, 1).

    Under torch.compile, whether ctx or the handle was closed is left to the op, at run time
    (the same message): a compiled graph outlives the objects it was traced with."""
    if type(ctx) is not ContextDetKcp and not isinstance(ctx, ContextDetKcp):
        raise TypeError(f"ctx: expected a ContextDetKcp, got {type(ctx).__name__}")
    compiling = _compiling()
    if not compiling and ctx._closed:
        raise ValueError("ctx: this ContextDetKcp was closed")
    if recompute_handle is not None:
        if not isinstance(recompute_handle, RecomputeHandleDetKcp):
            raise TypeError(f"recompute_handle: expected a RecomputeHandleDetKcp or None, got "
                            f"{type(recompute_handle).__name__}")
        if not compiling and recompute_handle._closed:
            raise ValueError("recompute_handle: this RecomputeHandleDetKcp was closed")
    if cooperative is None:
        return _lib.COOPERATIVE_AUTO
    if cooperative is True:
        return _lib.COOPERATIVE_ON
    if cooperative is False:
        return _lib.COOPERATIVE_OFF
    raise TypeError(f"cooperative: expected True, False or None, got {type(cooperative).__name__}")


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


_CONV1D = (1, 4)  # the trailing dims of nn.Conv1d's depthwise weight [C, 1, 4]


def _pair_ok(x, w, rows, device_index, is_cuda, conv1d_weights=False):
    """True when (x, w) passes every check below (without wording any message)."""
    try:
        shape = x.shape
        dims = len(shape)
        channels = shape[-1]
        return (x.dtype is _BF16 and w.dtype is _F32 and x.layout is _STRIDED and
                w.layout is _STRIDED and (dims == 2 or (dims == 3 and shape[0] == 1)) and
                shape[-2] == rows and channels > 0 and channels % 8 == 0 and
                (w.shape == (channels, 4) or
                 (conv1d_weights and w.shape == (channels, 1, 4))) and
                x.is_contiguous() and w.is_contiguous() and
                x.is_cuda is is_cuda and (is_cuda or x.is_cpu) and
                x.get_device() == device_index and w.get_device() == device_index)
    except (AttributeError, TypeError, IndexError):
        return False


def check_pair(ctx, x, w, x_name, w_name, device, conv1d_weights=False):
    """Checks one (x, w) in detail; `device` is the device every tensor must share (None: x's).
    `conv1d_weights`: [C, 1, 4] (nn.Conv1d's depthwise layout, the same memory) is accepted
    too. Returns x's device."""
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
    if tuple(w.shape) != (channels, 4) and not (conv1d_weights and
                                                tuple(w.shape) == (channels, 1, 4)):
        raise ValueError(f"{w_name}: expected shape [{channels}, 4] (the channels of {x_name}, "
                         f"4 taps), got {_shape(w)}")
    if not w.is_contiguous():
        raise ValueError(f"{w_name}: expected a contiguous tensor, got strides "
                         f"{list(w.stride())} (call .contiguous())")
    return x.device


def _names(multi, i):
    return (f"xs[{i}]", f"weights[{i}]") if multi else ("x", "w")


def check_alignment(xs, ws, multi, bs=()):
    """GPU data pointers must be 16-byte aligned (a view at an odd storage offset is not)."""
    for i, (x, w) in enumerate(zip(xs, ws)):
        pair = zip(_names(multi, i), (x, w))
        if bs:
            pair = list(pair) + [(_bias_name(multi, i), bs[i])]
        for name, t in pair:
            if t.numel() and t.data_ptr() % _lib.CUDA_ALIGNMENT:
                raise ValueError(f"{name}: expected a {_lib.CUDA_ALIGNMENT}-byte aligned data "
                                 f"pointer on the GPU, got one {t.data_ptr() % 16} bytes past "
                                 f"(a view at storage offset {t.storage_offset()}; pass a copy)")


def _bias_name(multi, i):
    return f"biases[{i}]" if multi else "bias"


def check_activation(activation):
    """The op's activation string of a Python value: None -> "none", "silu" -> "silu"."""
    if activation is None or activation == "none":
        return "none"
    if activation == "silu":
        return "silu"
    raise ValueError(f"activation: expected None or 'silu', got {activation!r}")


def check_biases(xs, biases, multi):
    """None, or one fp32 [C_i] contiguous tensor per tensor of xs on its device; returns a
    tuple (empty for None)."""
    if biases is None:
        return ()
    if multi:
        if isinstance(biases, torch.Tensor) or not isinstance(biases, (list, tuple)):
            raise TypeError(f"biases: expected None or a list or tuple of tensors, got "
                            f"{type(biases).__name__}")
        if len(biases) != len(xs):
            raise ValueError(f"biases: expected {len(xs)} tensors (one per tensor of xs), got "
                             f"{len(biases)}")
    else:
        biases = (biases,)
    for i, (x, b) in enumerate(zip(xs, biases)):
        try:
            if (b.dtype is _F32 and b.layout is _STRIDED and b.dim() == 1 and
                    b.shape[0] == x.shape[-1] and b.is_contiguous() and b.device == x.device):
                continue
        except (AttributeError, TypeError, IndexError):
            pass
        name = _bias_name(multi, i)
        if not isinstance(b, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(b).__name__}")
        if b.dtype != torch.float32:
            raise TypeError(f"{name}: expected dtype torch.float32, got {b.dtype}")
        if b.layout != torch.strided:
            raise ValueError(f"{name}: expected a dense (strided) tensor, got layout {b.layout}")
        if b.device != x.device:
            raise ValueError(f"{name}: expected device {x.device} (the device of "
                             f"{_names(multi, i)[0]}), got {b.device}")
        if tuple(b.shape) != (x.shape[-1],):
            raise ValueError(f"{name}: expected shape [{x.shape[-1]}] (the channels of "
                             f"{_names(multi, i)[0]}), got {_shape(b)}")
        raise ValueError(f"{name}: expected a contiguous tensor, got strides "
                         f"{list(b.stride())} (call .contiguous())")
    return tuple(biases)


def check_library_for(device):
    lib = _lib.get()
    if device.type == "cuda" and not lib.has_cuda:
        raise RuntimeError(f"cake: CUDA tensors were passed, but the loaded C library "
                           f"({lib.path}) has no GPU kernels; build it where nvcc exists "
                           f"and load libcake_cuda.so (or set CAKE_LIBRARY)")
    return lib


def check_call(ctx, xs, ws, recompute_handle, cooperative, multi, conv1d_weights=False):
    """Every check of one call (xs, ws: sequences of equal length >= 1); returns the C launch
    form. `conv1d_weights` (internal calls): weights may be [C, 1, 4] too."""
    flag = check_common(ctx, recompute_handle, cooperative)
    x0 = xs[0]
    rows = ctx.local_rows
    try:
        is_cuda = x0.is_cuda is True
        index = x0.get_device()
    except (AttributeError, TypeError):
        is_cuda, index = False, None
    if not all(_pair_ok(x, w, rows, index, is_cuda, conv1d_weights) for x, w in zip(xs, ws)):
        device = None
        for i, (x, w) in enumerate(zip(xs, ws)):
            device = check_pair(ctx, x, w, *_names(multi, i), device, conv1d_weights)
    if is_cuda and not _compiling():
        check_library_for(x0.device)  # (the 16-byte alignment: checked where the pointers are)
    return flag
