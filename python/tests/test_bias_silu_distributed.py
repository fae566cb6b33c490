"""Bias and SiLU over gloo (2 and 3 ranks, spawned here): y and dx bitwise the single-process run
for every partition, each rank's dw and dbias bitwise its own C reference, multi = single calls,
run to run, and a checkpointed call with a recompute handle issues one collective per
direction (none in the recompute)."""
import pytest

import cake
from _problems import (VARIANTS, Problem, assert_bitwise, assert_workers_ok, make_biases,
                       rank_reference, run_variant)
from _workers import spawn

NAMES = ("y", "dx", "dw", "dbias")


def check_results(results, seeds, world_size, device_note=""):
    for k, seed in enumerate(seeds):
        p = Problem(seed, world_size)
        bs = make_biases(p)
        ctx = cake.ContextDetKcp(p.cu)
        whole = {v: run_variant(ctx, p.xs, p.ws, bs if v[1] else None, p.dys, True, v[0])
                 for v in VARIANTS}
        for r in range(world_size):
            res = results[r][k]
            rows = res["rows"]
            for (act, with_bias) in VARIANTS:
                ref = rank_reference(p, r, act, bs if with_bias else None)
                assert cake_rows_equal(rows, ref[0]), (p, r)
                got = res["variants"][(act, with_bias)]
                where = f"{device_note}{act} bias={with_bias}, rank {r}, {p}"
                for i in range(len(p.channels)):
                    y, dx, dw = (got["multi"][j][i] for j in range(3))
                    # y and dx: the single-process run's rows, whatever the partition
                    assert_bitwise(f"y[{i}] {where}", y, whole[(act, with_bias)][0][i][rows])
                    assert_bitwise(f"dx[{i}] {where}", dx, whole[(act, with_bias)][1][i][rows])
                    # dw and dbias: this rank's contribution, bitwise its C reference
                    assert_bitwise(f"dw[{i}] {where}", dw, ref[3][i])
                    if with_bias:
                        assert_bitwise(f"dbias[{i}] {where}", got["multi"][3][i], ref[4][i])
                    for kind in ("single", "again"):
                        for j, name in enumerate(NAMES[:4 if with_bias else 3]):
                            assert_bitwise(f"{kind} {name}[{i}] {where}", got[kind][j][i],
                                           got["multi"][j][i])
            run = res["checkpoint"]
            where = f"{device_note}checkpoint, rank {r}, {p}"
            # the exchanges of the call without checkpoint (one per direction, or none for a
            # rank without peers), none in the recompute; check mode (on for even seeds) adds
            # its fingerprint rounds: one per call (the recompute's included)
            assert res["plain_exchanges"][0] <= 1 and res["plain_exchanges"][1] <= 1, where
            assert run["exchanges"] == res["plain_exchanges"], (where, run, res)
            assert run["from_handle"] == 1, (where, run)
            rounds = run["check_rounds"]
            assert rounds == ((1, 2) if seed % 2 == 0 else (0, 0)), (where, run)
            assert run["collectives"] == (run["exchanges"][0] + rounds[0],
                                          run["exchanges"][1] + rounds[1]), (where, run)
            want = res["variants"][("silu", True)]["multi"]
            for j, name in enumerate(NAMES):
                for i, (g, w) in enumerate(zip(run["out"][j], want[j])):
                    assert_bitwise(f"{name}[{i}] {where}", g, w)


def cake_rows_equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


@pytest.mark.parametrize("world_size", [2, 3])
def test_gloo_bias_silu_partition_invariance(world_size, tmp_path):
    seeds = [9000 + 100 * world_size + s for s in range(3)]
    results = spawn("bias_silu", world_size, tmp_path, seeds)
    assert_workers_ok(results)
    check_results(results, seeds, world_size)


@pytest.mark.parametrize("world_size, partition", [(2, "zigzag"), (3, "contiguous")])
def test_gloo_short_convolution_modules_and_multi(world_size, partition, tmp_path):
    """cake.ShortConvolution under context parallelism, called FLA's way with the context and
    fresh handles set on the modules, under checkpoint, and the multi helper: y and dx bitwise
    the single-process modules at the rank's rows, multi bitwise the separate calls (dw and
    dbias included), one exchange per direction per call and none in the recompute."""
    import torch
    from _workers import short_conv_inputs, short_conv_layer
    cu = [0, 2, 60, 61, 150, 150, 230]
    seed = 9800 + world_size
    results = spawn("short_conv", world_size, tmp_path, seed, cu, partition)
    assert_workers_ok(results)
    convs = short_conv_layer(seed)
    xs, dys = short_conv_inputs(seed, cu[-1])
    leaves = [x.clone().requires_grad_() for x in xs]
    ys = [m(x, cu_seqlens=torch.tensor(cu))[0] for m, x in zip(convs, leaves)]
    torch.autograd.backward(ys, dys)
    dw_sum = [torch.zeros(m.weight.shape, dtype=torch.float64) for m in convs]
    db_sum = [torch.zeros(m.bias.shape, dtype=torch.float64) for m in convs]
    for r, res in enumerate(results):
        rows = res["rows"]
        mods, multi = res["modules"], res["multi"]
        # forward calls before and during the backward (the recompute, from the handles)
        assert mods["calls"] == (3, 3) and multi["calls"] == (1, 1), (r, mods, multi)
        assert mods["from_handle"] == 3 and multi["from_handle"] == 1, (r, mods, multi)
        assert multi["exchanges"][0] <= 1 and multi["exchanges"][1] <= 1, (r, multi)
        assert mods["exchanges"] == tuple(3 * e for e in multi["exchanges"]), (r, mods, multi)
        for i in range(3):
            where = f"[{i}] rank {r} of {world_size}, {partition}"
            assert_bitwise(f"y{where}", mods["ys"][i], ys[i][:, rows])
            assert_bitwise(f"dx{where}", mods["dxs"][i], leaves[i].grad[:, rows])
            for name in ("ys", "dxs", "dws", "dbs"):
                assert_bitwise(f"multi {name}{where}", multi[name][i], mods[name][i])
            dw_sum[i] += mods["dws"][i].double()
            db_sum[i] += mods["dbs"][i].double()
    for i, m in enumerate(convs):  # the ranks' contributions add up to the whole batch's
        assert torch.allclose(dw_sum[i], m.weight.grad.double(), rtol=1e-5, atol=1e-4)
        assert torch.allclose(db_sum[i], m.bias.grad.double(), rtol=1e-5, atol=1e-4)
