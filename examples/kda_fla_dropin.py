#!/usr/bin/env python3
"""A KDA-style block written against FLA's module names, switched to cake by changing one import,
trained with context parallelism on CPU (gloo) under activation checkpointing; its losses are
bitwise those of one process.

    python -m torch.distributed.run --standalone --nproc_per_node 2 examples/kda_fla_dropin.py
    python examples/kda_fla_dropin.py --single      # the same batch and losses, in one process

(`python` being the one torch and cake are installed for, e.g. build-python/venv/bin/python.)

The block is written as FLA's KDA layer is: `q_conv1d`, `k_conv1d` and `v_conv1d` are
`ShortConvolution(hidden_size=..., kernel_size=4, bias=conv_bias, activation='silu')` modules,
called as `self.q_conv1d(x=self.q_proj(hidden_states), cu_seqlens=cu_seqlens)` and returning
`(y, None)`. The one line that changes is the import: `from cake import ShortConvolution` in
place of `from fla.modules import ShortConvolution` (FLA's checkpoints load unchanged: the same
parameters and state_dict keys). The attention op is a row-local gated mix standing in for
KDA's chunked recurrence (beyond this example).

Context parallelism without touching the block: the training loop sets the context (and a fresh
recompute handle per module and step) on every ShortConvolution of the model with
`cake.set_conv_context(model, ctx, recompute_handles=True)`; the block's calls stay FLA's. The
single-process run sets no context: each module then builds (and caches) a single-process
context from the cu_seqlens it is given, as FLA's module computes. With `--multi` the block
runs its three convolutions as one call, `cake.short_convolution_multi` (one halo exchange
per direction instead of three; bitwise the same losses).

Why bitwise: as in kda_block.py (whose block-wise projections and tree reductions this reuses),
cake's y and dx do not depend on the partition and each rank's dw and dbias are pairwise trees
over 256-row blocks; with a power-of-two number of ranks and of blocks per rank every gradient
summed over ranks by the same tree, every update and every loss is the single-process run's.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import cake
from cake import ShortConvolution  # with FLA: from fla.modules import ShortConvolution

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kda_block import (BLOCK, BlockLinear, blocks, finish, tree_sum,  # noqa: E402
                       verdict, _gather)


class Linear(nn.Module):
    """A bias-free projection on 256-row blocks of [1, T, in] (bitwise the same in any process):
    fp32 weights, output in `dtype`."""

    def __init__(self, in_features, out_features, generator, dtype=torch.float32):
        super().__init__()
        scale = 2 / in_features ** 0.5
        self.weight = nn.Parameter((torch.rand(out_features, in_features, generator=generator)
                                    - 0.5) * scale)
        self.dtype = dtype

    def forward(self, x):
        return BlockLinear.apply(x[0], self.weight)[None].to(self.dtype)


class KDALikeAttention(nn.Module):
    """FLA's KDA layer's shape: projections, the three short convolutions, the attention op
    (here a row-local gated mix), the output projection. Written against FLA's names."""

    def __init__(self, hidden_size, key_dim, value_dim, conv_size=4, conv_bias=True, seed=0,
                 fuse_qkv_conv=False):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)  # the convolutions' nn.Conv1d initialisation
        self.q_proj = Linear(hidden_size, key_dim, g, torch.bfloat16)
        self.k_proj = Linear(hidden_size, key_dim, g, torch.bfloat16)
        self.v_proj = Linear(hidden_size, value_dim, g, torch.bfloat16)
        self.q_conv1d = ShortConvolution(hidden_size=key_dim, kernel_size=conv_size,
                                         bias=conv_bias, activation="silu")
        self.k_conv1d = ShortConvolution(hidden_size=key_dim, kernel_size=conv_size,
                                         bias=conv_bias, activation="silu")
        self.v_conv1d = ShortConvolution(hidden_size=value_dim, kernel_size=conv_size,
                                         bias=conv_bias, activation="silu")
        self.o_proj = Linear(key_dim + value_dim, hidden_size, g)
        if conv_bias:
            with torch.no_grad():  # (nn.Conv1d's default bias is tiny; make it matter)
                for conv in (self.q_conv1d, self.k_conv1d, self.v_conv1d):
                    conv.bias.uniform_(-0.5, 0.5)
        self.fuse_qkv_conv = fuse_qkv_conv

    def forward(self, hidden_states, cu_seqlens=None):
        q, k, v = (self.q_proj(hidden_states), self.k_proj(hidden_states),
                   self.v_proj(hidden_states))
        if self.fuse_qkv_conv:  # cake only: one call, one exchange per direction
            q, k, v = cake.short_convolution_multi((self.q_conv1d, self.k_conv1d, self.v_conv1d),
                                                   (q, k, v), cu_seqlens=cu_seqlens)
        else:  # FLA's calls, unchanged
            q, _ = self.q_conv1d(x=q, cu_seqlens=cu_seqlens)
            k, _ = self.k_conv1d(x=k, cu_seqlens=cu_seqlens)
            v, _ = self.v_conv1d(x=v, cu_seqlens=cu_seqlens)
        # the attention op's stand-in: row-local, elementwise (the same bits in any process)
        mixed = torch.cat([q.float() * torch.sigmoid(k.float()), v.float()], dim=-1)
        return self.o_proj(mixed)


def make_batch(total_rows, args):
    """A packed batch: global cu_seqlens, inputs [1, T, d], targets from a teacher block (run
    without any context: the single-process contexts of its cu_seqlens)."""
    g = torch.Generator().manual_seed(args.seed + 1)
    cu = [0]
    while cu[-1] < total_rows:
        cu.append(min(total_rows, cu[-1] + int(torch.randint(1, 300, (1,), generator=g))))
    x = torch.randn(1, total_rows, args.d_model, generator=g)
    teacher = make_model(args, args.seed + 1000)
    with torch.no_grad():
        target = teacher(x, torch.tensor(cu))
    return cu, x, target


def make_model(args, seed):
    return KDALikeAttention(args.d_model, args.key_dim, args.value_dim,
                            conv_bias=not args.no_conv_bias, seed=seed,
                            fuse_qkv_conv=args.multi)


def train(args, group):
    """args.steps steps on the batch of args.ranks ranks (args.rows_per_rank rows each): over
    `group` with a context set on the modules, or, for group "none", in this process with no
    context at all (the modules' own single-process contexts). Returns the losses."""
    total_rows = args.rows_per_rank * args.ranks
    cu, x, target = make_batch(total_rows, args)
    model = make_model(args, args.seed)
    if group == "none":
        ctx, world, rows = None, 1, torch.arange(total_rows)
    else:
        ctx = cake.ContextDetKcp(cu, group, partition="contiguous")
        world, rows = ctx.world_size, ctx.global_rows()
    x_local = x[:, rows].contiguous()
    target_local = target[:, rows].contiguous()
    cu_t = torch.tensor(cu)
    losses = []
    for step in range(args.steps):
        # the context of this batch layout and a fresh recompute handle per module and step
        cake.set_conv_context(model, ctx, recompute_handles=True)
        before = ctx.stats()["exchanges"] if ctx is not None else 0
        x_in = x_local.detach().requires_grad_(args.reentrant)
        out = checkpoint(model, x_in, cu_t, use_reentrant=args.reentrant)
        middle = ctx.stats()["exchanges"] if ctx is not None else 0
        partials = [((o - t) ** 2).sum() for o, t in zip(blocks(out[0]), blocks(target_local[0]))]
        local = tree_sum(partials)
        (local / total_rows).backward()
        after = ctx.stats()["exchanges"] if ctx is not None else 0
        with torch.no_grad():
            params = list(model.parameters())
            grads = [p.grad for p in params]
            if world > 1:
                grads = [tree_sum(_gather(g, group)) for g in grads]
                local = tree_sum(_gather(local.detach().reshape(1), group))[0]
            for p, g in zip(params, grads):
                p.add_(g, alpha=-args.lr)
                p.grad = None
        loss = local.detach() / total_rows
        losses.append(loss)
        if args.verbose:
            who = "single" if world == 1 else f"rank {ctx.rank}"
            print(f"[{who}] step {step + 1}: loss {loss.item():.9g}  exchanges: forward "
                  f"{middle - before}, backward {after - middle} (recompute included)",
                  flush=True)
    cake.set_conv_context(model, None)
    if ctx is not None:
        ctx.close()
    return torch.stack(losses)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single", action="store_true",
                        help="run in this process only, on the batch of a --world-size run")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rows-per-rank", type=int, default=2 * BLOCK,
                        help="tokens per rank (bitwise equality: 256 times a power of two)")
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--key-dim", type=int, default=64)
    parser.add_argument("--value-dim", type=int, default=96)
    parser.add_argument("--no-conv-bias", action="store_true")
    parser.add_argument("--multi", action="store_true",
                        help="q, k and v convolutions as one cake.short_convolution_multi call")
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reentrant", action="store_true",
                        help="torch.utils.checkpoint with use_reentrant=True")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    if args.single or "RANK" not in os.environ:
        args.ranks, args.verbose = args.world_size, True
        losses = train(args, "none")
        print("losses:", [f"{v:.9g}" for v in losses.tolist()])
        return 0

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    args.ranks, args.verbose = world, rank == 0
    losses = train(args, None)  # None: the default group
    status = 0
    if rank == 0:
        print("losses:", [f"{v:.9g}" for v in losses.tolist()])
        args.verbose = False  # the same batch in this process alone, no context
        status = verdict(losses, train(args, "none"), world, args.rows_per_rank)
    finish(status)


if __name__ == "__main__":
    sys.exit(main())
