"""Loading the C library with ctypes: which file, the structs of cake.h, and every prototype used.

The library is looked up, in order:

1. ``$CAKE_LIBRARY``, a path to ``libcake.so`` or ``libcake_cuda.so`` (a CMake build directory's);
2. the package directory, where ``pip install .`` puts them: ``libcake_cuda.so`` when it is there
   and ``torch.cuda.is_available()``, else ``libcake.so`` (else ``libcake_cuda.so``, which holds
   the CPU core too).

It is loaded once, on first use, so importing :mod:`cake` never fails for want of it.
"""
import ctypes
import os
import threading

# cake_status (cake.h)
SUCCESS = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_OUT_OF_MEMORY = 2
ERROR_UNSUPPORTED = 3
ERROR_COMMUNICATION = 4
ERROR_TIMEOUT = 5
ERROR_MISMATCH = 6
ERROR_INTERNAL = 7
ERROR_CUDA = 8

# cake_cooperative (cake_cuda.h)
COOPERATIVE_AUTO = -1
COOPERATIVE_OFF = 0
COOPERATIVE_ON = 1

HALO_ROWS = 3
CUDA_ALIGNMENT = 16  # bytes, every device array of a GPU call (cake_cuda.h)

P = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int


def _capturing():
    """Whether this thread's current CUDA stream is capturing a CUDA graph."""
    try:
        import torch
        # (no capture without CUDA initialised; asking would initialise it, in a forked worker too)
        return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()
    except Exception:
        return False


# Objects the garbage collector dropped while a CUDA graph was being captured, closed later.
# Only append and pop touch it (each atomic), no lock: a collection may run inside either and
# call back into them from the same thread.
_deferred = []


def close_deferred():
    """Closes the objects whose collection came during a capture, unless one is still running.
    Called by every forward (_ops.forward_impl) and after every collection outside a capture."""
    while _deferred and not _capturing():
        try:
            obj = _deferred.pop()
        except IndexError:  # emptied meanwhile by a nested call
            return
        try:
            obj.close()
        except Exception:
            pass


class Owned:
    """Owns a C object: close() frees it; also on garbage collection and at the end of a with.

    A collection during a CUDA graph capture (contexts live in reference cycles, so the cyclic
    collector frees them whenever it runs) does not close: freeing device memory then
    (cudaFree) would invalidate the capture, as a synchronising call does. The object is kept
    and closed by close_deferred after the capture."""

    def close(self):
        raise NotImplementedError

    def __del__(self):
        if _capturing():
            _deferred.append(self)  # kept alive until close_deferred (finalised once)
            return
        try:
            self.close()
        except Exception:
            pass
        close_deferred()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Range(ctypes.Structure):
    _fields_ = [("start", I64), ("end", I64)]


class HaloRow(ctypes.Structure):
    _fields_ = [("global_row", I64), ("local_row", I64), ("rank", ctypes.c_int32),
                ("is_local", ctypes.c_int32)]


class Fragment(ctypes.Structure):
    _fields_ = [("local_start", I64), ("length", I64), ("global_start", I64),
                ("seq_index", I64), ("seq_start", I64), ("seq_end", I64),
                ("history", HaloRow * HALO_ROWS), ("future", HaloRow * HALO_ROWS)]


class Transfer(ctypes.Structure):
    _fields_ = [("peer", I32), ("data", P), ("bytes", I64)]


# cake_status (*exchange)(void *state, int tag, const cake_transfer *sends, int num_sends,
#                         const cake_transfer *receives, int num_receives, double timeout_seconds)
EXCHANGE = ctypes.CFUNCTYPE(I32, P, I32, ctypes.POINTER(Transfer), I32,
                            ctypes.POINTER(Transfer), I32, ctypes.c_double)
# ... the same plus `void *stream` (a cudaStream_t)
EXCHANGE_DEVICE = ctypes.CFUNCTYPE(I32, P, I32, ctypes.POINTER(Transfer), I32,
                                   ctypes.POINTER(Transfer), I32, ctypes.c_double, P)
RELEASE = ctypes.CFUNCTYPE(None, P)


class Transport(ctypes.Structure):
    _fields_ = [("exchange", EXCHANGE), ("release", RELEASE), ("state", P),
                ("exchange_device", EXCHANGE_DEVICE)]


class CpuOptions(ctypes.Structure):
    _fields_ = [("num_threads", I32), ("isa", I32)]  # isa: an enum, int-sized


class CtxOptions(ctypes.Structure):
    _fields_ = [("check", I32), ("timeout_seconds", ctypes.c_double), ("cpu", CpuOptions)]


STATS_FIELDS = ("forward_calls", "backward_calls", "exchanges", "check_rounds", "messages_sent",
                "messages_received", "rows_sent", "rows_received", "bytes_sent",
                "bytes_received", "rows_copied", "forwards_from_handle")


class CtxStats(ctypes.Structure):
    _fields_ = [(name, I64) for name in STATS_FIELDS]


# cake_activation (cake.h)
ACTIVATION_NONE = 0
ACTIVATION_SILU = 1
ACTIVATIONS = {"none": ACTIVATION_NONE, "silu": ACTIVATION_SILU}


class ConvParams(ctypes.Structure):
    """cake_conv_params: what a call computes beyond the plain convolution. NULL (None) is the
    plain op; bias and dbias are arrays of per-tensor pointers (`const float *const *`)."""
    _fields_ = [("activation", I32), ("bias", P), ("dbias", P)]


_CORE = {
    "cake_status_string": (ctypes.c_char_p, [I32]),
    "cake_last_error": (ctypes.c_char_p, []),
    "cake_version": (None, [P, P, P]),
    "cake_partition_create_contiguous": (I32, [P, I64, I32, P]),
    "cake_partition_create_boundaries": (I32, [P, I64, I32, P, P]),
    "cake_partition_create_zigzag": (I32, [P, I64, I32, P]),
    "cake_partition_create_ranges": (I32, [P, I64, I32, P, P, P]),
    "cake_partition_destroy": (None, [P]),
    "cake_partition_num_ranks": (I32, [P]),
    "cake_partition_total_rows": (I64, [P]),
    "cake_partition_num_seqs": (I64, [P]),
    "cake_partition_local_rows": (I32, [P, I32, P]),
    "cake_plan_create": (I32, [P, I32, P]),
    "cake_plan_destroy": (None, [P]),
    "cake_plan_local_rows": (I64, [P]),
    "cake_plan_num_fragments": (I64, [P]),
    "cake_plan_fragment": (I32, [P, I64, P]),
    "cake_plan_pool_rows": (I64, [P]),
    # (plan, n, channels, x, w, params, history, y, options)
    "cake_cpu_forward": (I32, [P, I32, P, P, P, P, P, P, P]),
    # (plan, n, channels, x, w, params, history, dy, future, dx, dw, options)
    "cake_cpu_backward": (I32, [P, I32, P, P, P, P, P, P, P, P, P, P]),
    # (cu_seqlens, num_seqs, n, channels, x, w, params, y, options)
    "cake_cpu_forward_single_rank": (I32, [P, I64, I32, P, P, P, P, P, P]),
    # (cu_seqlens, num_seqs, n, channels, x, w, params, dy, dx, dw, options)
    "cake_cpu_backward_single_rank": (I32, [P, I64, I32, P, P, P, P, P, P, P, P]),
    "cake_ctx_create": (I32, [P, I32, ctypes.POINTER(Transport), ctypes.POINTER(CtxOptions), P]),
    "cake_ctx_destroy": (None, [P]),
    "cake_ctx_local_rows": (I64, [P]),
    "cake_ctx_pool_rows": (I64, [P]),
    "cake_ctx_get_stats": (I32, [P, ctypes.POINTER(CtxStats)]),
    # (ctx, channels, x, w, params, y, history, handle)
    "cake_forward": (I32, [P, I64, P, P, P, P, P, P]),
    # (ctx, channels, x, w, params, history, dy, dx, dw)
    "cake_backward": (I32, [P, I64, P, P, P, P, P, P, P]),
    # (ctx, n, channels, x, w, params, y, history, handle)
    "cake_forward_multi": (I32, [P, I32, P, P, P, P, P, P, P]),
    # (ctx, n, channels, x, w, params, history, dy, dx, dw)
    "cake_backward_multi": (I32, [P, I32, P, P, P, P, P, P, P, P]),
    "cake_recompute_handle_create": (I32, [P]),
    "cake_recompute_handle_destroy": (None, [P]),
    "cake_recompute_handle_contains": (I32, [P, ctypes.c_char_p]),
    "cake_recompute_handle_set": (I32, [P, ctypes.c_char_p, P, ctypes.c_size_t]),
    "cake_recompute_handle_get": (I32, [P, ctypes.c_char_p, P, P]),
    "cake_recompute_handle_erase": (I32, [P, ctypes.c_char_p]),
}

_CUDA = {
    "cake_cuda_cooperative_supported": (I32, []),
    # (ctx, n, channels, params, backward, &bytes)
    "cake_ctx_cuda_workspace_size": (I32, [P, I32, P, P, I32, P]),
    # (ctx, channels, x, w, params, y, history, handle, cooperative, workspace, bytes, stream)
    "cake_forward_cuda": (I32, [P, I64, P, P, P, P, P, P, I32, P, ctypes.c_size_t, P]),
    # (ctx, channels, x, w, params, history, dy, dx, dw, cooperative, workspace, bytes, stream)
    "cake_backward_cuda": (I32, [P, I64, P, P, P, P, P, P, P, I32, P, ctypes.c_size_t, P]),
    # (ctx, n, channels, x, w, params, y, history, handle, cooperative, workspace, bytes,
    #  stream)
    "cake_forward_multi_cuda": (I32, [P, I32, P, P, P, P, P, P, P, I32, P, ctypes.c_size_t,
                                      P]),
    # (ctx, n, channels, x, w, params, history, dy, dx, dw, cooperative, workspace, bytes,
    #  stream)
    "cake_backward_multi_cuda": (I32, [P, I32, P, P, P, P, P, P, P, P, I32, P,
                                       ctypes.c_size_t, P]),
}

VERSION_MAJOR = 1  # the C API this package is written for (cake.h's CAKE_VERSION_MAJOR)


class Library:
    """The loaded C library: `.c` is the ctypes handle, `.path` its file, `.has_cuda` whether it
    holds the GPU entry points."""

    def __init__(self, path):
        self.path = path
        self.c = ctypes.CDLL(path)
        self.c.cake_version.restype, self.c.cake_version.argtypes = None, [P, P, P]
        if self.version()[0] != VERSION_MAJOR:
            raise OSError(f"its C API is version {'.'.join(map(str, self.version()))}; this "
                          f"package needs {VERSION_MAJOR}.x (rebuild the library from this "
                          f"checkout)")
        for name, (restype, argtypes) in _CORE.items():
            fn = getattr(self.c, name)
            fn.restype, fn.argtypes = restype, argtypes
        self.has_cuda = hasattr(self.c, "cake_forward_multi_cuda")
        if self.has_cuda:
            for name, (restype, argtypes) in _CUDA.items():
                fn = getattr(self.c, name)
                fn.restype, fn.argtypes = restype, argtypes

    def last_error(self):
        return self.c.cake_last_error().decode("utf-8", "replace")

    def status_string(self, status):
        return self.c.cake_status_string(status).decode("utf-8", "replace")

    def version(self):
        v = [ctypes.c_int(), ctypes.c_int(), ctypes.c_int()]
        self.c.cake_version(*[ctypes.byref(x) for x in v])
        return tuple(x.value for x in v)


class CakeError(RuntimeError):
    """A failure the C library reported (other than a bad argument, which is a ValueError)."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def error_for(lib, status, message=None):
    """The exception for a failed C call: ValueError for CAKE_ERROR_INVALID_ARGUMENT, else
    CakeError (a RuntimeError) carrying the status."""
    text = message if message is not None else lib.last_error()
    if not text:
        text = f"cake: {lib.status_string(status)}"
    if status == ERROR_INVALID_ARGUMENT:
        return ValueError(text)
    return CakeError(f"{text} [{lib.status_string(status)}]", status)


def check(status, lib=None):
    """Raises the error of a failed C call (read on this thread, right after the call)."""
    if status != SUCCESS:
        lib = lib or get()
        raise error_for(lib, status)


_lock = threading.Lock()
_library = None


def _cuda_available():
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # torch missing or broken: the CPU library is the safe choice
        return False


def _candidates():
    env = os.environ.get("CAKE_LIBRARY")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    cuda, cpu = os.path.join(here, "libcake_cuda.so"), os.path.join(here, "libcake.so")
    order = [cuda, cpu] if _cuda_available() else [cpu, cuda]
    return [p for p in order if os.path.exists(p)], False


def get():
    """The C library, loaded on first use."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            paths, from_env = _candidates()
            if not paths:
                raise ImportError(
                    "cake: the C library was not found next to the package "
                    f"({os.path.dirname(os.path.abspath(__file__))}); install the package with "
                    "`pip install .` from the repository, or set CAKE_LIBRARY to a built "
                    "libcake.so or libcake_cuda.so")
            try:
                _library = Library(paths[0])
            except OSError as e:
                where = "CAKE_LIBRARY" if from_env else "the package"
                raise ImportError(f"cake: cannot load {paths[0]} (from {where}): {e}") from e
    return _library


def pointer_array(pointers):
    """A C array of void pointers (the `const T *const *` arguments)."""
    return (P * len(pointers))(*pointers)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


def int64_array(values):
    """A C int64_t array; every value must already be checked to fit (check_int64)."""
    return (I64 * len(values))(*values)


def check_int64(value, name):
    """`value` (a Python int) as it is, or ValueError naming `name` when it does not fit an
    int64 (ctypes would silently keep its low 64 bits)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name}: {value} does not fit in int64 (expected {INT64_MIN} .. "
                         f"{INT64_MAX})")
    return value
