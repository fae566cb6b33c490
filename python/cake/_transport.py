"""The cake_transport of a context over a torch.distributed process group.

Every exchange the C library asks for is posted as ONE `dist.batch_isend_irecv` call (all its
receives and sends as point-to-point operations), then waited for:

* ``exchange`` (host memory): the C buffers are wrapped as uint8 CPU tensors without a copy. A
  group whose only backend is NCCL gets them staged through device tensors.
* ``exchange_device`` (device memory, only for groups with an NCCL backend): the C buffers are
  wrapped as uint8 CUDA tensors (``__cuda_array_interface__``) and the operations run on the
  stream the C library passes, so the exchange is ordered with its pack and assemble kernels.
  Without it (gloo), the C library stages GPU messages through pinned host memory and calls
  ``exchange``.

Cake's peers are group ranks; P2POp wants global ranks, so they are mapped once. Exceptions
never cross into C: the callback keeps the exception, returns CAKE_ERROR_COMMUNICATION (or
CAKE_ERROR_TIMEOUT), and the context raises it once the C call has returned.
"""
import ctypes
import datetime
import math
import time
import weakref

import torch

from . import _lib

try:
    import torch.distributed as dist
except ImportError:  # a torch built without distributed support: single-process contexts only
    dist = None


def _host_tensor(address, nbytes):
    """A uint8 CPU tensor over `nbytes` bytes of C memory (no copy)."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    buffer = (ctypes.c_uint8 * nbytes).from_address(address)
    return torch.frombuffer(buffer, dtype=torch.uint8)


class _DeviceBuffer:
    """Device memory of the C library, seen by torch.as_tensor through the CUDA array interface."""

    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2, "strides": None}


def _device_tensor(address, nbytes, device):
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8, device=device)
    return torch.as_tensor(_DeviceBuffer(address, nbytes), device=device)


def _limited(timeout):
    """Whether an exchange timeout is a limit (> 0 and finite; 0 and inf mean none)."""
    return 0 < timeout < math.inf


def _is_timeout(exc):
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


class _Timeout(Exception):
    pass


def _weak_method(obj, name):
    """obj.<name>(...) through a weak reference to obj (a communication error once obj is gone,
    which a live context never sees: it holds its transport)."""
    ref = weakref.ref(obj)

    def call(*args):
        target = ref()
        return _lib.ERROR_COMMUNICATION if target is None else getattr(target, name)(*args)
    return call


class TorchTransport:
    """Callbacks for one context. `group` None: a single process, which never exchanges."""

    def __init__(self, group):
        self.group = group
        self.error = None  # the exception a callback caught, raised after the C call returns
        self.size = 1
        self.device_exchange = False
        self.host_via_device = False
        self._await_release = True  # let_go after host exchanges (until it once times out)
        if group is not None:
            self.size = dist.get_world_size(group)
            self.global_ranks = [_global_rank(group, r) for r in range(self.size)]
            backend = str(dist.get_backend(group)).lower()
            # "nccl", "gloo", or a per-device list such as "cpu:gloo,cuda:nccl"
            self.device_exchange = "nccl" in backend
            self.host_via_device = "nccl" in backend and "gloo" not in backend and \
                "mpi" not in backend
        if self.device_exchange and self.size > 1 and torch.cuda.is_available():
            # NCCL makes a group's communicator on its first collective, which every rank must
            # join; an exchange may involve only some ranks (those with halo rows to move), so
            # make it now, while every rank is building its context.
            device = torch.device("cuda", torch.cuda.current_device())
            dist.all_reduce(torch.zeros(1, device=device), group=group)
        # The ctypes objects must live as long as the context: C keeps their addresses. They
        # reach self weakly, so that dropping the transport frees it (and lets go of the group)
        # at once, not at the collector's next pass.
        self._exchange = _lib.EXCHANGE(_weak_method(self, "_on_exchange"))
        self._exchange_device = _lib.EXCHANGE_DEVICE(_weak_method(self, "_on_exchange_device"))
        self.struct = _lib.Transport()
        self.struct.exchange = self._exchange
        if self.device_exchange:
            self.struct.exchange_device = self._exchange_device

    def take_error(self):
        error, self.error = self.error, None
        return error

    # ---- the callbacks (never raise) ---------------------------------------------------------

    def _on_exchange(self, state, tag, sends, num_sends, receives, num_receives, timeout):
        try:
            if self.host_via_device:
                self._host_through_device(tag, sends, num_sends, receives, num_receives, timeout)
            else:
                ops = self._ops(tag, sends, num_sends, receives, num_receives,
                                lambda t: _host_tensor(t.data, t.bytes))
                self._run(ops, timeout)
                # (host operations are complete here; a backend whose works keep their tensors
                # longer is not waited for again)
                if self._await_release and not let_go([op.tensor for op in ops]):
                    self._await_release = False
            return _lib.SUCCESS
        except BaseException as e:  # noqa: B036 (nothing may unwind through C)
            return self._failed(e, timeout)

    def _on_exchange_device(self, state, tag, sends, num_sends, receives, num_receives, timeout,
                            stream):
        try:
            device = torch.device("cuda", torch.cuda.current_device())
            ext = torch.cuda.ExternalStream(stream, device=device) if stream else \
                torch.cuda.default_stream(device)
            with torch.cuda.stream(ext):
                ops = self._ops(tag, sends, num_sends, receives, num_receives,
                                lambda t: _device_tensor(t.data, t.bytes, device))
                self._run(ops, 0.0)  # makes `ext` wait for the operations; the host does not
                if _limited(timeout):
                    self._wait_stream(ext, timeout)
            return _lib.SUCCESS
        except BaseException as e:  # noqa: B036
            return self._failed(e, timeout)

    # ---- helpers -----------------------------------------------------------------------------

    def _failed(self, exc, timeout):
        self.error = exc
        if isinstance(exc, _Timeout) or (_limited(timeout) and _is_timeout(exc)):
            return _lib.ERROR_TIMEOUT
        return _lib.ERROR_COMMUNICATION

    def _check_peer(self, peer):
        if not 0 <= peer < self.size:
            raise RuntimeError(f"cake asked for peer {peer}, outside the group of {self.size}")

    def _ops(self, tag, sends, num_sends, receives, num_receives, wrap):
        if self.group is None:
            raise RuntimeError("a single-process context was asked to exchange messages")
        ops = []
        for i in range(num_receives):  # receives first, then sends: one group either way
            t = receives[i]
            self._check_peer(t.peer)
            ops.append(dist.P2POp(dist.irecv, wrap(t), self.global_ranks[t.peer], self.group,
                                  tag))
        for i in range(num_sends):
            t = sends[i]
            self._check_peer(t.peer)
            ops.append(dist.P2POp(dist.isend, wrap(t), self.global_ranks[t.peer], self.group,
                                  tag))
        return ops

    def _run(self, ops, timeout):
        """One coalesced set of point-to-point operations, then a wait for all of them."""
        if not ops:
            return
        works = dist.batch_isend_irecv(ops)
        deadline = time.monotonic() + timeout
        for work in works or []:
            if _limited(timeout):
                left = max(deadline - time.monotonic(), 1e-3)
                work.wait(datetime.timedelta(seconds=left))
            else:
                work.wait()

    @staticmethod
    def _wait_stream(stream, timeout):
        """Waits on the host for the work enqueued on `stream`, at most `timeout` seconds."""
        event = torch.cuda.Event()
        event.record(stream)
        deadline = time.monotonic() + timeout
        while not event.query():
            if time.monotonic() > deadline:
                raise _Timeout(f"exchange: not complete after {timeout:g} s (a peer did not "
                               "make the same call, or is late)")
            time.sleep(1e-4)

    def _host_through_device(self, tag, sends, num_sends, receives, num_receives, timeout):
        """Host messages over an NCCL-only group (check mode's fingerprints): through copies."""
        device = torch.device("cuda", torch.cuda.current_device())
        ops = []
        recv_dev = []
        for i in range(num_receives):
            t = receives[i]
            self._check_peer(t.peer)
            buf = torch.empty(t.bytes, dtype=torch.uint8, device=device)
            recv_dev.append((_host_tensor(t.data, t.bytes), buf))
            ops.append(dist.P2POp(dist.irecv, buf, self.global_ranks[t.peer], self.group, tag))
        for i in range(num_sends):
            t = sends[i]
            self._check_peer(t.peer)
            buf = _host_tensor(t.data, t.bytes).to(device)
            ops.append(dist.P2POp(dist.isend, buf, self.global_ranks[t.peer], self.group, tag))
        self._run(ops, 0.0)
        stream = torch.cuda.current_stream(device)
        if _limited(timeout):
            self._wait_stream(stream, timeout)
        for host, buf in recv_dev:
            host.copy_(buf)  # synchronous: waits for the stream
        stream.synchronize()


def let_go(tensors, seconds=0.05):
    """Waits (at most `seconds`: microseconds in practice) until no one but Python holds `tensors`,
    whose operations have completed; False if the time ran out. A gloo worker thread drops its
    work's tensors just after waking the waiter; if Python has let go of a tensor first, the
    worker must take the GIL to free it, and when that happens while the interpreter shuts down
    (a program that ends right after its last communication), Python ends the thread and the
    process dies with std::terminate ("terminate called without an active exception", seen with
    torch 2.11 and 2.15 on gloo). Waiting here, while Python still holds them, leaves the worker
    nothing to free that needs the GIL."""
    deadline = None
    for t in tensors:
        while t._use_count() > 1:  # (this reference is Python's own)
            now = time.monotonic()
            if deadline is None:
                deadline = now + seconds
            elif now > deadline:
                return False
            time.sleep(0)
    return True


def _global_rank(group, rank):
    if group is dist.GroupMember.WORLD:
        return rank
    get = getattr(dist, "get_global_rank", None)
    if get is None:
        from torch.distributed import distributed_c10d as c10d
        get = c10d._get_global_rank
    return get(group, rank)
