"""Bias and SiLU on CUDA tensors: bitwise the CPU in every variant and launch form, single and
multi; checkpoint with a handle; a captured CUDA graph step replays bitwise the eager one;
several processes on one GPU over gloo; bad bias pointers. Skipped without a GPU."""
import pytest
import torch
from torch.utils.checkpoint import checkpoint

import cake
from cake.causal_conv1d_det_train_kcp import conv_det_kcp
from _problems import (VARIANTS, Problem, assert_all_bitwise, assert_bitwise, assert_workers_ok,
                       cuda_ready, make_biases, run_variant, variant_id, warm_up_for_capture)

pytestmark = pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and libcake_cuda")


def _cuda(ts):
    return None if ts is None else [t.cuda() for t in ts]


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
@pytest.mark.parametrize("seed", range(3))
def test_cuda_bitwise_equal_to_cpu(variant, seed):
    act, with_bias = variant
    p = Problem(9500 + seed, 1, max_rows=3000, max_tensors=4)
    bs = make_biases(p) if with_bias else None
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_variant(ctx, p.xs, p.ws, bs, p.dys, True, act)
    for multi in (True, False):
        for coop in (None, True, False):
            gpu = run_variant(ctx, _cuda(p.xs), _cuda(p.ws), _cuda(bs), _cuda(p.dys), multi, act,
                              cooperative=coop)
            assert all(t.is_cuda for t in gpu[0] + gpu[3])
            assert_all_bitwise(gpu, cpu, f"{act} bias={with_bias} multi={multi} "
                                         f"cooperative={coop} {p}")


def test_cuda_large_rows_bias_silu():
    p = Problem(9600, 1, max_rows=1, max_tensors=1, cu=[0, 70000, 70001, 130000])
    bs = make_biases(p)
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_variant(ctx, p.xs, p.ws, bs, p.dys, False, "silu")
    gpu = run_variant(ctx, _cuda(p.xs), _cuda(p.ws), _cuda(bs), _cuda(p.dys), False, "silu")
    assert_all_bitwise(gpu, cpu, "large")


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_cuda_checkpoint_with_handle(use_reentrant):
    p = Problem(9610, 1, max_tensors=3)
    bs = make_biases(p)
    ctx = cake.ContextDetKcp(p.cu)
    cpu = run_variant(ctx, p.xs, p.ws, bs, p.dys, True, "silu")
    handle = cake.RecomputeHandleDetKcp()
    n = len(p.xs)
    leaves = [t.cuda().requires_grad_() for t in p.xs + p.ws + bs]
    before = ctx.stats()["forwards_from_handle"]
    ys = checkpoint(lambda *t: conv_det_kcp(list(t[:n]), list(t[n:2 * n]), ctx,
                                            biases=list(t[2 * n:]), activation="silu",
                                            recompute_handle=handle),
                    *leaves, use_reentrant=use_reentrant)
    torch.autograd.backward(list(ys), _cuda(p.dys))
    assert ctx.stats()["forwards_from_handle"] == before + 1
    got = ([y.detach() for y in ys], [t.grad for t in leaves[:n]],
           [t.grad for t in leaves[n:2 * n]], [t.grad for t in leaves[2 * n:]])
    assert_all_bitwise(got, cpu, "checkpoint")


def test_cuda_graph_step_with_bias_silu():
    """A checkpointed step (forward, recompute from the handle, backward) with bias and SiLU
    captured once and replayed on new data: bitwise the eager step and the CPU."""
    p = Problem(9620, 1, max_rows=3000, max_tensors=3)
    ctx = cake.ContextDetKcp(p.cu)
    n = len(p.xs)
    leaves = [t.cuda().requires_grad_() for t in p.xs + p.ws + make_biases(p)]
    dys = _cuda(p.dys)
    handles = []

    def body(*t):
        ys = conv_det_kcp(list(t[:n]), list(t[n:2 * n]), ctx, biases=list(t[2 * n:]),
                          activation="silu", recompute_handle=handles[0])
        return tuple(torch.relu(y) * 2 for y in ys)

    def step(ts):
        handles[:] = [cake.RecomputeHandleDetKcp()]
        outs = checkpoint(body, *ts, use_reentrant=False)
        torch.autograd.backward(list(outs), dys)
        handles[0].close()
        return outs

    def eager(ts):
        fresh = [t.detach().clone().requires_grad_() for t in ts]
        outs = step(fresh)
        return [o.detach() for o in outs], [t.grad for t in fresh]

    warm_up_for_capture(lambda: step(leaves), leaves)
    for t in leaves:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    before = ctx.stats()
    with torch.cuda.graph(graph):
        static_outs = step(leaves)
    after = ctx.stats()
    assert after["forwards_from_handle"] - before["forwards_from_handle"] == 1
    assert after["exchanges"] == before["exchanges"]
    static_grads = [t.grad for t in leaves]
    g = torch.Generator().manual_seed(9621)
    for k in range(2):
        with torch.no_grad():
            for t in leaves[:n]:
                t.copy_((torch.randn(t.shape, generator=g) * 2).to(torch.bfloat16))
            for t in leaves[n:2 * n]:
                t.copy_(torch.rand(t.shape, generator=g) - 0.5)
            for t in leaves[2 * n:]:
                t.copy_(torch.randn(t.shape, generator=g))
            for t in dys:
                t.copy_(torch.randn(t.shape, generator=g).to(torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        outs, grads = eager(leaves)
        for i, (a, b) in enumerate(zip(static_outs, outs)):
            assert_bitwise(f"out[{i}] replay {k}", a, b)
        for i, (a, b) in enumerate(zip(static_grads, grads)):
            assert_bitwise(f"grad[{i}] replay {k}", a, b)
    cpu = run_variant(ctx, [t.detach().cpu() for t in leaves[:n]],
                      [t.detach().cpu() for t in leaves[n:2 * n]],
                      [t.detach().cpu() for t in leaves[2 * n:]], [d.cpu() for d in dys], True,
                      "silu")
    for i in range(n):  # relu(y) * 2 of the CPU's y; the gradients through relu differ
        assert_bitwise(f"out[{i}] against the CPU", static_outs[i], torch.relu(cpu[0][i]) * 2)


def test_cuda_bad_bias():
    ctx = cake.ContextDetKcp([0, 16])
    x = torch.zeros(16, 8, dtype=torch.bfloat16, device="cuda")
    w = torch.zeros(8, 4, device="cuda")
    with pytest.raises(ValueError, match=r"bias: expected device cuda:0 \(the device of x\), "
                                         r"got cpu"):
        conv_det_kcp(x, w, ctx, biases=torch.zeros(8), multi=False)
    odd = torch.zeros(9, device="cuda")[1:]
    with pytest.raises(ValueError, match="bias: expected a 16-byte aligned data pointer"):
        conv_det_kcp(x, w, ctx, biases=odd, multi=False)


@pytest.mark.parametrize("world_size", [2])
def test_gloo_group_cuda_tensors_one_gpu(world_size, tmp_path):
    from _workers import spawn
    from test_bias_silu_distributed import check_results
    seeds = [9700 + s for s in range(2)]
    results = spawn("bias_silu", world_size, tmp_path, seeds, "cuda")
    assert_workers_ok(results)
    check_results(results, seeds, world_size, "cuda ")


def _layer(device):
    torch.manual_seed(9800)
    convs = torch.nn.ModuleList([cake.ShortConvolution(d, 4, bias=True, activation="silu",
                                                       device=device) for d in (32, 32, 64)])
    with torch.no_grad():
        for m in convs:
            m.bias.uniform_(-0.5, 0.5)
    return convs


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()  # (also after a failure: no compiled frame leaks into later tests)


def test_cuda_module_compiled_and_graph_captured(fresh_dynamo):
    """cake.ShortConvolution on CUDA: the modules (context as their attribute) and the multi
    helper compiled with fullgraph are bitwise eager; a checkpointed module step captured as a
    CUDA graph replays bitwise the eager step; all bitwise the CPU modules. The first input is a
    view at an odd offset: eager and compiled modules copy it (the op at run time)."""
    cu = [0, 5, 700, 701, 2000]
    ctx = cake.ContextDetKcp(cu)
    convs = _layer("cuda")
    cake.set_conv_context(convs, ctx)
    g = torch.Generator().manual_seed(9801)
    xs = [(torch.randn(1, cu[-1], m.hidden_size, generator=g) * 2).to(torch.bfloat16).cuda()
          for m in convs]
    dys = [torch.randn(1, cu[-1], m.hidden_size, generator=g).to(torch.bfloat16).cuda()
           for m in convs]

    def body(handle, *t):
        odd = torch.nn.functional.pad(t[0].flatten(), (1, 0))[1:].view(t[0].shape)  # 2 bytes in
        a, _ = convs[0](odd)
        b, c = cake.short_convolution_multi(list(convs[1:]), list(t[1:]),
                                            recompute_handle=handle)
        return a, b, c

    def step(fn, leaves):
        convs.zero_grad()
        with cake.RecomputeHandleDetKcp() as handle:
            outs = checkpoint(fn, handle, *leaves, use_reentrant=False)
            torch.autograd.backward(list(outs), dys)
        return [o.detach() for o in outs] + [t.grad for t in leaves] + \
            [p.grad.clone() for p in convs.parameters()]

    eager = step(body, [x.clone().requires_grad_() for x in xs])
    compiled = torch.compile(body, fullgraph=True)
    for k in range(2):
        got = step(compiled, [x.clone().requires_grad_() for x in xs])
        for i, (a, b) in enumerate(zip(got, eager)):
            assert_bitwise(f"compiled [{i}] step {k}", a, b)
    torch._dynamo.reset()

    # a CUDA graph of the eager step (the handle made and closed inside it)
    leaves = [x.clone().requires_grad_() for x in xs]
    warm_up_for_capture(lambda: step(body, leaves), leaves)
    for t in leaves:
        t.grad = None
    convs.zero_grad(set_to_none=False)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step(body, leaves)
    with torch.no_grad():
        for t, x in zip(leaves, xs):
            t.copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(static, eager)):
        assert_bitwise(f"graph replay [{i}]", a, b)

    # the CPU modules: the same bits
    cpu = _layer("cpu")
    cpu.load_state_dict({k: v.cpu() for k, v in convs.state_dict().items()})
    cpu_ctx = cake.ContextDetKcp(cu)
    cpu_leaves = [x.cpu().requires_grad_() for x in xs]
    ys = [m(x, ctx=cpu_ctx)[0] for m, x in zip(cpu, cpu_leaves)]
    torch.autograd.backward(ys, [d.cpu() for d in dys])
    want = ys + [t.grad for t in cpu_leaves] + [p.grad for p in cpu.parameters()]
    for i, (a, b) in enumerate(zip(eager, want)):
        assert_bitwise(f"CPU [{i}]", a, b)
