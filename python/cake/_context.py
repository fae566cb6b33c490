"""ContextDetKcp: a partition of the packed batch, this rank, and the process group's transport."""
import ctypes
import numbers
import os

import torch

from . import _lib, _registry
from ._transport import TorchTransport, dist

# Contexts whose exchange failed: the transport may still write into their C buffers, so they
# are never freed (a few bytes, against a use after free).
_leaked = []

_NAMED = ("contiguous", "zigzag")

# group=SINGLE_PROCESS (internal): one process holding the whole batch, with no communication,
# whether or not torch.distributed is initialised (cake.ShortConvolution's contexts built from
# cu_seqlens when none is given: the local convolution FLA's module computes).
SINGLE_PROCESS = object()


def _int_list(values, name):
    """Python ints of a sequence or 1-D integer tensor, each checked to fit an int64."""
    if isinstance(values, torch.Tensor):
        if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer tensor, got dtype {values.dtype}")
        if values.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D tensor, got shape {list(values.shape)}")
        values = values.tolist()  # uint64 tensors may hold values past int64
        return [_lib.check_int64(int(v), f"{name}[{i}]") for i, v in enumerate(values)]
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name}: expected a sequence of ints or a 1-D integer tensor, got "
                        f"{type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and v.dim() == 0 and not v.dtype.is_floating_point:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name}[{i}]: expected an int, got {type(v).__name__}")
        out.append(_lib.check_int64(int(v), f"{name}[{i}]"))
    return out


def _default_group():
    """group=None: torch.distributed's default group when it is initialised, else None (one
    process). A process that a launcher started as one of several (WORLD_SIZE > 1) but that
    has not initialised torch.distributed is refused: it would silently run alone."""
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    world = os.environ.get("WORLD_SIZE", "")
    if world.isdigit() and int(world) > 1:
        raise ValueError(f"group: None means torch.distributed's default group, but "
                         f"torch.distributed is not initialised in this process, which its "
                         f"launcher started as one of WORLD_SIZE={world} processes; call "
                         f"torch.distributed.init_process_group() first (a context made now "
                         f"would hold the whole batch and never exchange)")
    return None


class _Spec:
    """What every call of a context with one list of channel counts needs: the C array of
    them, the layout of the history pools in one bf16 buffer (tensor i's [pool_rows, C_i] pool
    at byte offset pool_offsets[i]; each a multiple of 16 bytes, as C_i is of 8; the same with
    or without bias and activation), and the GPU workspace bytes per direction and per call
    variant (activation, bias or not: what the size depends on), filled on first use."""

    __slots__ = ("channel_list", "channels", "pool_elems", "pool_offsets", "workspace")

    def __init__(self, channel_list, pool_rows):
        self.channel_list = channel_list
        self.channels = _lib.int64_array(channel_list)
        self.pool_offsets = []
        elems = 0
        for c in channel_list:
            self.pool_offsets.append(2 * elems)
            elems += pool_rows * c
        self.pool_elems = elems
        self.workspace = {}  # (backward, activation, has bias) -> bytes


def _build_partition(lib, cu, num_ranks, partition):
    """The C partition (a c_void_p) and a short description of it."""
    cu_array = _lib.int64_array(cu)
    num_seqs = len(cu) - 1
    out = ctypes.c_void_p()
    c = lib.c
    if isinstance(partition, str):
        if partition == "contiguous":
            status = c.cake_partition_create_contiguous(cu_array, num_seqs, num_ranks,
                                                        ctypes.byref(out))
        elif partition == "zigzag":
            status = c.cake_partition_create_zigzag(cu_array, num_seqs, num_ranks,
                                                    ctypes.byref(out))
        else:
            raise ValueError(f"partition: expected 'contiguous', 'zigzag', a list of "
                             f"{num_ranks + 1} boundaries or a list of {num_ranks} lists of "
                             f"(start, end) ranges, got {partition!r}")
        _lib.check(status, lib)
        return out, partition
    if isinstance(partition, torch.Tensor) or (
            hasattr(partition, "__len__") and all(
                isinstance(v, numbers.Integral) or
                (isinstance(v, torch.Tensor) and v.dim() == 0) for v in partition)):
        bounds = _int_list(partition, "partition")
        if len(bounds) != num_ranks + 1:
            raise ValueError(f"partition: expected {num_ranks + 1} boundaries (the group's "
                             f"{num_ranks} ranks + 1), got {len(bounds)}")
        _lib.check(c.cake_partition_create_boundaries(cu_array, num_seqs, num_ranks,
                                                      _lib.int64_array(bounds),
                                                      ctypes.byref(out)), lib)
        return out, f"boundaries {bounds}"
    if not hasattr(partition, "__len__"):
        raise TypeError(f"partition: expected a str or a list, got {type(partition).__name__}")
    if len(partition) != num_ranks:
        raise ValueError(f"partition: expected {num_ranks} lists of (start, end) ranges (one per "
                         f"rank of the group), got {len(partition)}")
    counts, flat = [], []
    for r, ranges in enumerate(partition):
        if isinstance(ranges, (str, bytes)) or not hasattr(ranges, "__len__"):
            raise TypeError(f"partition[{r}]: expected a list of (start, end) pairs, got "
                            f"{type(ranges).__name__}")
        counts.append(len(ranges))
        for k, pair in enumerate(ranges):
            pair = _int_list(pair, f"partition[{r}][{k}]")
            if len(pair) != 2:
                raise ValueError(f"partition[{r}][{k}]: expected a (start, end) pair, got "
                                 f"{len(pair)} values")
            flat.append(_lib.Range(pair[0], pair[1]))
    ranges_array = (_lib.Range * max(len(flat), 1))(*flat)
    _lib.check(c.cake_partition_create_ranges(cu_array, num_seqs, num_ranks,
                                              _lib.int64_array(counts), ranges_array,
                                              ctypes.byref(out)), lib)
    return out, "explicit ranges"


class ContextDetKcp(_lib.Owned):
    """The communicator of a context-parallel group plus a partition of the packed batch.

    Build it the same way on every rank of `group`, once, outside the training step (it plans
    this rank's halo exchange without communicating), and pass it to
    :func:`cake_causal_conv1d_det_kcp` and :func:`cake_causal_conv1d_det_multi_kcp`.

    Parameters
    ----------
    cu_seqlens : sequence of int or torch.Tensor
        The *global* packed batch: N + 1 int64 offsets, ``cu_seqlens[0] = 0``, non-decreasing,
        ``T = cu_seqlens[N]`` tokens in all. Empty sequences (repeated offsets) are allowed. A
        tensor may live on any device (it is read once, here).
    group : torch.distributed.ProcessGroup, optional
        The context-parallel group; its ranks are the partition's ranks (group ranks, not global
        ranks). ``None`` (the default), as everywhere in torch.distributed, means the default
        process group when torch.distributed is initialised; when it is not, a single process
        holding the whole batch, with no communication (but ValueError in a process that its
        launcher started as one of several, ``WORLD_SIZE > 1``: it forgot
        ``init_process_group``). An explicit group needs torch.distributed initialised. CPU
        tensors exchange over gloo; CUDA tensors over NCCL (device buffers on the current
        stream) when the group has an NCCL backend, else through pinned host memory and the
        group's CPU backend. With an NCCL backend and more than one rank, building the context
        runs one all_reduce on the current CUDA device (so that NCCL's communicator exists
        before exchanges that involve only some ranks): call ``torch.cuda.set_device`` first.
        A one-process context inside an initialised program takes a one-rank group
        (``dist.new_group([dist.get_rank()])``).
    partition : str or list, default "contiguous"
        Which global token ranges each rank holds; a rank's local rows are its ranges
        concatenated in order:

        * ``"contiguous"``: an equal split, the first ``T % P`` ranks one row more (uneven
          ``T`` allowed);
        * ``"zigzag"``: 2P chunks, equal up to one row with the longer ones first, rank r
          holding chunks r and 2P-1-r in that order (load-balanced causal CP);
        * a list of P + 1 ints: contiguous with explicit boundaries, rank r holding
          ``[b[r], b[r+1])``;
        * a list of P lists of ``(start, end)`` pairs: explicit ranges per rank, covering
          ``[0, T)`` exactly once together (empty ranges allowed).
    check : bool, optional
        True: before each exchange the ranks compare a fingerprint of the call (entry point,
        tensor count, channel counts, partition rows, call number, handle passed and filled)
        and all fail with the first difference instead of hanging or corrupting. It costs one
        small message per peer per call. False or None: off unless the environment has
        ``CAKE_CHECK=1`` when the context is made.
    timeout_seconds : float, default 0
        > 0: an exchange not complete in this many seconds raises (:class:`cake.CakeError`
        with status ``CAKE_ERROR_TIMEOUT``) and the context refuses further calls; make a new
        process group and context then. ``math.inf``: no limit, whatever the environment says.
        0: ``$CAKE_TIMEOUT_SECONDS`` if set, else no limit (the process group's own timeout
        still applies). A finite limit on a GPU context makes the host wait for each
        exchange (that is how it is enforced); the default does not.
    num_threads : int, default 0
        Threads of the CPU kernels; 0: ``$CAKE_NUM_THREADS``, else every online processor.
        At most 2**31 - 1 (a C int). Never changes results.

    Attributes
    ----------
    rank, world_size : int
        This process's rank in `group` and the group's size (0 and 1 without a group).
    local_rows : int
        S_local, the rows every x of this rank must have.
    pool_rows : int
        Rows of each history pool (3 per fragment of this rank).
    total_rows, num_seqs : int
        T and N of `cu_seqlens`.

    Notes
    -----
    Not checked, by design (it would cost a collective): that every rank built its context from
    the same `cu_seqlens` and `partition`, and that every rank calls each op once per layer in
    the same order with the same tensor count and channel counts. A mismatch hangs the exchange
    or silently corrupts the halo rows, unless `check` is on. The context holds the group but
    never initialises or destroys it. After a failed exchange the context refuses every call.

    Examples
    --------
    >>> dist.init_process_group("gloo")
    >>> ctx = ContextDetKcp(cu_seqlens, partition="zigzag")   # the default group
    >>> x_local = x_global[ctx.global_rows()]      # [ctx.local_rows, C]
    >>> ContextDetKcp([0, 5, 12], partition=[[(6, 12), (0, 6)]]).global_rows().tolist()
    [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5]
    """

    def __init__(self, cu_seqlens, group=None, *, partition="contiguous", check=None,
                 timeout_seconds=0.0, num_threads=0):
        self._ptr = None
        self._token = None
        self._closed = True
        lib = _lib.get()
        self._lib = lib
        cu = _int_list(cu_seqlens, "cu_seqlens")
        if len(cu) < 1:
            raise ValueError("cu_seqlens: expected at least 1 offset (N + 1 for N sequences), "
                             "got 0")
        if group is SINGLE_PROCESS:
            group = None
        elif group is None:
            group = _default_group()
        elif dist is None or not dist.is_available() or not dist.is_initialized():
            raise ValueError("group: torch.distributed is not initialised; call "
                             "init_process_group first, or pass group=None for one process")
        if group is not None:
            rank = dist.get_rank(group)
            if rank < 0:
                raise ValueError("group: this process is not a member of the group")
        else:
            rank = 0
        if check is not None and not isinstance(check, bool):
            raise TypeError(f"check: expected a bool or None, got {type(check).__name__}")
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, numbers.Real):
            raise TypeError(f"timeout_seconds: expected a number, got "
                            f"{type(timeout_seconds).__name__}")
        if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral):
            raise TypeError(f"num_threads: expected an int, got {type(num_threads).__name__}")
        if not 0 <= num_threads <= _lib.INT_MAX:
            raise ValueError(f"num_threads: expected 0 (the default) .. {_lib.INT_MAX} (a C "
                             f"int), got {num_threads}")
        if not timeout_seconds >= 0:  # NaN too
            raise ValueError(f"timeout_seconds: expected >= 0 (0 = default, math.inf = no "
                             f"limit), got {timeout_seconds}")
        transport = TorchTransport(group)
        self._transport = transport
        self.group = group
        self.rank = rank
        self.world_size = transport.size
        self._partition, self.partition = _build_partition(lib, cu, self.world_size, partition)
        self._plans = {}
        self._specs = {}
        options = _lib.CtxOptions(1 if check else 0, float(timeout_seconds),
                                  _lib.CpuOptions(int(num_threads), 0))
        ptr = ctypes.c_void_p()
        _lib.check(lib.c.cake_ctx_create(self._partition, rank, ctypes.byref(transport.struct),
                                         ctypes.byref(options), ctypes.byref(ptr)), lib)
        self._ptr = ptr
        self._broken = False
        self._closed = False
        self.local_rows = int(lib.c.cake_ctx_local_rows(ptr))
        self.pool_rows = int(lib.c.cake_ctx_pool_rows(ptr))
        self.total_rows = int(lib.c.cake_partition_total_rows(self._partition))
        self.num_seqs = int(lib.c.cake_partition_num_seqs(self._partition))
        self._token = _registry.register(self)

    # ---- lifetime ----------------------------------------------------------------------------

    @property
    def _handle(self):
        if self._ptr is None:
            raise ValueError("ctx: this ContextDetKcp was closed")
        return self._ptr

    def close(self):
        """Frees the C context and lets go of the process group (not destroyed: it is the
        caller's). Later calls raise."""
        self._closed = True
        token = getattr(self, "_token", None)
        _registry.unregister(token)
        if token is not None:
            token._cake_object = None  # (the token's cycle: freed now, not by the collector)
        ptr, self._ptr = getattr(self, "_ptr", None), None
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        for plan in getattr(self, "_plans", {}).values():
            lib.c.cake_plan_destroy(plan)
        self._plans = {}
        if ptr is not None and ptr.value:
            if getattr(self, "_broken", False):
                _leaked.append((ptr, self._transport))
            else:
                lib.c.cake_ctx_destroy(ptr)
        # The group goes with the transport: a group still referenced at
        # dist.destroy_process_group() outlives it, and gloo's worker threads with it, into the
        # interpreter's shutdown, where one that then needs the GIL ends the process with
        # std::terminate ("terminate called without an active exception").
        self._transport = None
        part, self._partition = getattr(self, "_partition", None), None
        if part is not None and part.value:
            lib.c.cake_partition_destroy(part)

    def __repr__(self):
        return (f"ContextDetKcp(rank {self.rank} of {self.world_size}, {self.partition}, "
                f"{self.local_rows} of {self.total_rows} rows, {self.num_seqs} sequences)")

    # ---- what the C calls need ---------------------------------------------------------------

    def _spec(self, xs):
        """The _Spec of a call on xs (cached by channel counts)."""
        key = tuple([x.shape[-1] for x in xs])
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = _Spec(list(key), self.pool_rows)
        return spec

    def _cuda_workspace_bytes(self, spec, backward, params=None):
        """Bytes of GPU workspace one call of `spec` with `params` (a _lib.ConvParams or None)
        needs, asked of C once per direction and variant (activation, bias given or not)."""
        key = (backward, 0, False) if params is None else \
            (backward, int(params.activation), bool(params.bias))
        nbytes = spec.workspace.get(key)
        if nbytes is None:
            out = ctypes.c_size_t()
            _lib.check(self._lib.c.cake_ctx_cuda_workspace_size(
                self._handle, len(spec.channel_list), spec.channels,
                None if params is None else ctypes.byref(params), backward,
                ctypes.byref(out)), self._lib)
            nbytes = spec.workspace[key] = int(out.value)
        return nbytes

    def _raise(self, status):
        """The exception of a failed call: the C message, chained to a callback's exception.
        Call right after the C call (the message is per thread)."""
        exc = _lib.error_for(self._lib, status)
        cause = self._transport.take_error() if self._transport is not None else None
        if status in (_lib.ERROR_COMMUNICATION, _lib.ERROR_TIMEOUT):
            self._broken = True
        if cause is not None:
            if not isinstance(cause, Exception):  # KeyboardInterrupt, SystemExit
                raise cause
            message = f"{exc} (from the exchange: {type(cause).__name__}: {cause})"
            exc = ValueError(message) if isinstance(exc, ValueError) else \
                _lib.CakeError(message, status)
            raise exc from cause
        raise exc

    # ---- reports and helpers -----------------------------------------------------------------

    def stats(self):
        """The C context's counters since creation, as a dict: forward_calls, backward_calls,
        exchanges (transport calls, all directions), check_rounds, messages_sent/received,
        rows_sent/received, bytes_sent/received, rows_copied, forwards_from_handle."""
        out = _lib.CtxStats()
        _lib.check(self._lib.c.cake_ctx_get_stats(self._handle, ctypes.byref(out)), self._lib)
        return {name: int(getattr(out, name)) for name in _lib.STATS_FIELDS}

    def _plan(self, rank):
        if rank not in self._plans:
            plan = ctypes.c_void_p()
            _lib.check(self._lib.c.cake_plan_create(self._partition, rank, ctypes.byref(plan)),
                       self._lib)
            self._plans[rank] = plan
        return self._plans[rank]

    def fragments(self, rank=None):
        """`rank`'s fragments (default: this rank) as (local_start, length, global_start)."""
        self._handle
        rank = self.rank if rank is None else int(rank)
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank: expected 0 .. {self.world_size - 1}, got {rank}")
        plan = self._plan(rank)
        out = []
        frag = _lib.Fragment()
        for f in range(self._lib.c.cake_plan_num_fragments(plan)):
            _lib.check(self._lib.c.cake_plan_fragment(plan, f, ctypes.byref(frag)), self._lib)
            out.append((int(frag.local_start), int(frag.length), int(frag.global_start)))
        return out

    def global_rows(self, rank=None):
        """The global row of each local row of `rank` (default: this rank), an int64 CPU
        tensor of its S_local rows: ``x_global[ctx.global_rows()]`` is this rank's x."""
        pieces = [torch.arange(g, g + n, dtype=torch.int64) for _, n, g in self.fragments(rank)]
        return torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.int64)
