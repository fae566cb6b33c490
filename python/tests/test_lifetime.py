"""Objects the garbage collector frees: contexts and handles live in reference cycles (their
tokens, _registry.py), so the cyclic collector closes them whenever it runs, a CUDA graph capture
included, where freeing device memory (cudaFree) would invalidate the capture. A collection
during a capture keeps the object and closes it at the next forward call after it."""
import gc
import weakref

import pytest
import torch

import cake
from cake import _lib
from _problems import Problem, assert_bitwise, cuda_ready

S, C = 12, 16


def _inputs():
    g = torch.Generator().manual_seed(41)
    return torch.randn(S, C, generator=g).to(torch.bfloat16), torch.rand(C, 4, generator=g) - 0.5


@pytest.fixture(autouse=True)
def explicit_collections_only():
    """Collections only where a test asks (gc.collect), so none frees an object early."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()


@pytest.fixture
def closes(monkeypatch):
    """The ids of the contexts and handles closed from now on."""
    seen = []
    for cls in (cake.ContextDetKcp, cake.RecomputeHandleDetKcp):
        original = cls.close

        def spy(self, original=original):
            seen.append(id(self))
            original(self)
        monkeypatch.setattr(cls, "close", spy)
    return seen


def _dropped_in_a_cycle(make, use=None):
    """The id of a fresh object (after use(obj)) referenced only by its own cycle now, and a
    weak reference to it (the collector clears it, also where the object is kept)."""
    obj = make()
    if use is not None:
        use(obj)
    key, ref = id(obj), weakref.ref(obj)
    del obj
    assert ref() is not None  # the token's cycle holds it until a collection
    return key, ref


def _deferred_ids():
    return [id(obj) for obj in _lib._deferred]


@pytest.mark.parametrize("make", [lambda: cake.ContextDetKcp([0, 5, S]), cake.RecomputeHandleDetKcp],
                         ids=["context", "handle"])
def test_collected_during_a_capture_closes_after_it(make, closes, monkeypatch):
    key, ref = _dropped_in_a_cycle(make)
    monkeypatch.setattr(_lib, "_capturing", lambda: True)
    gc.collect()
    assert ref() is None and key not in closes and key in _deferred_ids()
    x, w = _inputs()
    ctx = cake.ContextDetKcp([0, 5, S])
    cake.cake_causal_conv1d_det_kcp(x, w, ctx)  # a call during the capture: still kept
    assert key not in closes and key in _deferred_ids()
    monkeypatch.setattr(_lib, "_capturing", lambda: False)
    cake.cake_causal_conv1d_det_kcp(x, w, ctx)  # the first call after it closes the object
    assert key in closes and not _lib._deferred
    ctx.close()


def test_collected_outside_a_capture_closes_at_once(closes):
    key, ref = _dropped_in_a_cycle(lambda: cake.ContextDetKcp([0, 5, S]))
    gc.collect()
    assert key in closes and ref() is None and not _lib._deferred


@pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and libcake_cuda")
def test_context_collected_inside_a_real_capture(closes):
    """A context that ran on the GPU (device tables, plans) collected inside a CUDA graph
    capture: the capture survives, replays bitwise the eager call, and the context is closed
    after."""
    p = Problem(9700, 1, max_tensors=2)
    xs, ws = [t.cuda() for t in p.xs], [t.cuda() for t in p.ws]
    # a context with device state (plans, halo tables), then dropped
    key, ref = _dropped_in_a_cycle(lambda: cake.ContextDetKcp(p.cu),
                                   lambda c: cake.cake_causal_conv1d_det_multi_kcp(xs, ws, c))
    torch.cuda.synchronize()
    ctx = cake.ContextDetKcp(p.cu)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph asks
        cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx)
    side.synchronize()
    # capture_begin / capture_end as torch.cuda.graph calls them (some torch versions collect
    # garbage on entering it, which would free the old context before the capture)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        graph.capture_begin()
        try:
            static_ys = cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx)
            gc.collect()  # collects the old context here, inside the capture
            kept = key not in closes and key in _deferred_ids()
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    assert kept
    graph.replay()
    eager = cake.cake_causal_conv1d_det_multi_kcp(xs, ws, ctx)  # closes the old context
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(static_ys, eager)):
        assert_bitwise(f"y[{i}]", a, b)
    assert key in closes and not _lib._deferred
    ctx.close()
