#!/usr/bin/env python3
"""A small KDA-like block trained with context parallelism on CPU (gloo), under activation
checkpointing, with cake's short convolutions; its losses are bitwise those of one process.

    python -m torch.distributed.run --standalone --nproc_per_node 2 examples/kda_block.py
    python examples/kda_block.py --single        # the same batch and losses, in one process

(`python` being the one torch and cake are installed for, for example the venv that
`make test-python` makes: build-python/venv/bin/python.)

The block: q, k, v projections of the packed tokens, cake's causal depthwise convolution of
q, k and v (one call, one halo exchange per direction), SiLU, a row-local gated mix standing in
for the attention op (KDA's chunked recurrence across ranks is beyond this example), an output
projection and a squared-error loss. The packed batch (variable-length sequences) is split
contiguously over the ranks, so sequences cross rank boundaries and the convolution needs the
rows of the previous rank.

Why the losses can be bitwise equal. cake's y and dx do not depend on the partition, and each
rank's dw is a pairwise-tree sum of 256-row block partials. Everything else here is made the
same way: projections and the loss work on 256-row blocks (same shapes, same values, same bits
in any process), and every weight gradient is a pairwise tree over blocks, then over ranks
(all_gather, then the same tree). With a power-of-two number of ranks and of blocks per rank,
the tree over the whole batch is the tree of the ranks' trees, so every gradient, every update
and every loss is bitwise the single-process run. (Other world sizes train just as well; their
losses then differ in the last bits, and the script says so.)
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from cake import (ContextDetKcp, RecomputeHandleDetKcp, cake_causal_conv1d_det_multi_kcp)

BLOCK = 256  # rows; cake's dw block (CAKE_DW_BLOCK_ROWS), used for every reduction here


def tree_sum(parts):
    """The fixed pairwise tree of cake's dw (docs/NUMERICS.md): split at the largest power of two."""
    if len(parts) == 1:
        return parts[0]
    m = 1 << (len(parts) - 1).bit_length() - 1
    return tree_sum(parts[:m]) + tree_sum(parts[m:])


def blocks(t):
    return [b.clone() for b in t.split(BLOCK)]  # fresh (aligned) copies: same bits anywhere


class BlockLinear(torch.autograd.Function):
    """y = x @ weight.T on 256-row blocks; the weight gradient is a tree over the blocks."""

    @staticmethod
    def forward(fctx, x, weight):
        fctx.save_for_backward(x, weight)
        return torch.cat([b @ weight.t() for b in blocks(x)])

    @staticmethod
    def backward(fctx, dy):
        x, weight = fctx.saved_tensors
        dys = blocks(dy.contiguous())
        dx = torch.cat([d @ weight for d in dys])
        dw = tree_sum([d.t() @ b for d, b in zip(dys, blocks(x))])
        return dx, dw


class KdaLikeBlock(torch.nn.Module):
    def __init__(self, d_model, channels, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)

        def param(*shape, scale):
            return torch.nn.Parameter((torch.rand(*shape, generator=g) - 0.5) * scale)

        self.proj = torch.nn.ParameterList([param(channels, d_model, scale=2 / d_model ** 0.5)
                                            for _ in range(3)])  # q, k, v
        self.conv = torch.nn.ParameterList([param(channels, 4, scale=1.0) for _ in range(3)])
        self.out = param(d_model, channels, scale=2 / channels ** 0.5)

    def forward(self, x, ctx, handle):
        qkv = [BlockLinear.apply(x, w).to(torch.bfloat16) for w in self.proj]
        q, k, v = cake_causal_conv1d_det_multi_kcp(qkv, list(self.conv), ctx,
                                                   recompute_handle=handle)
        q, k, v = (F.silu(t.float()) for t in (q, k, v))
        mixed = q * torch.sigmoid(k) * v  # stands in for the attention op
        return BlockLinear.apply(mixed, self.out)


def make_batch(total_rows, args, solo):
    """A packed batch of variable-length sequences: cu_seqlens, inputs, and targets made by a
    teacher block (so that there is something to learn). `solo`: a one-process group (None
    without torch.distributed), for the teacher's context over the whole batch."""
    g = torch.Generator().manual_seed(args.seed + 1)
    cu = [0]
    while cu[-1] < total_rows:
        cu.append(min(total_rows, cu[-1] + int(torch.randint(1, 300, (1,), generator=g))))
    x = torch.randn(total_rows, args.d_model, generator=g)
    teacher = KdaLikeBlock(args.d_model, args.channels, args.seed + 1000)
    with torch.no_grad():
        target = teacher(x, ContextDetKcp(cu, solo), None)
    return cu, x, target


def train(args, group, solo):
    """Trains for args.steps steps on the batch of args.ranks ranks (args.rows_per_rank rows
    each), over `group` (None: torch.distributed's default group, or one process without it);
    returns the losses (fp32 scalars, the same on every rank)."""
    total_rows = args.rows_per_rank * args.ranks
    cu, x, target = make_batch(total_rows, args, solo)
    ctx = ContextDetKcp(cu, group, partition="contiguous")
    world = ctx.world_size
    rows = ctx.global_rows()
    x_local, target_local = x[rows].contiguous(), target[rows].contiguous()
    model = KdaLikeBlock(args.d_model, args.channels, args.seed)
    losses = []
    for step in range(args.steps):
        handle = RecomputeHandleDetKcp()  # one per step, outside the checkpoint region
        before = ctx.stats()["exchanges"]
        if args.no_checkpoint:
            out = model(x_local, ctx, handle)
        else:
            # (the reentrant form needs an input that requires grad to reach the weights)
            x_in = x_local.detach().requires_grad_(args.reentrant)
            out = checkpoint(model, x_in, ctx, handle, use_reentrant=args.reentrant)
        middle = ctx.stats()["exchanges"]
        partials = [((o - t) ** 2).sum() for o, t in zip(blocks(out), blocks(target_local))]
        local = tree_sum(partials)
        (local / total_rows).backward()
        after = ctx.stats()["exchanges"]
        handle.close()
        with torch.no_grad():
            grads = [p.grad for p in model.parameters()]
            if world > 1:
                grads = [tree_sum(_gather(g, group)) for g in grads]
                local = tree_sum(_gather(local.detach().reshape(1), group))[0]
            for p, g in zip(model.parameters(), grads):
                p.add_(g, alpha=-args.lr)
                p.grad = None
        loss = local.detach() / total_rows
        losses.append(loss)
        if args.verbose:
            print(f"[{'single' if world == 1 else f'rank {ctx.rank}'}] step {step + 1}: loss "
                  f"{loss.item():.9g}  exchanges: forward {middle - before}, backward "
                  f"{after - middle} (recompute included)", flush=True)
    ctx.close()
    return torch.stack(losses)


def _gather(t, group):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return parts


def finish(status):
    """Ends a distributed run: rank 0's exit status broadcast to every rank, the process group
    destroyed, then the process ended at once with that status (os._exit, stdout and stderr
    flushed first). Never returns.

    Why not return and let Python exit: gloo's worker threads outlive destroy_process_group(),
    and one that frees a finished work's tensor after Python has dropped it must take the GIL;
    during the interpreter's shutdown Python ends such a thread with pthread_exit, and the process
    dies with std::terminate ("terminate called without an active exception", exit code -6;
    torch 2.11 and 2.15, docs/RELIABILITY.md). Waiting for gloo to let go of the tensors made
    that rare, not impossible (CI met it again). Nothing is left to do after the last
    communication, so the shutdown skipped loses nothing, and no thread can meet it."""
    flag = torch.tensor([status])
    dist.broadcast(flag, 0)
    status = int(flag.item())
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def bitwise_expected(ranks, rows_per_rank):
    blocks_per_rank = rows_per_rank // BLOCK
    power_of_two = lambda n: n > 0 and n & (n - 1) == 0  # noqa: E731
    return rows_per_rank % BLOCK == 0 and power_of_two(ranks) and power_of_two(blocks_per_rank)


def verdict(losses, single, world, rows_per_rank):
    """Prints the distributed losses against the single-process run's; 0 if they agree as they
    must (bit for bit where bitwise_expected, else to rounding), else 1."""
    same = torch.equal(losses.view(torch.int32), single.view(torch.int32))
    print(f"single-process run: {[f'{v:.9g}' for v in single.tolist()]}")
    if bitwise_expected(world, rows_per_rank):
        print(f"losses of {world} ranks bitwise equal to the single-process run: {same}")
        return 0 if same else 1
    close = torch.allclose(losses, single, rtol=1e-5, atol=0)
    print(f"{world} ranks or {rows_per_rank} rows per rank: the dw trees differ from the "
          f"single-process one, so losses agree to rounding only: {close} (bitwise: {same})")
    return 0 if close else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single", action="store_true",
                        help="run in this process only, without torch.distributed, on the batch "
                             "of a --world-size run (same losses)")
    parser.add_argument("--world-size", type=int, default=2,
                        help="with --single: the distributed run whose batch and losses to "
                             "reproduce (default 2)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rows-per-rank", type=int, default=512,
                        help="tokens per rank (bitwise equality: 256 times a power of two)")
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--lr", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reentrant", action="store_true",
                        help="torch.utils.checkpoint with use_reentrant=True")
    parser.add_argument("--no-checkpoint", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the same kernels in every process
    torch.manual_seed(args.seed)

    if args.single or "RANK" not in os.environ:
        args.ranks, args.verbose = args.world_size, True
        losses = train(args, None, None)
        print("losses:", [f"{v:.9g}" for v in losses.tolist()])
        return 0

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # A one-process group for the contexts over the whole batch (the teacher, the reference
    # run): with torch.distributed initialised, group=None means the default group.
    solo = dist.new_group([rank], use_local_synchronization=True)
    args.ranks, args.verbose = world, rank == 0
    losses = train(args, None, solo)
    status = 0
    if rank == 0:
        print("losses:", [f"{v:.9g}" for v in losses.tolist()])
        args.verbose = False  # the same batch, in this process alone
        status = verdict(losses, train(args, solo, solo), world, args.rows_per_rank)
    finish(status)


if __name__ == "__main__":
    sys.exit(main())
