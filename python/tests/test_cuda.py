"""CUDA tensors: bitwise the CPU results; launch forms; checkpointing; NCCL and gloo groups."""
import ctypes

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import cake
from _problems import (Problem, assert_bitwise, assert_workers_ok, cuda_ready,
                       rank_reference, run_op)

pytestmark = pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and libcake_cuda")


def _cuda(ts):
    return [t.cuda() for t in ts]


@pytest.mark.parametrize("seed", range(6))
def test_cuda_bitwise_equal_to_cpu(seed):
    p = Problem(300 + seed, 1, max_rows=2000, max_tensors=4)
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_op(ctx, p.xs, p.ws, p.dys, True)
    for multi in (True, False):
        for coop in (None, True, False):
            gpu = run_op(ctx, _cuda(p.xs), _cuda(p.ws), _cuda(p.dys), multi, cooperative=coop)
            for j, name in enumerate(("y", "dx", "dw")):
                for i in range(len(p.channels)):
                    assert gpu[j][i].is_cuda
                    assert_bitwise(f"{name}[{i}] multi={multi} cooperative={coop} {p}",
                                   gpu[j][i], cpu[j][i])


def test_cuda_large_rows_and_batched_shape():
    p = Problem(400, 1, max_rows=1, max_tensors=1, cu=[0, 70000, 70001, 130000])
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_op(ctx, p.xs, p.ws, p.dys, False)
    gpu = run_op(ctx, [x[None].cuda() for x in p.xs], _cuda(p.ws),
                 [dy[None].cuda() for dy in p.dys], False)
    assert gpu[0][0].shape == (1,) + tuple(cpu[0][0].shape)
    assert_bitwise("y", gpu[0][0][0], cpu[0][0])
    assert_bitwise("dx", gpu[1][0][0], cpu[1][0])
    assert_bitwise("dw", gpu[2][0], cpu[2][0])


def test_cuda_on_a_side_stream():
    p = Problem(410, 1)
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_op(ctx, p.xs, p.ws, p.dys, True)
    stream = torch.cuda.Stream()
    xs, ws, dys = _cuda(p.xs), _cuda(p.ws), _cuda(p.dys)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gpu = run_op(ctx, xs, ws, dys, True)
    torch.cuda.current_stream().wait_stream(stream)
    for j in range(3):
        for i in range(len(p.channels)):
            assert_bitwise("side stream", gpu[j][i], cpu[j][i])


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_cuda_checkpoint_with_handle(use_reentrant):
    p = Problem(420, 1, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_op(ctx, p.xs, p.ws, p.dys, True)
    handle = cake.RecomputeHandleDetKcp()
    xs = [x.cuda().requires_grad_() for x in p.xs]
    ws = [w.cuda().requires_grad_() for w in p.ws]
    n = len(xs)
    before = ctx.stats()["forwards_from_handle"]
    ys = checkpoint(lambda *t: cake.cake_causal_conv1d_det_multi_kcp(
        list(t[:n]), list(t[n:]), ctx, recompute_handle=handle), *xs, *ws,
        use_reentrant=use_reentrant)
    torch.autograd.backward(list(ys), _cuda(p.dys))
    assert ctx.stats()["forwards_from_handle"] == before + 1
    for i in range(n):
        assert_bitwise("y", ys[i], cpu[0][i])
        assert_bitwise("dx", xs[i].grad, cpu[1][i])
        assert_bitwise("dw", ws[i].grad, cpu[2][i])
    # the handle holds device pools now: a CPU call with it is refused
    with pytest.raises(ValueError, match="holds pools in device memory"):
        cake.cake_causal_conv1d_det_multi_kcp(p.xs, p.ws, ctx, recompute_handle=handle)


def test_cuda_bad_input():
    ctx = cake.ContextDetKcp([0, 16])
    x = torch.zeros(16, 8, dtype=torch.bfloat16, device="cuda")
    w = torch.zeros(8, 4, device="cuda")
    with pytest.raises(ValueError, match=r"w: expected device cuda:0 \(the device of x\), got "
                                         r"cpu"):
        cake.cake_causal_conv1d_det_kcp(x, w.cpu(), ctx)
    with pytest.raises(ValueError, match=r"xs\[1\]: expected device cuda:0"):
        cake.cake_causal_conv1d_det_multi_kcp([x, x.cpu()], [w, w.cpu()], ctx)
    odd = torch.zeros(16 * 8 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(16, 8)
    with pytest.raises(ValueError, match="x: expected a 16-byte aligned data pointer"):
        cake.cake_causal_conv1d_det_kcp(odd, w, ctx)


def test_device_exchange_callback_loopback(monkeypatch):
    """The exchange_device callback wraps C device buffers as CUDA tensors and runs one
    batch_isend_irecv on the stream it is given (a stand-in group sends to itself)."""
    from cake import _lib, _transport

    calls = []

    def loopback(ops):
        calls.append(torch.cuda.current_stream().cuda_stream)
        sends = [op.tensor for op in ops if op.op is torch.distributed.isend]
        recvs = [op.tensor for op in ops if op.op is torch.distributed.irecv]
        for s, r in zip(sends, recvs):
            r.copy_(s)
        return []

    class Op:  # P2POp would want a real group
        def __init__(self, op, tensor, peer, group, tag):
            self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag

    monkeypatch.setattr(torch.distributed, "batch_isend_irecv", loopback)
    monkeypatch.setattr(torch.distributed, "P2POp", Op)
    transport = _transport.TorchTransport(None)
    transport.group, transport.size, transport.global_ranks = object(), 1, [0]
    src = torch.arange(64, dtype=torch.uint8, device="cuda")
    dst = torch.zeros(64, dtype=torch.uint8, device="cuda")
    sends = (_lib.Transfer * 1)(_lib.Transfer(0, src.data_ptr(), 64))
    receives = (_lib.Transfer * 1)(_lib.Transfer(0, dst.data_ptr(), 64))
    stream = torch.cuda.Stream()
    status = transport._on_exchange_device(None, 11, sends, 1, receives, 1, 1.0,
                                           ctypes.c_void_p(stream.cuda_stream).value)
    assert status == _lib.SUCCESS, transport.take_error()
    torch.cuda.synchronize()
    assert calls == [stream.cuda_stream]
    assert torch.equal(dst, src)


def _check_against_cpu(p, res, r):
    """A rank's GPU results: y and dx bitwise the single-process CPU run at its rows (local
    order: a partition may permute them), dw bitwise its own CPU contribution."""
    ys, dxs, _ = run_op(cake.ContextDetKcp(p.cu), p.xs, p.ws, p.dys, True)
    rows, _, _, dws = rank_reference(p, r)
    assert torch.equal(res["rows"], rows)
    for kind in ("multi", "single"):
        for i in range(len(p.channels)):
            where = f"{kind} [{i}] rank {r} {p}"
            assert_bitwise(f"y{where}", res[kind][0][i], ys[i][rows])
            assert_bitwise(f"dx{where}", res[kind][1][i], dxs[i][rows])
            assert_bitwise(f"dw{where}", res[kind][2][i], dws[i])


def test_nccl_group_world_size_1(tmp_path):
    from _workers import spawn
    seeds = [500, 501, 502]
    results = spawn("nccl", 1, tmp_path, seeds, backend="nccl")
    assert_workers_ok(results)
    for k, seed in enumerate(seeds):
        _check_against_cpu(Problem(seed, 1), results[0][k], 0)


@pytest.mark.parametrize("world_size", [2, 3])
def test_gloo_group_cuda_tensors_one_gpu(world_size, tmp_path):
    """Several processes on one GPU over gloo: the GPU calls stage messages through pinned host
    memory and the host exchange; results bitwise the single-process CPU run."""
    from _workers import spawn
    seeds = [600 + 10 * world_size + s for s in range(3)]
    results = spawn("match", world_size, tmp_path, seeds, "cuda")
    assert_workers_ok(results)
    for k, seed in enumerate(seeds):
        p = Problem(seed, world_size)
        for r in range(world_size):
            _check_against_cpu(p, results[r][k], r)
