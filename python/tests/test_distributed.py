"""Multi-process gloo runs (world sizes 1 to 4, spawned here) against the single-process run."""
import time

import pytest
import torch

import cake
from _problems import (Problem, assert_bitwise, assert_workers_ok, rank_reference, reference64,
                       assert_close64, run_op)
from _workers import spawn

SEEDS_PER_WORLD = 6


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_gloo_bitwise_equal_to_single_process(world_size, tmp_path):
    seeds = [1000 * world_size + s for s in range(SEEDS_PER_WORLD)]
    results = spawn("match", world_size, tmp_path, seeds)
    assert_workers_ok(results)
    for k, seed in enumerate(seeds):
        p = Problem(seed, world_size)
        ys, dxs, dws = run_op(cake.ContextDetKcp(p.cu), p.xs, p.ws, p.dys, True)
        dw_sums = [torch.zeros(w.shape, dtype=torch.float64) for w in p.ws]
        covered = torch.zeros(p.T, dtype=torch.int64)
        for r in range(world_size):
            res = results[r][k]
            rows, _, _, ref_dws = rank_reference(p, r)
            where = f"{p}, rank {r}"
            assert torch.equal(res["rows"], rows), where
            assert res["local_rows"] == len(rows), where
            covered[rows] += 1
            for i in range(len(p.channels)):
                y, dx, dw = (res["multi"][j][i] for j in range(3))
                # y and dx: bitwise the single-process run, whatever the partition
                assert_bitwise(f"y[{i}] of {where}", y, ys[i][rows])
                assert_bitwise(f"dx[{i}] of {where}", dx, dxs[i][rows])
                # dw: bitwise this rank's contribution over its own rows and halos
                assert_bitwise(f"dw[{i}] of {where}", dw, ref_dws[i])
                dw_sums[i] += dw.double()
                for kind in ("single", "again"):  # multi == single calls; run to run
                    for j, name in enumerate(("y", "dx", "dw")):
                        assert_bitwise(f"{kind} {name}[{i}] of {where}", res[kind][j][i],
                                       res["multi"][j][i])
                for j, name in enumerate(("y", "dx")):  # [1, S, C] inputs
                    got = res["batched"][j][i]
                    assert got.shape == (1,) + tuple(res["multi"][j][i].shape), where
                    assert_bitwise(f"[1,S,C] {name}[{i}] of {where}", got[0],
                                   res["multi"][j][i])
                assert_bitwise(f"[1,S,C] dw[{i}] of {where}", res["batched"][2][i], dw)
        assert bool((covered == 1).all()), f"{p}: rows not covered exactly once"
        for i in range(len(p.channels)):  # the summed dw: within fp32 rounding of float64
            y64, dx64, dw64, ay, adx, adw = reference64(p.cu, p.xs[i], p.ws[i], p.dys[i])
            assert_close64(f"y[{i}], {p}", ys[i], y64, ay, 2.0 ** -8, 2.0 ** -16)
            assert_close64(f"dx[{i}], {p}", dxs[i], dx64, adx, 2.0 ** -8, 2.0 ** -16)
            assert_close64(f"sum of dw[{i}], {p}", dw_sums[i], dw64, adw, 0, 300 * 2.0 ** -24)


@pytest.mark.parametrize("world_size", [2, 3])
def test_checkpoint_recompute_issues_no_collective_with_a_handle(world_size, tmp_path):
    results = spawn("checkpoint", world_size, tmp_path, 7)
    assert_workers_ok(results)
    for r, res in enumerate(results):
        plain_ys, plain_dxs, plain_dws = res["plain"]
        n = len(plain_ys)
        for (reentrant, use_handle, multi), run in res["runs"].items():
            where = (f"rank {r}, use_reentrant={reentrant}, handle={use_handle}, "
                     f"multi={multi}")
            calls = 1 if multi else n  # collectives of one forward (or one backward)
            assert run["forward_calls"] == calls, where
            # the backward: its own exchange, plus the recompute's without a handle
            assert run["backward_calls"] == (calls if use_handle else 2 * calls), where
            assert run["exchanges"] == (run["forward_calls"], run["backward_calls"]), where
            assert run["from_handle"] == (calls if use_handle else 0), where
            if use_handle:
                assert all(run["handle_filled"]), where
            for i in range(n):
                assert_bitwise(f"y[{i}], {where}", run["ys"][i], plain_ys[i])
                assert_bitwise(f"dx[{i}], {where}", run["dxs"][i], plain_dxs[i])
                assert_bitwise(f"dw[{i}], {where}", run["dws"][i], plain_dws[i])


def test_exchange_failure_raises_with_the_cause(tmp_path):
    results = spawn("failure", 2, tmp_path)
    assert_workers_ok(results)
    for r, res in enumerate(results):
        kind, message, cause, status = res["first"]
        assert kind == "CakeError" and status == 4, res
        assert "injected failure" in message and cause == "RuntimeError", res
        kind, message = res["second"]
        assert kind == "CakeError" and "earlier exchange failed" in message, res


def test_exchange_timeout(tmp_path):
    results = spawn("timeout", 2, tmp_path)
    assert_workers_ok(results)
    kind, message, status = results[1]["error"]
    assert kind == "CakeError" and status == 5, results[1]
    assert results[1]["seconds"] < 20, results[1]


def test_check_mode_reports_a_mismatch(tmp_path):
    results = spawn("mismatch", 2, tmp_path)
    assert_workers_ok(results)
    for res in results:
        kind, message, status = res["error"]
        assert kind == "CakeError" and status == 6, res
        assert "channels[0]" in message and "rank 0: 8, rank 1: 16" in message, res


def test_timeout_inf_exchanges(tmp_path):
    """timeout_seconds=inf means no limit: the exchanges run (they raised OverflowError)."""
    results = spawn("timeout_inf", 2, tmp_path, 77)
    assert_workers_ok(results)
    p = Problem(77, 2)
    ys, dxs, dws = run_op(cake.ContextDetKcp(p.cu), p.xs, p.ws, p.dys, True)
    for r, res in enumerate(results):
        rows = res["rows"]
        for i in range(len(p.channels)):
            assert_bitwise(f"y[{i}] rank {r}", res["out"][0][i], ys[i][rows])
            assert_bitwise(f"dx[{i}] rank {r}", res["out"][1][i], dxs[i][rows])


def test_context_releases_exchanged_tensors_and_group(tmp_path):
    """No tensor of an exchange is still held by gloo's worker threads once the call returns
    (one freed by a worker during the interpreter's shutdown ends the process with
    std::terminate), and a closed context frees its transport, and with it its reference to
    the process group, at once (destroy_process_group then finds no other holder of ours)."""
    results = spawn("release", 2, tmp_path, 41)
    assert_workers_ok(results)
    for r, res in enumerate(results):
        assert res["exchanged"] > 0, (r, res)
        assert res["held"] == [1] * res["exchanged"], (r, res)
        assert res["transport_freed"], (r, res)


def test_let_go_waits_for_release_and_gives_up():
    """The wait after a host exchange: it returns once every tensor is Python's alone (here
    after a few polls), and gives up (False) when one stays held, within its time."""
    from cake._transport import let_go

    class Held:
        def __init__(self, polls):
            self.polls = polls

        def _use_count(self):  # held by "gloo" for the first polls - 1 calls
            self.polls -= 1
            return 2 if self.polls > 0 else 1

    released = [Held(3), Held(1), Held(5)]
    assert let_go(released)
    assert [h.polls for h in released] == [0, 0, 0]
    assert let_go([torch.zeros(3)])
    start = time.monotonic()
    assert not let_go([Held(10 ** 12)], seconds=0.01)
    assert time.monotonic() - start < 1.0


def test_compiled_step_two_ranks(tmp_path):
    """torch.compile over gloo, 2 ranks: the compiled checkpointed step is bitwise the eager
    one and the single-process run, with one exchange per direction (a recompute in the
    compiled backward reads the handle; torch 2.11 saves the outputs instead and recomputes
    nothing: _problems.assert_compiled_calls)."""
    results = spawn("compile", 2, tmp_path, 88, deadline=400)
    assert_workers_ok(results)
    p = Problem(88, 2, partition="zigzag", max_rows=200)
    ys, dxs, _ = run_op(cake.ContextDetKcp(p.cu), p.xs, p.ws, p.dys, True)
    for r, res in enumerate(results):
        eager, *compiled = res["runs"]
        rows = res["rows"]
        assert eager["exchanges"] == (1, 1) and eager["from_handle"] == 1, eager
        for k, run in enumerate(compiled):
            where = f"rank {r}, compiled step {k}"
            assert run["exchanges"] == (1, 1) and run["from_handle"] in (0, 1), (where, run)
            assert run["from_handle"] == compiled[0]["from_handle"], (where, run)  # one choice
            for i in range(len(p.channels)):
                assert_bitwise(f"y[{i}] {where}", run["ys"][i], eager["ys"][i])
                assert_bitwise(f"dx[{i}] {where}", run["dxs"][i], eager["dxs"][i])
                assert_bitwise(f"dw[{i}] {where}", run["dws"][i], eager["dws"][i])
        for i in range(len(p.channels)):  # relu(y) * 2 of the single-process y, bitwise
            assert_bitwise(f"out[{i}] rank {r}", eager["ys"][i], torch.relu(ys[i][rows]) * 2)
