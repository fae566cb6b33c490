"""RecomputeHandleDetKcp: the C library's recompute handle (a small keyed store)."""
import ctypes

from . import _lib, _registry


def _key(key):
    if not isinstance(key, str):
        raise TypeError(f"key: expected a str, got {type(key).__name__}")
    if "\0" in key:
        raise ValueError("key: expected a string without NUL characters")
    return key.encode("utf-8")


class RecomputeHandleDetKcp(_lib.Owned):
    """A keyed store for one call and micro-step, so that activation checkpointing's recompute
    of the forward issues no collective.

    Notes
    -----
    Create one per call of :func:`cake_causal_conv1d_det_kcp` or
    :func:`cake_causal_conv1d_det_multi_kcp` and per micro-step, *outside* the outermost
    ``torch.utils.checkpoint`` region, and pass it as ``recompute_handle``. The first forward
    that sees its ``"conv"`` entry empty exchanges the history rows and stores the history
    pools there; a later forward with the same handle (the recompute inside the backward) reads
    them back and issues no collective. The backward still exchanges once.

    Rules, checked by the C library (misuse raises ValueError with its message):

    * the ``"conv"`` entry serves one single call or one multi call, never both, with the same
      tensor count, channel counts, context (partition and rank) and memory (host or device);
    * ``"conv"`` is reserved: :meth:`set` and :meth:`get` refuse it, :meth:`erase` empties it.

    Not checked: that every rank passes a handle or none (a mismatch hangs or corrupts, unless
    the context's check mode is on), and that a handle filled in an earlier micro-step is not
    reused with new inputs (the stored history rows would silently be taken for the new ones).

    Other keys (for example ``"kda"``, the state of the layer's attention op) hold any bytes
    and do not interfere with ``"conv"``.

    The handle frees its memory when it is garbage collected, or at :meth:`close`; it is a
    context manager. On the GPU its pools are freed stream-ordered (no device synchronisation).

    Under ``torch.compile`` pass the handle in from outside the compiled function (a new one
    every micro-step does not recompile: the compiled graph sees the handle's token, a small
    CPU tensor, not the object). In a step captured as a CUDA graph, create and close the handle
    inside the captured step, as in eager training: the graph then allocates and frees its
    pools on every replay.

    Examples
    --------
    >>> handle = RecomputeHandleDetKcp()          # per layer and micro-step
    >>> out = checkpoint(layer, x, ctx, handle, use_reentrant=False)
    >>> handle.set("kda", state_bytes)            # the attention op's own entry
    >>> loss(out).backward()                      # the recompute reads "conv": no collective
    >>> handle.close()
    """

    def __init__(self):
        self._ptr = None
        self._token = None
        self._closed = True
        lib = _lib.get()
        self._lib = lib
        ptr = ctypes.c_void_p()
        _lib.check(lib.c.cake_recompute_handle_create(ctypes.byref(ptr)), lib)
        self._ptr = ptr
        self._closed = False
        self._token = _registry.register(self)

    @property
    def _handle(self):
        if self._ptr is None:
            raise ValueError("recompute_handle: this RecomputeHandleDetKcp was closed")
        return self._ptr

    def close(self):
        """Frees the handle (its pools included); later use raises ValueError."""
        self._closed = True
        _registry.unregister(getattr(self, "_token", None))
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None and ptr.value:
            self._lib.c.cake_recompute_handle_destroy(ptr)

    def contains(self, key):
        """True if `key` (a str; ``"conv"`` included) holds an entry."""
        return bool(self._lib.c.cake_recompute_handle_contains(self._handle, _key(key)))

    __contains__ = contains

    def set(self, key, data):
        """Stores a copy of `data` (bytes-like) under `key`, replacing an earlier entry."""
        view = memoryview(data).cast("B")
        buf = (ctypes.c_uint8 * len(view)).from_buffer_copy(view) if len(view) else None
        _lib.check(self._lib.c.cake_recompute_handle_set(
            self._handle, _key(key), ctypes.cast(buf, ctypes.c_void_p) if buf else None,
            len(view)), self._lib)

    def get(self, key):
        """The bytes stored under `key` (a copy); ValueError if there is none."""
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _lib.check(self._lib.c.cake_recompute_handle_get(
            self._handle, _key(key), ctypes.byref(data), ctypes.byref(size)), self._lib)
        return ctypes.string_at(data, size.value) if size.value else b""

    def erase(self, key):
        """Removes `key`'s entry; erasing ``"conv"`` empties it (the next forward exchanges)."""
        _lib.check(self._lib.c.cake_recompute_handle_erase(self._handle, _key(key)), self._lib)

    def __repr__(self):
        state = "closed" if self._ptr is None else \
            ("conv filled" if self.contains("conv") else "conv empty")
        return f"RecomputeHandleDetKcp({state})"
