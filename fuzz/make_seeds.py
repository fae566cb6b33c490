#!/usr/bin/env python3
"""Writes the committed seed corpus of the harnesses: fuzz/corpus/<harness>/seed-<class>, one
small file per class of input that docs/RELIABILITY.md's table names, in each harness's byte
format (see the decoders in fuzz_partition.c, fuzz_args.c and fuzz_single_rank.c), and the
hand-made regression-* reproducers of fuzz_args. Other regression-* files are the fuzzer's own
crash inputs and are left alone. Run it after changing a decoder:
    python3 fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# fz_hostile_i64: byte b < 32 picks hostile[b] (b + 32: the same, rounded down to a multiple of 8)
H_ZERO, H_ONE, H_MINUS1, H_12, H_MINUS8 = 0, 1, 2, 8, 10
H_I64_MIN, H_I64_MAX, H_I64_MAX_2, H_2_32 = 12, 14, 16, 21
H_2_59, H_2_60, H_2_61, H_2_62 = 23, 25, 27, 28
H_MUL8 = 32  # add to an index for the multiple-of-8 version
# fz_hostile_int: byte b < 12 picks {0, -1, 1, 2, INT32_MIN, INT32_MAX, INT32_MAX - 1, 2^16, ...}
I_ZERO, I_MINUS1, I_INT_MIN, I_INT_MAX, I_2_16, I_2_20, I_4096 = 0, 1, 4, 5, 7, 8, 11


def write(harness, name, data, prefix="seed-"):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, prefix + name), "wb") as f:
        f.write(bytes(data))


def u64(v):
    return list(struct.pack("<Q", v & (2**64 - 1)))


# ---- fuzz_partition --------------------------------------------------------------------------
CONTIGUOUS, BOUNDARIES, ZIGZAG, RANGES = 0, 1, 2, 3
F_CU0, F_B0, F_BP = 1, 2, 4
F_NULL_CU, F_NULL_OUT, F_NULL_ARRAY1, F_NULL_ARRAY2 = 0x20, 0x40, 0x60, 0x80


def ranks(p):  # 1..8 directly
    return [p - 1]


def seqs(*steps):  # num_seqs, then one small step (0..8) per sequence
    return [len(steps)] + list(steps)


def partition_seeds():
    s = {}
    cu = seqs(5, 0, 7, 1, 2)  # T = 15 with an empty sequence
    for kind, kname in ((CONTIGUOUS, "contiguous"), (ZIGZAG, "zigzag")):
        s[kname + "-p3"] = [kind, 0] + ranks(3) + cu + [1, 0, 1, 0]
        s[kname + "-p8-tiny"] = [kind, 0] + ranks(8) + seqs(1, 2, 1) + [0] * 4
        s[kname + "-empty-t0"] = [kind, 0] + ranks(4) + seqs() + [0] * 4
        s[kname + "-many-ranks"] = [kind, 0, 240, I_4096] + cu + [0] * 4
        s[kname + "-ranks-2-16-bad-cu"] = [kind, F_CU0, 240, I_2_16] + cu[:1] + [H_ONE] + cu[1:]
        s[kname + "-ranks-int-max-bad-cu"] = [kind, 0, 240, I_INT_MAX] + seqs(5, 0) + [216]
        s[kname + "-ranks-zero"] = [kind, 0, 240, I_ZERO] + cu
        s[kname + "-ranks-negative"] = [kind, 0, 240, I_MINUS1] + cu
        s[kname + "-ranks-int-min"] = [kind, 0, 240, I_INT_MIN] + cu
        # T = 2^62 and T = INT64_MAX - 2: the last rows near the int64 edge
        s[kname + "-huge-t"] = [kind, 0] + ranks(3) + [2, 3, 240, H_2_62]
        s[kname + "-t-near-int64-max"] = [kind, 0] + ranks(2) + [2, 3, 240, H_I64_MAX_2]
    s["cu-first-nonzero"] = [CONTIGUOUS, F_CU0] + ranks(2) + [2, H_ONE, 3, 4]
    s["cu-decreasing"] = [CONTIGUOUS, 0] + ranks(2) + [3, 4, 218, 3]
    s["cu-int64-min"] = [ZIGZAG, 0] + ranks(2) + [3, 4, 240, H_I64_MIN, 2]
    s["num-seqs-negative"] = [CONTIGUOUS, 0] + ranks(2) + [240, H_MINUS1]
    s["num-seqs-int64-min"] = [ZIGZAG, 0] + ranks(2) + [240, H_I64_MIN]
    s["cu-null"] = [CONTIGUOUS, F_NULL_CU] + ranks(2) + cu
    s["out-null"] = [ZIGZAG, F_NULL_OUT] + ranks(2) + cu
    # boundaries: interior rows (mode byte 0..95: previous + m % 6; 96..191: near even)
    s["boundaries-even"] = [BOUNDARIES, 0] + ranks(4) + cu + [100, 100, 100] + [0] * 4
    s["boundaries-empty-ranks"] = [BOUNDARIES, 0] + ranks(4) + cu + [0, 0, 0] + [0] * 4
    s["boundaries-decreasing"] = [BOUNDARIES, 0] + ranks(3) + cu + [5, 96]
    s["boundaries-first-nonzero"] = [BOUNDARIES, F_B0] + ranks(3) + cu + [H_ONE, 100, 100]
    s["boundaries-last-not-t"] = [BOUNDARIES, F_BP] + ranks(3) + cu + [100, 100, H_I64_MAX]
    s["boundaries-past-t"] = [BOUNDARIES, 0] + ranks(3) + cu + [240, H_I64_MAX, 100]
    s["boundaries-null"] = [BOUNDARIES, F_NULL_ARRAY1] + ranks(3) + cu + [100, 100]
    # ranges: counts per rank (0..3), cut rows, a shuffle, then corruptions
    s["ranges-valid"] = [RANGES, 0] + ranks(3) + cu + [2, 1, 2] + [100] * 4 + [1, 2, 0, 1] + [0]
    s["ranges-empty-rank"] = [RANGES, 0] + ranks(3) + cu + [2, 0, 1] + [100, 100, 0, 0] + [0]
    s["ranges-overlap"] = [RANGES, 0] + ranks(2) + cu + [2, 1, 100, 100, 0, 0, 1, 0, 0, 70]
    s["ranges-gap"] = [RANGES, 0] + ranks(2) + cu + [2, 1, 100, 100, 0, 0, 1, 1, 1, 5]
    s["ranges-past-t"] = [RANGES, 0] + ranks(2) + cu + [1, 1, 100, 0, 1, 0, 0, 150]
    s["ranges-negative-start"] = [RANGES, 0] + ranks(2) + cu + [1, 1, 100, 0, 1, 0, 1, 200,
                                                                     H_MINUS1]
    s["ranges-count-negative"] = [RANGES, 0] + ranks(3) + cu + [1, 224, H_MINUS1, 1]
    s["ranges-count-overflow"] = [RANGES, 0] + ranks(2) + cu + [224, H_I64_MAX, 224, H_I64_MAX]
    s["ranges-counts-null"] = [RANGES, F_NULL_ARRAY1] + ranks(2) + cu + [1, 1]
    s["ranges-null"] = [RANGES, F_NULL_ARRAY2] + ranks(2) + cu + [1, 1]
    # T = INT64_MAX, rank 0 holds [0, T) twice: its row count overflows before the overlap shows
    s["ranges-huge-t-overlap"] = [RANGES, 0] + ranks(1) + [1, 240, H_I64_MAX] + [2, 0, 0, 1,
                                                                                1, 0, 65]
    for name, data in s.items():
        write("fuzz_partition", name, data)


# ---- fuzz_args ---------------------------------------------------------------------------------
CPU_FWD, CPU_BWD, SR_FWD, SR_BWD, FWD, BWD, FWD_MULTI, BWD_MULTI, HANDLE, CTX_CREATE = range(10)
A_X, A_W, A_HIN, A_DY, A_FUT, A_BIAS, A_Y, A_HOUT, A_DX, A_DW, A_DBIAS = range(11)
# params byte: 0 passes NULL; else p % 4 != 0, bit 2 a bias, (p >> 3) % 8 == 0 flips dbias; then
# an activation byte (< 224: its value % 2; else a hostile int follows)
P_NULL, P_PLAIN, P_BIAS = 0, 0x09, 0x0d  # NULL; {none, no bias}; {.., bias and dbias}
P_BIAS_NO_DBIAS, P_DBIAS_NO_BIAS = 0x05, 0x01
ACT_NONE, ACT_SILU, ACT_HOSTILE = [0], [1], [224]
M_NULL_ARRAY, M_NULL_ELEMENT, M_ALIAS, M_NULL_PLAN, M_NULL_OPTIONS, M_OPTIONS, M_CU = 0, 1, 2, 4, 5, 6, 7


def world(p=0x0e):
    # seed, num_seqs 3 of lengths 5, 0, 6 (T = 11), the CPU plan's partition (0x0e: zigzag over
    # 3 ranks, rank 1), two contexts' options
    return u64(0x1234) + [3, 5, 0, 6, p, 0, 1]


def tensor(op, channels=(16, 8), muts=(), ctx=0, handle=0, opts=0x05, null_channels=False,
           params=(P_NULL,)):
    n = len(channels)
    b = [op, n - 1 if n <= 4 else 200 + (n - 5)]
    for c in channels:  # a multiple of 8 up to 64, or ("h", i): hostile value i
        b += [224, c[1]] if isinstance(c, tuple) else [c // 8 - 1]
    b += [0 if null_channels else 1]
    if op >= FWD:
        b += [ctx]
    if op in (FWD, FWD_MULTI):
        b += [handle + 1]  # 0: none, 1: handle 0, 2: handle 1
    b += [opts] + list(params) + [len(muts)]
    for m in muts:
        b += m
    return b


def args_seeds():
    s = {}
    for op, name in ((CPU_FWD, "cpu-forward"), (CPU_BWD, "cpu-backward"),
                     (SR_FWD, "single-rank-forward"), (SR_BWD, "single-rank-backward"),
                     (FWD_MULTI, "ctx-forward-multi"), (BWD_MULTI, "ctx-backward-multi")):
        s[name + "-valid"] = world() + tensor(op)
        s[name + "-channels-12"] = world() + tensor(op, (16, ("h", H_12)))
        s[name + "-channels-negative"] = world() + tensor(op, (("h", H_MINUS8), 8))
        s[name + "-null-x"] = world() + tensor(op, muts=[[M_NULL_ARRAY, A_X, 0]])
        s[name + "-null-element"] = world() + tensor(op, muts=[[M_NULL_ELEMENT, A_W, 1]])
        s[name + "-null-channels"] = world() + tensor(op, null_channels=True)
        s[name + "-silu-bias"] = world() + tensor(op, params=(P_BIAS, *ACT_SILU))
        s[name + "-silu"] = world() + tensor(op, params=(P_PLAIN, *ACT_SILU))
        s[name + "-activation-hostile"] = world() + tensor(op, params=(P_PLAIN, *ACT_HOSTILE,
                                                                       I_INT_MAX))
        s[name + "-null-bias-element"] = world() + tensor(
            op, params=(P_BIAS, *ACT_NONE), muts=[[M_NULL_ELEMENT, A_BIAS, 1]])
    for op, name in ((CPU_BWD, "cpu-backward"), (SR_BWD, "single-rank-backward"),
                     (BWD_MULTI, "ctx-backward-multi")):
        s[name + "-bias-without-dbias"] = world() + tensor(op, params=(P_BIAS_NO_DBIAS,
                                                                       *ACT_SILU))
        s[name + "-dbias-without-bias"] = world() + tensor(op, params=(P_DBIAS_NO_BIAS,
                                                                       *ACT_NONE))
        s[name + "-dbias-is-w"] = world() + tensor(op, params=(P_BIAS, *ACT_NONE),
                                                   muts=[[M_ALIAS, A_DBIAS, 0, A_W, 0, 0]])
        s[name + "-dbias-is-bias"] = world() + tensor(op, (8, 8), params=(P_BIAS, *ACT_SILU),
                                                   muts=[[M_ALIAS, A_DBIAS, 1, A_BIAS, 0, 0]])
    s["ctx-forward-valid"] = world() + tensor(FWD, (24,))
    s["ctx-backward-valid"] = world() + tensor(BWD, (24,))
    s["ctx-forward-null-ctx"] = world() + tensor(FWD, (24,), muts=[[M_NULL_PLAN, 0, 0]])
    s["ctx-forward-other-context"] = world() + tensor(FWD, (8,), ctx=1)
    s["num-tensors-zero"] = world() + [CPU_FWD, 236, 1, 0x05, P_NULL, 0]
    s["num-tensors-int-min"] = world() + [SR_BWD, 238] + [1, 0x05, P_NULL, 0]
    s["channels-overflow-rows"] = world() + [SR_FWD, 0, 224, H_2_62 + H_MUL8, 1, 0x05, P_NULL, 0]
    s["channels-huge-empty"] = u64(7) + [0, 0, 0, 0] + tensor(
        SR_BWD, (("h", H_I64_MAX + H_MUL8),), muts=[[M_ALIAS, A_DW, 0, A_W, 0]])
    s["alias-y-is-x"] = world() + tensor(CPU_FWD, muts=[[M_ALIAS, A_Y, 0, A_X, 0, 0]])
    s["alias-dx-in-dy"] = world() + tensor(CPU_BWD, muts=[[M_ALIAS, A_DX, 1, A_DY, 1, 4]])
    s["alias-y-overlaps-y"] = world() + tensor(SR_FWD, (8, 8), muts=[[M_ALIAS, A_Y, 1, A_Y, 0, 0]])
    s["alias-dw-is-w"] = world() + tensor(SR_BWD, muts=[[M_ALIAS, A_DW, 0, A_W, 0, 0]])
    s["alias-history-output"] = world() + tensor(FWD_MULTI, muts=[[M_ALIAS, A_HOUT, 0, A_X, 0, 0]])
    s["options-threads-negative"] = world() + tensor(CPU_FWD, muts=[[M_OPTIONS, 0, 0, 4, 0]])
    s["options-isa-99"] = world() + tensor(CPU_BWD, muts=[[M_OPTIONS, 0, 0, 0, 5]])
    s["options-null"] = world() + tensor(SR_FWD, muts=[[M_NULL_OPTIONS, 0, 0]])
    s["cu-null"] = world() + tensor(SR_FWD, muts=[[M_CU | 8, 0, 0]])
    s["num-seqs-negative"] = world() + tensor(SR_BWD, muts=[[M_CU | 16 | 32, 0, 0]])
    s["cu-hostile-entry"] = world() + tensor(SR_FWD, muts=[[M_CU, 0, 0, 2, H_MINUS1]])
    # recompute handle: fill by a multi forward, reuse, reuse by the other kind / other channels
    fill = tensor(FWD_MULTI, (16, 8), handle=0)
    s["handle-fill-reuse"] = world() + fill + fill
    s["handle-other-kind"] = world() + fill + tensor(FWD, (16,), handle=0)
    s["handle-other-channels"] = world() + fill + tensor(FWD_MULTI, (16, 16), handle=0)
    s["handle-other-context"] = world() + fill + tensor(FWD_MULTI, (16, 8), ctx=1, handle=0)
    s["handle-erase-conv"] = world() + fill + [HANDLE, 2, 1] + tensor(FWD, (16,), handle=0)
    # key store: set "kda", get it, get a missing key, set "conv", NULL data, NULL handle
    s["handle-keys"] = world() + [HANDLE, 0, 0, 3, 7, 8, 9, 1, HANDLE, 1, 0, 0, HANDLE, 1, 3, 0,
                                  HANDLE, 0, 1, 0, 1, HANDLE, 4, 0, 0, 0, 1, H_MINUS1,
                                  HANDLE, 3, 5, HANDLE, 2, 4, HANDLE, 56 | 1, 0, 0]
    for case, name in enumerate(("null-partition", "null-exchange", "bad-rank", "bad-timeout",
                                 "bad-threads", "bad-isa", "null-out", "valid")):
        extra = {2: [I_INT_MAX], 3: [2], 4: [I_MINUS1], 5: [99, 99, 0, 0, 0]}.get(case, [])
        s["ctx-create-" + name] = world() + [CTX_CREATE, case, 0] + extra
    for name, data in s.items():
        write("fuzz_args", name, data)
    # Reproducers of bugs the fuzzer found, rewritten by hand to their smallest form (the
    # partition ones are the fuzzer's own files). tests/test_regressions.c replays each.
    write("fuzz_args", "weight-bytes-overflow", s["channels-huge-empty"], "regression-")
    write("fuzz_args", "single-rank-pool-overflow", s["channels-overflow-rows"], "regression-")
    write("fuzz_args", "single-rank-allocates-before-checks",
          world() + tensor(SR_FWD, (("h", H_2_32),), muts=[[M_NULL_ARRAY, A_X, 0]]), "regression-")


# ---- fuzz_single_rank ----------------------------------------------------------------------------
def single_seeds():
    s = {}
    special = [0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x0001, 0x8001, 0x7f7f, 0xff7f, 0x0000, 0x8000,
               0x3f80, 0x0080]
    raw = []
    for v in special * 40:
        raw += list(struct.pack("<H", v))

    # params byte: 0 NULL; else p % 4 != 0 with bit 2 SiLU and bit 3 a bias
    NULL_P, SILU_BIAS, SILU, BIAS = 0, 0x0d, 0x05, 0x09

    def head(lens, n, profile, channels, tail, params=NULL_P):
        h = u64(0xC0FFEE) + [len(lens)] + list(lens) + [n - 1, profile, params] + \
            [c // 8 - 1 for c in channels] + tail
        return (h + [0] * 48)[:48]

    for kind, kname in enumerate(("contiguous", "zigzag", "boundaries", "ranges")):
        s[kname + "-p3"] = head((9, 0, 14, 1, 2), 2, 0, (16, 8), [4, 1, 2, kind, 5, 7, 1, 9, 3,
                                                                 30, 4, 2, 8])
        s[kname + "-p4-short-fragments"] = head((1, 2, 1, 3, 1, 2, 1), 3, 1, (8, 16, 24),
                                                [1, 0, 3, kind, 3, 1, 0, 2, 1, 3, 2, 0, 1, 1])
    s["t0"] = head((), 1, 0, (8,), [0, 0, 1, 0])
    s["one-row"] = head((1,), 1, 0, (24,), [6, 1, 0, 0])
    s["t64-one-sequence"] = head((16, 16, 16, 16), 1, 1, (24,), [9, 0, 1, 1, 2])
    s["raw-specials"] = head((6, 3, 8), 2, 2, (8, 16), [2, 0, 2, 3, 2, 1, 0, 1]) + raw
    s["raw-weights-nan"] = head((4, 4), 1, 2, (8,), [1, 1, 0, 0]) + \
        list(struct.pack("<I", 0x7fc00001)) * 8 + raw
    s["threads-3-all-isas"] = head((12, 12), 3, 0, (24, 24, 24), [2 | 12, 0, 3, 3, 14, 6, 10])
    for kind, kname in enumerate(("contiguous", "zigzag", "boundaries", "ranges")):
        s[kname + "-p3-silu-bias"] = head((9, 0, 14, 1, 2), 2, 0, (16, 8),
                                          [4, 1, 2, kind, 5, 7, 1, 9, 3, 30, 4, 2, 8], SILU_BIAS)
    s["silu-raw-specials"] = head((6, 3, 8), 2, 2, (8, 16), [2, 0, 2, 3, 2, 1, 0, 1], SILU) + raw
    s["bias-raw-weights-nan"] = head((4, 4), 1, 2, (8,), [1, 1, 0, 0], BIAS) + \
        list(struct.pack("<I", 0x7fc00001)) * 8 + raw
    for name, data in s.items():
        write("fuzz_single_rank", name, data)


if __name__ == "__main__":
    partition_seeds()
    args_seeds()
    single_seeds()
