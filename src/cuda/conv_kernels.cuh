/* Device code of the convolution: bf16 helpers, the kernel arguments, and the per-item work.
 *
 * Invariants (docs/NUMERICS.md): every multiply-add is one __fmaf_rn in the order written there,
 * no other contraction (built with -fmad=false), the bias add and the SiLU sequence of
 * activation.h exactly as on the CPU, bf16 rounding with the CPU's bits (by the hardware's
 * conversion or by hand, pack2), NaN outputs canonical, dw and dbias partials over 256-row
 * blocks in row order, summed by the fixed tree. A thread owns one or a few channel pairs (its
 * lanes) of a run of rows (the forward, dx alone) or of a 256-row dw block (the backward), and
 * computes each channel independently, so results never depend on the grid shape, the run
 * length or the lanes. Offsets are 64-bit. The variant V (kBias | kSilu) is a template parameter
 * of every kernel. */
#ifndef CAKE_CONV_KERNELS_CUH
#define CAKE_CONV_KERNELS_CUH

#include "activation.h"

#include <stdint.h>
#include <type_traits>

namespace cake_cuda {

constexpr int kMaxTensors = 8;    /* per launch; calls with more are split, bits unchanged */
constexpr int kBlockRows = 256;   /* CAKE_DW_BLOCK_ROWS */
constexpr int kTreeWidth = 32;    /* tree leaves one tree thread folds in registers */
constexpr int kThreads = 256;
constexpr int kStepRows = 8;      /* rows whose loads are issued together (backward) */
#ifndef CAKE_CUDA_FORWARD_STEP_ROWS
#define CAKE_CUDA_FORWARD_STEP_ROWS 8
#endif
constexpr int kForwardStepRows = CAKE_CUDA_FORWARD_STEP_ROWS;
/* Steps in flight (loads run this far ahead of the math), measured best on the H200: 1 (each
 * step's loads, then its math; other warps hide the wait). Side by side (docs/PERFORMANCE.md):
 * plain main forward 416.4 -> 409.7 us queued, 3 x [8192, 4096] 109.8 -> 106.5, small 8.1 -> 7.8
 * with 1; SiLU's at 1 leaves the registers for a fourth block (CAKE_CUDA_FORWARD_SILU_MIN_BLOCKS,
 * 530.4 -> 504.9 us; at 3 blocks one stage lost, 545.1 against 531.9). */
#ifndef CAKE_CUDA_FORWARD_STAGES
#define CAKE_CUDA_FORWARD_STAGES 1
#endif
#ifndef CAKE_CUDA_FORWARD_SILU_STAGES
#define CAKE_CUDA_FORWARD_SILU_STAGES 1
#endif
#ifndef CAKE_CUDA_BACKWARD_STAGES
#define CAKE_CUDA_BACKWARD_STAGES 3
#endif
#ifndef CAKE_CUDA_DW_STAGES /* the dw walk alone (split backward, small shapes) */
#define CAKE_CUDA_DW_STAGES 3
#endif
/* 1: the walks of the memory-bound ops (plain, bias) prefetch their first rows into L2 before
 * the fragment lookup; 0: no walk does. H200, on and off side by side in two runs
 * (docs/PERFORMANCE.md): the main forward about 2 % faster, the backward unchanged; SiLU's
 * arithmetic-bound walks lose up to 2.6 % to the prefetches' issue slots and never prefetch
 * (their ops' kPrefetch). */
#ifndef CAKE_CUDA_PREFETCH
#define CAKE_CUDA_PREFETCH 1
#endif
/* SiLU's backward is bound by its arithmetic (silu' of every element), not by its loads: one
 * step in flight (each step's loads, then its math; other warps hide the wait) leaves the
 * registers of a second stage to the silu' chains. H200, side by side: main bias + SiLU
 * backward 1591 -> 1442 us queued with 1 instead of 2 (docs/PERFORMANCE.md). */
#ifndef CAKE_CUDA_BACKWARD_SILU_STAGES
#define CAKE_CUDA_BACKWARD_SILU_STAGES 1
#endif
/* Rows of the SiLU walk's step whose silu' share one range check and run side by side (the
 * tiles' CAKE_CUDA_TILE_G_ROWS; 1: a check a row). Untimed (a variant, dev/variants.txt). */
#ifndef CAKE_CUDA_BACKWARD_SILU_GROUP
#define CAKE_CUDA_BACKWARD_SILU_GROUP 1
#endif
#ifndef CAKE_CUDA_BACKWARD_MIN_BLOCKS
#define CAKE_CUDA_BACKWARD_MIN_BLOCKS 2
#endif
constexpr int kBackwardMinBlocks = CAKE_CUDA_BACKWARD_MIN_BLOCKS; /* register budget */
#ifndef CAKE_CUDA_FORWARD_ROWS
#define CAKE_CUDA_FORWARD_ROWS 64
#endif
constexpr int kForwardRows = CAKE_CUDA_FORWARD_ROWS; /* rows per forward item */

/* The variants (bits of the template parameter V): a bias, and SiLU after it. */
constexpr int kBias = 1, kSilu = 2, kVariants = 4;
__host__ __device__ constexpr int taps_of(int V) { return (V & kBias) ? 5 : 4; }

struct TensorArgs {
    const uint16_t *x, *history, *dy, *future;
    const uint16_t *future_x; /* SiLU backward: x at the future rows (the future pool's half) */
    uint16_t *y, *dx;
    const float *w;
    const float *bias;        /* [channels], with a bias */
    float *partials;          /* backward: [levels][taps][channels] fp32, see TreePass */
    unsigned *counters;       /* fused backward's fold: arrivals, [fold levels' groups][columns] */
    float *dw, *dbias;
    int64_t channels;
    int64_t work_begin; /* first item of this tensor in the launch's flat item space */
    int64_t dx_begin;   /* split backward: first dx item of this tensor */
};

/* One pass of the dw tree: level `in` (n_in roots per column) to level `in + 1`. */
struct TreePass {
    int64_t n_in, in_offset, out_offset; /* offsets in units of taps * channels floats */
    int64_t group_offset;                /* fold: the counters of earlier levels, in groups */
    int final_pass;                      /* n_in <= kTreeWidth: write dw (and dbias) */
};

/* 1: the fused backward folds the tree's first passes itself (fold_block), no tree launch for
 * them; 0 (default): a launch per pass. Measured on the H200 side by side, the fold lost: main
 * plain backward 707.1 -> 738.8 us queued, 3 x [8192, 4096] 188.0 -> 200.6, SiLU's 1407.5 ->
 * 1440.8, more than the two launches it saves (docs/PERFORMANCE.md). */
#ifndef CAKE_CUDA_DW_FOLD
#define CAKE_CUDA_DW_FOLD 0
#endif
constexpr int kMaxFoldPasses = 2; /* tree passes the fused backward folds itself */

struct ConvArgs {
    int num_tensors;
    int64_t rows;
    const int64_t *frag_start;   /* num_fragments + 1 entries, the last = rows */
    const int32_t *future_valid; /* per fragment: future rows inside its sequence (0..3) */
    int64_t num_fragments;
    int64_t num_blocks;        /* dw blocks: ceil(rows / 256) */
    int64_t rows_per_item;     /* forward and split dx: rows of one item */
    int64_t total_work;        /* items of the launch (fused backward, forward) */
    int64_t dx_work;           /* split backward: dx items; total_work then counts dw items */
    int split;                 /* backward: dx and dw in separate walks */
    int large;                 /* forward: the large calls' form (forward_lanes; the host
                                  launches its kernel) */
    int fold_passes;           /* fused backward: the first tree passes, folded by the kernel */
    TreePass fold[kMaxFoldPasses];
    TensorArgs t[kMaxTensors];
};

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/* Round to nearest even; NaN becomes the canonical 0x7fc0; same bits as src/bf16.h. */
__device__ __forceinline__ uint32_t to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded;
}

/* f, or the canonical fp32 NaN 0x7fc00000 (dw, dbias). */
__device__ __forceinline__ float canonical(float f) {
    return (__float_as_uint(f) & 0x7fffffffu) > 0x7f800000u ? __uint_as_float(0x7fc00000u) : f;
}

/* Two outputs as one bf16 pair (even channel in the low half), with to_bf16's bits. kHw: the
 * hardware's paired conversion (cvt.rn.bf16x2.f32, sm_80 and later: one F2FP instruction for
 * both, round to nearest even, subnormals kept), then a NaN's half set to the canonical 0x7fc0;
 * about 5 instructions a pair instead of about 12. Else to_bf16 on each.
 * tests/cuda/test_bf16_cuda.cu compares both with a reference on every fp32 input.
 * H200, side by side (docs/PERFORMANCE.md): the forwards and SiLU's backward gain with it (main
 * shape: plain forward 452 -> 423-426 us, SiLU forward 1244 -> 1143, backward 1681 -> 1598-1608);
 * the plain backward lost (717 -> 753-757 us), so its dx keeps the hand rounding
 * (CAKE_CUDA_HW_BF16_DX=1 gives it the hardware's; CAKE_CUDA_HW_BF16=0 none). */
#ifndef CAKE_CUDA_HW_BF16
#define CAKE_CUDA_HW_BF16 1
#endif
#ifndef CAKE_CUDA_HW_BF16_DX
#define CAKE_CUDA_HW_BF16_DX 0
#endif
constexpr bool kHwBf16 = CAKE_CUDA_HW_BF16 != 0;
constexpr bool kHwBf16Dx = kHwBf16 && CAKE_CUDA_HW_BF16_DX != 0;
/* A converted pair p of (even, odd) with a NaN's half set to the canonical 0x7fc0.
 * CAKE_CUDA_NAN_BY_MIN (default 1): the conversion gives every NaN as 0x7fff, and as signed
 * 16-bit integers every number and infinity is below 0x7fc0 (negative ones below zero), so one
 * signed minimum of both halves with 0x7fc0 (min.s16x2, sm_90) makes just that NaN 0x7fc0: one
 * instruction a pair instead of two compares and two selections (tests/cuda/test_bf16_cuda.cu
 * checks it on every fp32 pattern in both halves). H200, side by side: main bias + SiLU backward
 * 1414.0 -> 1363-1367 us queued, forward 508.6 -> 504-506 (docs/PERFORMANCE.md). 0: the
 * compares on the inputs. */
#ifndef CAKE_CUDA_NAN_BY_MIN
#define CAKE_CUDA_NAN_BY_MIN 1
#endif
__device__ __forceinline__ uint32_t canonical_pair(uint32_t p, float even, float odd) {
#if CAKE_CUDA_NAN_BY_MIN && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    (void)even;
    (void)odd;
    uint32_t r;
    asm("min.s16x2 %0, %1, %2;" : "=r"(r) : "r"(p), "r"(0x7fc07fc0u));
    return r;
#else
    if (even != even) p = (p & 0xffff0000u) | 0x7fc0u;
    if (odd != odd) p = (p & 0x0000ffffu) | 0x7fc00000u;
    return p;
#endif
}

/* pack2 without the NaN check of the hardware's conversion: for a pair the caller knows holds
 * no NaN, or passes to canonical_pair itself. */
template <bool kHw>
__device__ __forceinline__ uint32_t pack2_unchecked(float even, float odd) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    if (kHw) {
        uint32_t p;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(odd), "f"(even)); /* a: high half */
        return p;
    }
#endif
    return to_bf16(even) | (to_bf16(odd) << 16);
}

template <bool kHw>
__device__ __forceinline__ uint32_t pack2(float even, float odd) {
    const uint32_t p = pack2_unchecked<kHw>(even, odd);
    return kHw ? canonical_pair(p, even, odd) : p; /* to_bf16 makes its own NaN canonical */
}

/* L consecutive channel pairs of one row (4L bytes, one vector access). */
template <int L>
struct Vec {
    uint32_t p[L];
};

template <int L>
__device__ __forceinline__ Vec<L> load_vec(const uint16_t *ptr) {
    Vec<L> v;
    if constexpr (L == 1) {
        v.p[0] = __ldg(reinterpret_cast<const uint32_t *>(ptr));
    } else if constexpr (L == 2) {
        const uint2 u = __ldg(reinterpret_cast<const uint2 *>(ptr));
        v.p[0] = u.x;
        v.p[1] = u.y;
    } else {
        static_assert(L == 4, "1, 2 or 4 pairs per thread");
        const uint4 u = __ldg(reinterpret_cast<const uint4 *>(ptr));
        v.p[0] = u.x;
        v.p[1] = u.y;
        v.p[2] = u.z;
        v.p[3] = u.w;
    }
    return v;
}

__device__ __forceinline__ void prefetch_l2(const void *ptr) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

template <int L>
__device__ __forceinline__ void store_vec(uint16_t *ptr, const Vec<L> &v) {
    if constexpr (L == 1) *reinterpret_cast<uint32_t *>(ptr) = v.p[0];
    else if constexpr (L == 2) *reinterpret_cast<uint2 *>(ptr) = make_uint2(v.p[0], v.p[1]);
    else *reinterpret_cast<uint4 *>(ptr) = make_uint4(v.p[0], v.p[1], v.p[2], v.p[3]);
}

/* The last fragment f with frag_start[f] <= t. */
__device__ __forceinline__ int64_t fragment_of(const ConvArgs &a, int64_t t) {
    int64_t lo = 0, hi = a.num_fragments;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (__ldg(a.frag_start + mid) <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

__device__ __forceinline__ int tensor_of(const ConvArgs &a, int64_t item) {
    int i = 0;
    while (i + 1 < a.num_tensors && a.t[i + 1].work_begin <= item) i++;
    return i;
}

/* A fragment's position while walking rows. */
struct Cursor {
    int64_t f, start, end; /* fragment index and its local rows [start, end) */
    int valid;             /* SiLU backward: future rows inside the sequence */
};

__device__ __forceinline__ Cursor cursor_at(const ConvArgs &a, int64_t t, bool need_valid) {
    Cursor c;
    c.f = fragment_of(a, t);
    c.start = __ldg(a.frag_start + c.f);
    c.end = __ldg(a.frag_start + c.f + 1);
    c.valid = need_valid ? __ldg(a.future_valid + c.f) : 0;
    return c;
}

__device__ __forceinline__ void cursor_next(const ConvArgs &a, Cursor &c, bool need_valid) {
    c.f++;
    c.start = c.end;
    c.end = __ldg(a.frag_start + c.f + 1);
    if (need_valid) c.valid = __ldg(a.future_valid + c.f);
}

/* x at local row r for the cursor's fragment (before it: a history row), channels from c. */
template <int L>
__device__ __forceinline__ Vec<L> x_vec(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r >= cur.start ? load_vec<L>(T.x + r * T.channels + c)
                          : load_vec<L>(T.history + (cur.f * 3 + 3 + (r - cur.start)) * T.channels + c);
}

/* The same, also past the fragment (SiLU backward: an x row of the future pool). */
template <int L>
__device__ __forceinline__ Vec<L> x_vec_any(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r < cur.end ? x_vec<L>(T, cur, r, c)
                       : load_vec<L>(T.future_x + (cur.f * 3 + (r - cur.end)) * T.channels + c);
}

/* dy at local row r for the cursor's fragment (past it: a future row). */
template <int L>
__device__ __forceinline__ Vec<L> dy_vec(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r < cur.end ? load_vec<L>(T.dy + r * T.channels + c)
                       : load_vec<L>(T.future + (cur.f * 3 + (r - cur.end)) * T.channels + c);
}

/* Taps of channels c (even) and c + 1 (odd), and their bias (0 without one). */
struct PairWeights {
    float e[4], o[4];
    float be, bo;
};

template <int V>
__device__ __forceinline__ PairWeights load_weights(const TensorArgs &T, int64_t c) {
    const float4 we = __ldg(reinterpret_cast<const float4 *>(T.w + c * 4));
    const float4 wo = __ldg(reinterpret_cast<const float4 *>(T.w + c * 4 + 4));
    PairWeights p;
    p.e[0] = we.x; p.e[1] = we.y; p.e[2] = we.z; p.e[3] = we.w;
    p.o[0] = wo.x; p.o[1] = wo.y; p.o[2] = wo.z; p.o[3] = wo.w;
    p.be = p.bo = 0.0f;
    if (V & kBias) {
        const float2 b = __ldg(reinterpret_cast<const float2 *>(T.bias + c));
        p.be = b.x;
        p.bo = b.y;
    }
    return p;
}

/* The weights of L pairs from channel c. */
template <int V, int L>
struct LaneWeights {
    PairWeights w[L];
    __device__ __forceinline__ void load(const TensorArgs &T, int64_t c) {
#pragma unroll
        for (int l = 0; l < L; l++) w[l] = load_weights<V>(T, c + 2 * l);
    }
};

/* a of rows with x(t-3) .. x(t) = x0 .. x3: the four fmas, then the bias. */
template <int V>
__device__ __forceinline__ float2 conv_pair(const PairWeights &w, uint32_t x0, uint32_t x1,
                                            uint32_t x2, uint32_t x3) {
    float e = __fmaf_rn(w.e[0], bf16_lo(x0), 0.0f), o = __fmaf_rn(w.o[0], bf16_hi(x0), 0.0f);
    e = __fmaf_rn(w.e[1], bf16_lo(x1), e);
    o = __fmaf_rn(w.o[1], bf16_hi(x1), o);
    e = __fmaf_rn(w.e[2], bf16_lo(x2), e);
    o = __fmaf_rn(w.o[2], bf16_hi(x2), o);
    e = __fmaf_rn(w.e[3], bf16_lo(x3), e);
    o = __fmaf_rn(w.o[3], bf16_hi(x3), o);
    if (V & kBias) {
        e = __fadd_rn(e, w.be);
        o = __fadd_rn(o, w.bo);
    }
    return make_float2(e, o);
}

/* ---- the walk over rows -------------------------------------------------------------------
 * A thread owns L adjacent channel pairs (4L bytes of a row: a warp reads 128L contiguous bytes)
 * and walks rows in order, so the dw partial of a 256-row block is one sequential chain as the
 * numerics define it, and the x / dy windows stay in registers. Inside a fragment the loads of
 * kStages steps of kRows rows are in flight ahead of the math (a register ring, or shared
 * memory for BackwardAsyncOp); at fragment edges and in the last few rows a slow path reads row
 * by row through the pools. `Op` supplies the loads and the math of one direction. */
template <class Op>
__device__ __forceinline__ void walk_rows(const ConvArgs &a, const TensorArgs &T, Op &op,
                                          int64_t t0, int64_t t1, int64_t c) {
    if (CAKE_CUDA_PREFETCH && Op::kPrefetch) /* the first steps' rows, while the lookup waits */
        for (int64_t t = t0 < 3 ? 0 : t0 - 3; t < t0 + Op::kRows && t < a.rows; t++)
            op.prefetch(T, t, c);
    Cursor cur = cursor_at(a, t0, Op::kNeedValid);
    op.refill(T, cur, t0, c);
    int64_t t = t0;
    while (t < t1) {
        if (t == cur.end) { /* a new fragment starts here: windows come from its pools */
            cursor_next(a, cur, Op::kNeedValid);
            op.refill(T, cur, t, c);
        }
        /* Rows whose every read is a local row of this fragment. */
        const int64_t fast_end = cur.end - Op::kLookahead < t1 ? cur.end - Op::kLookahead : t1;
        const int64_t steps = fast_end > t ? (fast_end - t) / Op::kRows : 0;
        if (steps == 0) {
            op.slow_row(T, cur, t, c);
            t++;
            continue;
        }
        constexpr int S = Op::kStages;
        typename Op::Stage ring[S];
#pragma unroll
        for (int d = 0; d < S - 1; d++)
            if (d < steps) op.load(T, ring[d], t + d * Op::kRows, c);
        for (int64_t k = 0; k < steps; k += S) {
#pragma unroll
            for (int d = 0; d < S; d++) {
                if (k + d < steps) {
                    if (k + d + S - 1 < steps)
                        op.load(T, ring[(d + S - 1) % S], t + (k + d + S - 1) * Op::kRows, c);
                    op.step(T, ring[d], t + (k + d) * Op::kRows, c);
                }
            }
        }
        t += steps * Op::kRows;
    }
}

/* ---- forward ------------------------------------------------------------------------------ */

/* Channel pairs per thread: 8-byte accesses stream closer to the copy bandwidth than 4-byte
 * ones (dev/copy_widths.py on the H200: 3.93 against 3.66 TB/s), which the memory-bound plain
 * and bias forwards use (H200: 92 % of copy against 83 %); SiLU's forward is bound by its
 * arithmetic and runs faster with one pair and more warps (1.40 against 1.51 ms at the main
 * shape). The plain and bias backward takes two pairs (its ring in shared memory:
 * CAKE_CUDA_BACKWARD_ASYNC_STAGES); SiLU's keeps one (its registers go to silu'). The split
 * walks follow CAKE_CUDA_BACKWARD_LANES too: at two pairs their register rings spill (ptxas,
 * about 550 bytes a thread), which only cooperative calls and tile-less builds run. */
#ifndef CAKE_CUDA_FORWARD_LANES
#define CAKE_CUDA_FORWARD_LANES 2
#endif
#ifndef CAKE_CUDA_FORWARD_SILU_LANES
#define CAKE_CUDA_FORWARD_SILU_LANES 1
#endif
#ifndef CAKE_CUDA_BACKWARD_LANES
#define CAKE_CUDA_BACKWARD_LANES 2
#endif
#ifndef CAKE_CUDA_BACKWARD_SILU_LANES
#define CAKE_CUDA_BACKWARD_SILU_LANES 1
#endif
/* SiLU's forward for calls large enough to give every resident thread of its kernel a whole
 * item (the host's pick_large_forward): two pairs a thread at 3 blocks, quick sequences in
 * batches of 2 rows. H200, queued: 474.9-475.4 against 503.6 us with the one-pair form at the
 * main shape, 122.8-123.3 against 130.9 at 3 x [8192, 4096]; but 11.6 against 10.4-10.7 at 1 x
 * [2048, 2048] (an earlier run), where fewer, wider items leave the GPU part idle, so smaller
 * calls keep the one-pair form (docs/PERFORMANCE.md). The plain and bias forwards have one. */
#ifndef CAKE_CUDA_FORWARD_SILU_LARGE_LANES
#define CAKE_CUDA_FORWARD_SILU_LARGE_LANES 2
#endif
#ifndef CAKE_CUDA_FORWARD_SILU_LARGE_MIN_BLOCKS
#define CAKE_CUDA_FORWARD_SILU_LARGE_MIN_BLOCKS 3
#endif
#ifndef CAKE_CUDA_SILU_LARGE_BATCH_ROWS
#define CAKE_CUDA_SILU_LARGE_BATCH_ROWS 2
#endif
__host__ __device__ constexpr int forward_lanes(int V, bool large = false) {
    return (V & kSilu) ? (large ? CAKE_CUDA_FORWARD_SILU_LARGE_LANES : CAKE_CUDA_FORWARD_SILU_LANES)
                       : CAKE_CUDA_FORWARD_LANES;
}
__host__ __device__ constexpr int backward_lanes(int V) {
    return (V & kSilu) ? CAKE_CUDA_BACKWARD_SILU_LANES : CAKE_CUDA_BACKWARD_LANES;
}
/* Channels of one backward thread (the walks' items, the fold's counters). */
__host__ __device__ constexpr int backward_column(int V) { return 2 * backward_lanes(V); }

/* SiLU's forward by the quick sequence, the full one only where the quick one cannot decide the
 * bf16 (same bits: docs/NUMERICS.md 9.8); CAKE_CUDA_SILU_QUICK=0 runs the full sequence for every
 * element. CAKE_CUDA_SILU_BATCH_ROWS: rows of a step whose quick sequences run before any full
 * one (ForwardOp::silu_step; 0: element by element; CAKE_CUDA_SILU_LARGE_BATCH_ROWS in the large
 * calls' form, CAKE_CUDA_FORWARD_SILU_LARGE_LANES). CAKE_CUDA_SILU_FULL_CALL=1: the full
 * sequence as one function called where needed, instead of a copy inlined at every element. */
#ifndef CAKE_CUDA_SILU_QUICK
#define CAKE_CUDA_SILU_QUICK 1
#endif
#ifndef CAKE_CUDA_SILU_BATCH_ROWS
#define CAKE_CUDA_SILU_BATCH_ROWS 4
#endif
/* The batch rows of the forward's form (`large`: pick_large_forward's). */
__host__ __device__ constexpr int forward_silu_batch_rows(bool large) {
    return large ? CAKE_CUDA_SILU_LARGE_BATCH_ROWS : CAKE_CUDA_SILU_BATCH_ROWS;
}
#ifndef CAKE_CUDA_SILU_FULL_CALL
#define CAKE_CUDA_SILU_FULL_CALL 1
#endif
/* 1: silu_step makes only the full sequence's NaNs canonical (the quick sequence never gives a
 * NaN), two compares and two selections a pair fewer; 0: pack2's check on every pair. H200,
 * main-shape bias + SiLU forward 650.7 -> 612.8 us queued (docs/PERFORMANCE.md). */
#ifndef CAKE_CUDA_SILU_NAN_BY_FULL
#define CAKE_CUDA_SILU_NAN_BY_FULL 1
#endif
constexpr bool kSiluNanByFull = CAKE_CUDA_SILU_NAN_BY_FULL != 0;
/* The full sequences where the quick or unscaled ones cannot serve: called, or inlined at every
 * use (CAKE_CUDA_SILU_FULL_CALL=0). */
#if CAKE_CUDA_SILU_FULL_CALL
#define CAKE_SILU_FULL_FN static __device__ __noinline__
#else
#define CAKE_SILU_FULL_FN static __device__ __forceinline__
#endif
CAKE_SILU_FULL_FN float silu_full(float a) { return cake_silu(a); }
CAKE_SILU_FULL_FN float silu_grad_full(float a) { return cake_silu_grad(a); }
/* silu' of N channel pairs by cake_silu_grad_unscaled where every a is within its range (the
 * same bits, about 10 of silu''s 85 instructions fewer, src/activation.h), else by the full
 * sequence, called (|a| > 44 or NaN: rare in activations, so its code stays out of the loop).
 * One range check for all N pairs, so that their sequences run side by side.
 * CAKE_CUDA_SILU_GRAD_UNSCALED=0: the full sequence always. */
#ifndef CAKE_CUDA_SILU_GRAD_UNSCALED
#define CAKE_CUDA_SILU_GRAD_UNSCALED 1
#endif
template <int N>
__device__ __forceinline__ void silu_grad_pairs(const float2 (&a)[N], float2 (&d)[N]) {
    bool in = CAKE_CUDA_SILU_GRAD_UNSCALED; /* compares, false for a NaN (fmaxf would drop it) */
#pragma unroll
    for (int n = 0; n < N; n++)
        in = in && fabsf(a[n].x) <= CAKE_ACT_UNSCALED_MAX && fabsf(a[n].y) <= CAKE_ACT_UNSCALED_MAX;
    if (in) {
#pragma unroll
        for (int n = 0; n < N; n++)
            d[n] = make_float2(cake_silu_grad_unscaled(a[n].x), cake_silu_grad_unscaled(a[n].y));
    } else {
#pragma unroll
        for (int n = 0; n < N; n++)
            d[n] = make_float2(silu_grad_full(a[n].x), silu_grad_full(a[n].y));
    }
}
/* silu_grad_pairs of one pair */
__device__ __forceinline__ float2 silu_grad_pair(float2 a) {
    const float2 in[1] = {a};
    float2 d[1];
    silu_grad_pairs<1>(in, d);
    return d[0];
}

/* f, through an instruction the compiler cannot see into: a value it must compute again from. */
__device__ __forceinline__ float opaque_f32(float f) {
    float r;
    asm("mov.b32 %0, %1;" : "=f"(r) : "f"(f));
    return r;
}
__device__ __forceinline__ float silu_for_y(float a) {
    if (!CAKE_CUDA_SILU_QUICK) return cake_silu(a);
    uint32_t ok;
    const float q = cake_silu_quick_(a, &ok);
    return ok ? q : silu_full(a);
}

/* kSiluBatchWanted: forward_silu_batch_rows of the form. */
template <int V, int L, int kSiluBatchWanted>
struct ForwardOp {
    static constexpr bool kPrefetch = (V & kSilu) == 0;
    static constexpr int kLookahead = 0;
    static constexpr int kStages = (V & kSilu) ? CAKE_CUDA_FORWARD_SILU_STAGES : CAKE_CUDA_FORWARD_STAGES;
    static constexpr int kRows = kForwardStepRows;
    static constexpr bool kNeedValid = false;
    struct Stage {
        Vec<L> x[kRows];
    };
    LaneWeights<V, L> w;
    Vec<L> x0, x1, x2; /* x(t-3), x(t-2), x(t-1) */

    __device__ __forceinline__ void refill(const TensorArgs &T, const Cursor &cur, int64_t t, int64_t c) {
        x0 = x_vec<L>(T, cur, t - 3, c);
        x1 = x_vec<L>(T, cur, t - 2, c);
        x2 = x_vec<L>(T, cur, t - 1, c);
    }
    __device__ __forceinline__ void prefetch(const TensorArgs &T, int64_t t, int64_t c) const {
        prefetch_l2(T.x + t * T.channels + c);
    }
    __device__ __forceinline__ void row(const TensorArgs &T, int64_t t, int64_t c, const Vec<L> &xt) {
        Vec<L> y;
#pragma unroll
        for (int l = 0; l < L; l++) {
            float2 a = conv_pair<V>(w.w[l], x0.p[l], x1.p[l], x2.p[l], xt.p[l]);
            if (V & kSilu) {
                a.x = silu_for_y(a.x);
                a.y = silu_for_y(a.y);
            }
            y.p[l] = pack2<kHwBf16>(a.x, a.y);
        }
        store_vec<L>(T.y + t * T.channels + c, y);
        x0 = x1;
        x1 = x2;
        x2 = xt;
    }
    __device__ __forceinline__ void load(const TensorArgs &T, Stage &s, int64_t t, int64_t c) {
#pragma unroll
        for (int r = 0; r < kRows; r++) s.x[r] = load_vec<L>(T.x + (t + r) * T.channels + c);
    }
    __device__ __forceinline__ void step(const TensorArgs &T, const Stage &s, int64_t t, int64_t c) {
        if ((V & kSilu) && CAKE_CUDA_SILU_QUICK && kSiluBatchWanted > 0) {
            silu_step(T, s, t, c);
        } else {
#pragma unroll
            for (int r = 0; r < kRows; r++) row(T, t + r, c, s.x[r]);
        }
    }
    __device__ __forceinline__ void slow_row(const TensorArgs &T, const Cursor &, int64_t t, int64_t c) {
        row(T, t, c, load_vec<L>(T.x + t * T.channels + c));
    }

    /* Row t + k's x for k in [-3, kRows): the window before the step, then the stage's rows. */
    __device__ __forceinline__ static const Vec<L> &x_at(const Stage &s, const Vec<L> (&h)[3], int k) {
        return k < 0 ? h[k + 3] : s.x[k];
    }
    __device__ __forceinline__ float2 a_at(const Stage &s, const Vec<L> (&h)[3], int r, int l) const {
        return conv_pair<V>(w.w[l], x_at(s, h, r - 3).p[l], x_at(s, h, r - 2).p[l],
                            x_at(s, h, r - 1).p[l], s.x[r].p[l]);
    }
    /* A step with SiLU, kSiluBatch rows at a time: the quick sequence for all of their elements
     * first (independent chains the scheduler interleaves, no branch between them), then the
     * full sequence only for the elements whose bf16 the quick one cannot decide (about 2.6 in
     * 10^4 of ordinary inputs: docs/NUMERICS.md 9.8), their a recomputed (the same fmas, the
     * same bits), then the stores. */
    static constexpr int kSiluBatch =
        kSiluBatchWanted < 1 ? 1 : kSiluBatchWanted < kRows ? kSiluBatchWanted : kRows;
    __device__ __forceinline__ void silu_step(const TensorArgs &T, const Stage &s, int64_t t, int64_t c) {
        static_assert(kRows % kSiluBatch == 0, "whole batches in a step");
        const Vec<L> h[3] = {x0, x1, x2};
#pragma unroll
        for (int r0 = 0; r0 < kRows; r0 += kSiluBatch) {
            float2 q[kSiluBatch][L];
            bool undecided = false; /* an element of the batch whose bf16 q cannot decide */
#pragma unroll
            for (int b = 0; b < kSiluBatch; b++)
#pragma unroll
                for (int l = 0; l < L; l++) {
                    const float2 a = a_at(s, h, r0 + b, l);
                    uint32_t ok_e, ok_o;
                    q[b][l].x = cake_silu_quick_(a.x, &ok_e);
                    q[b][l].y = cake_silu_quick_(a.y, &ok_o);
                    undecided |= (ok_e & ok_o) == 0u;
                }
            /* Rare: the elements are found again (q kept, a recomputed: the same fmas, the same
             * bits), so the common path keeps one flag, not a bit per element (a and q pass through
             * opaque_f32, or the compiler keeps each element's test results from above). */
            if (undecided) {
#pragma unroll
                for (int b = 0; b < kSiluBatch; b++)
#pragma unroll
                    for (int l = 0; l < L; l++) {
                        const float2 a = a_at(s, h, r0 + b, l);
                        const float ae = opaque_f32(a.x), ao = opaque_f32(a.y);
                        if (!cake_silu_quick_decides_(ae, opaque_f32(q[b][l].x))) q[b][l].x = silu_full(ae);
                        if (!cake_silu_quick_decides_(ao, opaque_f32(q[b][l].y))) q[b][l].y = silu_full(ao);
                    }
            }
            /* A NaN y comes only from the full sequence (the quick one decides finite a alone),
             * so only a batch that ran it needs the canonical NaN of pack2. */
            Vec<L> y[kSiluBatch];
#pragma unroll
            for (int b = 0; b < kSiluBatch; b++)
#pragma unroll
                for (int l = 0; l < L; l++)
                    y[b].p[l] = kSiluNanByFull ? pack2_unchecked<kHwBf16>(q[b][l].x, q[b][l].y)
                                               : pack2<kHwBf16>(q[b][l].x, q[b][l].y);
            if (kSiluNanByFull && kHwBf16 && undecided) {
#pragma unroll
                for (int b = 0; b < kSiluBatch; b++)
#pragma unroll
                    for (int l = 0; l < L; l++) y[b].p[l] = canonical_pair(y[b].p[l], q[b][l].x, q[b][l].y);
            }
#pragma unroll
            for (int b = 0; b < kSiluBatch; b++) store_vec<L>(T.y + (t + r0 + b) * T.channels + c, y[b]);
        }
        x0 = x_at(s, h, kRows - 3);
        x1 = x_at(s, h, kRows - 2);
        x2 = x_at(s, h, kRows - 1);
    }
};

/* Rows [t0, t0 + rows_per_item) of forward_lanes(V, large) channel pairs from c, in the form
 * `large` (the host's pick_large_forward). */
template <int V, bool large>
__device__ void forward_item(const ConvArgs &a, const TensorArgs &T, int64_t t0, int64_t c) {
    const int64_t t1 = t0 + a.rows_per_item < a.rows ? t0 + a.rows_per_item : a.rows;
    ForwardOp<V, forward_lanes(V, large), forward_silu_batch_rows(large)> op;
    op.w.load(T, c);
    walk_rows(a, T, op, t0, t1, c);
}

/* ---- backward ----------------------------------------------------------------------------- */

/* Block partials of one channel pair: dw taps, and dbias with a bias. */
template <int V>
struct Partials {
    float pe[4], po[4], be, bo;
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int k = 0; k < 4; k++) pe[k] = po[k] = 0.0f; /* p = +0.0f */
        be = bo = 0.0f;
    }
    /* p[k] += g * x(t-3+k) in row order (and dbias += g). */
    __device__ __forceinline__ void add(float ge, float go, uint32_t x0, uint32_t x1, uint32_t x2,
                                        uint32_t x3) {
        pe[0] = __fmaf_rn(ge, bf16_lo(x0), pe[0]);
        po[0] = __fmaf_rn(go, bf16_hi(x0), po[0]);
        pe[1] = __fmaf_rn(ge, bf16_lo(x1), pe[1]);
        po[1] = __fmaf_rn(go, bf16_hi(x1), po[1]);
        pe[2] = __fmaf_rn(ge, bf16_lo(x2), pe[2]);
        po[2] = __fmaf_rn(go, bf16_hi(x2), po[2]);
        pe[3] = __fmaf_rn(ge, bf16_lo(x3), pe[3]);
        po[3] = __fmaf_rn(go, bf16_hi(x3), po[3]);
        if (V & kBias) {
            be = __fadd_rn(be, ge);
            bo = __fadd_rn(bo, go);
        }
    }
    /* Level 0 of the tree for block b: [b][taps][channels]. */
    __device__ __forceinline__ void store(const TensorArgs &T, int64_t b, int64_t c) const {
        float *dst = T.partials + b * taps_of(V) * T.channels + c;
#pragma unroll
        for (int k = 0; k < 4; k++)
            *reinterpret_cast<float2 *>(dst + k * T.channels) = make_float2(pe[k], po[k]);
        if (V & kBias) *reinterpret_cast<float2 *>(dst + 4 * T.channels) = make_float2(be, bo);
    }
};

/* The partials of one channel (the tiles' and the panels' chains, a thread per channel): the
 * four taps' p_k = fma(g(t), x(t - 3 + k), p_k) and dbias's p = p + g(t), row after row, with the
 * window x(t - 3) .. x(t - 1). */
template <int V>
struct ChannelChains {
    float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f, pb = 0.0f; /* as Partials::zero */
    float x0, x1, x2;
    __device__ __forceinline__ void row(float g, float x3) {
        p0 = __fmaf_rn(g, x0, p0);
        p1 = __fmaf_rn(g, x1, p1);
        p2 = __fmaf_rn(g, x2, p2);
        p3 = __fmaf_rn(g, x3, p3);
        if (V & kBias) pb = __fadd_rn(pb, g);
        x0 = x1;
        x1 = x2;
        x2 = x3;
    }
    /* taps 0 .. 3, then dbias (with a bias), `stride` floats apart */
    __device__ __forceinline__ void store(float *dst, int64_t stride) const {
        dst[0] = p0;
        dst[stride] = p1;
        dst[2 * stride] = p2;
        dst[3 * stride] = p3;
        if (V & kBias) dst[4 * stride] = pb;
    }
};

/* dx(t) = sum_j w[3-j] * g(t+j), j = 0..3, in that order; kHw: pack2's. */
template <bool kHw>
__device__ __forceinline__ uint32_t dx_pair(const PairWeights &w, float g0e, float g0o, float g1e,
                                            float g1o, float g2e, float g2o, float g3e, float g3o) {
    float e = __fmaf_rn(w.e[3], g0e, 0.0f), o = __fmaf_rn(w.o[3], g0o, 0.0f);
    e = __fmaf_rn(w.e[2], g1e, e);
    o = __fmaf_rn(w.o[2], g1o, o);
    e = __fmaf_rn(w.e[1], g2e, e);
    o = __fmaf_rn(w.o[1], g2o, o);
    e = __fmaf_rn(w.e[0], g3e, e);
    o = __fmaf_rn(w.o[0], g3o, o);
    return pack2<kHw>(e, o);
}

/* The backward of L channel pairs without SiLU (g = dy): dx (kDx) and the block partials
 * (kDw). Both at once read x and dy once; apart, each walk is lighter, which pays when there
 * are too few dw blocks to fill the GPU (small shapes): dx then splits rows freely like the
 * forward. */
template <bool kDx, bool kDw, int V, int L>
struct BackwardOp {
    static constexpr bool kPrefetch = true; /* (no SiLU: BackwardSiluOp) */
    static constexpr int kLookahead = kDx ? 3 : 0; /* dx(t) reads dy(t + 3) */
    static constexpr int kStages = kDx ? CAKE_CUDA_BACKWARD_STAGES : CAKE_CUDA_DW_STAGES;
    static constexpr int kRows = kStepRows;
    static constexpr bool kNeedValid = false;
    struct Stage {
        Vec<L> x[kDw ? kStepRows : 1], g[kStepRows]; /* x(t + r); dy(t + r + lookahead) */
    };
    LaneWeights<V, L> w;
    Partials<V> p[L];
    Vec<L> x0, x1, x2; /* x(t-3), x(t-2), x(t-1) */
    Vec<L> g0, g1, g2; /* dy(t), dy(t+1), dy(t+2) */

    __device__ __forceinline__ void refill(const TensorArgs &T, const Cursor &cur, int64_t t, int64_t c) {
        if (kDw) {
            x0 = x_vec<L>(T, cur, t - 3, c);
            x1 = x_vec<L>(T, cur, t - 2, c);
            x2 = x_vec<L>(T, cur, t - 1, c);
        }
        if (kDx) {
            g0 = dy_vec<L>(T, cur, t, c);
            g1 = dy_vec<L>(T, cur, t + 1, c);
            g2 = dy_vec<L>(T, cur, t + 2, c);
        }
    }
    __device__ __forceinline__ void prefetch(const TensorArgs &T, int64_t t, int64_t c) const {
        if (kDw) prefetch_l2(T.x + t * T.channels + c);
        prefetch_l2(T.dy + t * T.channels + c);
    }
    /* `g` is dy(t + 3) for dx, dy(t) for dw alone. */
    __device__ __forceinline__ void row(const TensorArgs &T, int64_t t, int64_t c, const Vec<L> &xt,
                                        const Vec<L> &g) {
        if (kDx) {
            Vec<L> dx;
#pragma unroll
            for (int l = 0; l < L; l++)
                dx.p[l] = dx_pair<kHwBf16Dx>(w.w[l], bf16_lo(g0.p[l]), bf16_hi(g0.p[l]),
                                             bf16_lo(g1.p[l]), bf16_hi(g1.p[l]), bf16_lo(g2.p[l]),
                                             bf16_hi(g2.p[l]), bf16_lo(g.p[l]), bf16_hi(g.p[l]));
            store_vec<L>(T.dx + t * T.channels + c, dx);
        }
        if (kDw) {
            const Vec<L> &gt = kDx ? g0 : g;
#pragma unroll
            for (int l = 0; l < L; l++)
                p[l].add(bf16_lo(gt.p[l]), bf16_hi(gt.p[l]), x0.p[l], x1.p[l], x2.p[l], xt.p[l]);
            x0 = x1; x1 = x2; x2 = xt;
        }
        if (kDx) {
            g0 = g1; g1 = g2; g2 = g;
        }
    }
    __device__ __forceinline__ void load(const TensorArgs &T, Stage &s, int64_t t, int64_t c) {
#pragma unroll
        for (int r = 0; r < kStepRows; r++) {
            if (kDw) s.x[r] = load_vec<L>(T.x + (t + r) * T.channels + c);
            s.g[r] = load_vec<L>(T.dy + (t + r + kLookahead) * T.channels + c);
        }
    }
    __device__ __forceinline__ void step(const TensorArgs &T, const Stage &s, int64_t t, int64_t c) {
#pragma unroll
        for (int r = 0; r < kStepRows; r++) row(T, t + r, c, s.x[kDw ? r : 0], s.g[r]);
    }
    __device__ __forceinline__ void slow_row(const TensorArgs &T, const Cursor &cur, int64_t t, int64_t c) {
        Vec<L> xt = {};
        if (kDw) xt = load_vec<L>(T.x + t * T.channels + c);
        row(T, t, c, xt, dy_vec<L>(T, cur, t + kLookahead, c));
    }
};

/* The backward through SiLU: g(t) = dy(t) * silu'(a(t)), a recomputed from x(t-3) .. x(t), and
 * +0.0 at or past the sequence end. The walk keeps x(t - 3) .. x(t + L - 1) and g(t) ..
 * g(t + K - 1), K = 3 with dx (dx(t) needs g(t + 3)) and 0 for dw alone; each row loads x and
 * dy of row t + K, computes its g, then dx(t) and the partials of row t. */
template <bool kDx, bool kDw, int V, int L>
struct BackwardSiluOp {
    static constexpr bool kPrefetch = false;
    static constexpr int kLookahead = kDx ? 3 : 0;
    static constexpr int kStages = CAKE_CUDA_BACKWARD_SILU_STAGES;
    static constexpr int kRows = kStepRows;
    static constexpr bool kNeedValid = true;
    struct Stage {
        Vec<L> x[kStepRows], d[kStepRows]; /* x(t + r + K), dy(t + r + K) */
    };
    LaneWeights<V, L> w;
    Partials<V> p[L];
    Vec<L> xw[6];           /* x(t-3) .. x(t+K-1): 3 + K entries used */
    float ge[3][L], go[3][L]; /* g(t) .. g(t+K-1) (dx only) */

    __device__ __forceinline__ void prefetch(const TensorArgs &T, int64_t t, int64_t c) const {
        prefetch_l2(T.x + t * T.channels + c);
        prefetch_l2(T.dy + t * T.channels + c);
    }
    /* g of pair l of a row from its dy and the four x rows ending at it. */
    __device__ __forceinline__ float2 g_pair(int l, uint32_t dy, uint32_t x0, uint32_t x1,
                                             uint32_t x2, uint32_t x3, bool valid) const {
        const float2 d = silu_grad_pair(conv_pair<V>(w.w[l], x0, x1, x2, x3));
        const float e = __fmul_rn(bf16_lo(dy), d.x);
        const float o = __fmul_rn(bf16_hi(dy), d.y);
        return valid ? make_float2(e, o) : make_float2(0.0f, 0.0f);
    }
    __device__ __forceinline__ void refill(const TensorArgs &T, const Cursor &cur, int64_t t, int64_t c) {
        /* x(t-3) .. x(t+K-1) through the pools; g(t) .. g(t+K-1) from them. */
#pragma unroll
        for (int j = 0; j < 3 + kLookahead; j++) xw[j] = x_vec_any<L>(T, cur, t - 3 + j, c);
#pragma unroll
        for (int j = 0; j < kLookahead; j++) {
            const int64_t r = t + j;
            const Vec<L> d = dy_vec<L>(T, cur, r, c);
#pragma unroll
            for (int l = 0; l < L; l++) {
                const float2 g = g_pair(l, d.p[l], xw[j].p[l], xw[j + 1].p[l], xw[j + 2].p[l],
                                        xw[j + 3].p[l], r - cur.end < cur.valid);
                ge[j][l] = g.x;
                go[j][l] = g.y;
            }
        }
    }
    /* Row t, given x and dy of row t + K (valid: that row is inside the sequence); dx(t) goes
     * to dx_row. */
    __device__ __forceinline__ void row(uint16_t *dx_row, const Vec<L> &xn, const Vec<L> &dn,
                                        bool valid) {
        constexpr int K = kLookahead;
        float2 g[L]; /* a of row t + K from x(t+K-3) .. x(t+K) = xw[K] .. xw[K+2], xn */
#pragma unroll
        for (int l = 0; l < L; l++)
            g[l] = g_pair(l, dn.p[l], xw[K].p[l], xw[K + 1].p[l], xw[K + 2].p[l], xn.p[l], valid);
        row_g(dx_row, xn, g);
    }
    /* row(), given g of row t + K */
    __device__ __forceinline__ void row_g(uint16_t *dx_row, const Vec<L> &xn, const float2 (&g)[L]) {
        constexpr int K = kLookahead;
        Vec<L> dx;
#pragma unroll
        for (int l = 0; l < L; l++) {
            const float2 gn = g[l];
            const float gte = K ? ge[0][l] : gn.x, gto = K ? go[0][l] : gn.y;
            if (kDx)
                dx.p[l] = dx_pair<kHwBf16>(w.w[l], ge[0][l], go[0][l], ge[1][l], go[1][l],
                                           ge[2][l], go[2][l], gn.x, gn.y);
            if (kDw) p[l].add(gte, gto, xw[0].p[l], xw[1].p[l], xw[2].p[l], K ? xw[3].p[l] : xn.p[l]);
            if (kDx) {
                ge[0][l] = ge[1][l]; go[0][l] = go[1][l];
                ge[1][l] = ge[2][l]; go[1][l] = go[2][l];
                ge[2][l] = gn.x; go[2][l] = gn.y;
            }
        }
        if (kDx) store_vec<L>(dx_row, dx);
        /* shift the window by one row */
#pragma unroll
        for (int j = 0; j < 2 + K; j++) xw[j] = xw[j + 1];
        xw[2 + K] = xn;
    }
    /* The step's rows through pointers advanced a row at a time (a 64-bit add each) instead of
     * row * channels for every row: this walk is bound by its instructions (H200, main shape:
     * 1750 -> 1639 us queued with the one-compare G2 test, docs/PERFORMANCE.md). */
    __device__ __forceinline__ void load(const TensorArgs &T, Stage &s, int64_t t, int64_t c) {
        const int64_t first = (t + kLookahead) * T.channels + c;
        const uint16_t *x = T.x + first, *dy = T.dy + first;
#pragma unroll
        for (int r = 0; r < kStepRows; r++, x += T.channels, dy += T.channels) {
            s.x[r] = load_vec<L>(x);
            s.d[r] = load_vec<L>(dy);
        }
    }
    __device__ __forceinline__ void step(const TensorArgs &T, const Stage &s, int64_t t, int64_t c) {
        constexpr int K = kLookahead, G = CAKE_CUDA_BACKWARD_SILU_GROUP;
        static_assert(kStepRows % G == 0, "groups of whole steps");
        uint16_t *dx = kDx ? T.dx + t * T.channels + c : nullptr;
        if constexpr (G == 1) {
#pragma unroll
            for (int r = 0; r < kStepRows; r++, dx += kDx ? T.channels : 0)
                row(dx, s.x[r], s.d[r], true);
        } else {
#pragma unroll
            for (int r0 = 0; r0 < kStepRows; r0 += G) {
                /* a of rows t + K + r0 .. + G - 1: x(t + K + r0 + m) is xw[K + 3 + m] for m < 0 */
                float2 av[G * L], dsilu[G * L];
#pragma unroll
                for (int r = 0; r < G; r++) {
#pragma unroll
                    for (int l = 0; l < L; l++) {
                        uint32_t xa[4];
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            const int m = r - 3 + j;
                            xa[j] = m < 0 ? xw[K + 3 + m].p[l] : s.x[r0 + m].p[l];
                        }
                        av[r * L + l] = conv_pair<V>(w.w[l], xa[0], xa[1], xa[2], xa[3]);
                    }
                }
                silu_grad_pairs<G * L>(av, dsilu);
#pragma unroll
                for (int r = 0; r < G; r++, dx += kDx ? T.channels : 0) {
                    float2 g[L];
#pragma unroll
                    for (int l = 0; l < L; l++)
                        g[l] = make_float2(__fmul_rn(bf16_lo(s.d[r0 + r].p[l]), dsilu[r * L + l].x),
                                           __fmul_rn(bf16_hi(s.d[r0 + r].p[l]), dsilu[r * L + l].y));
                    row_g(dx, s.x[r0 + r], g);
                }
            }
        }
    }
    __device__ __forceinline__ void slow_row(const TensorArgs &T, const Cursor &cur, int64_t t, int64_t c) {
        const int64_t r = t + kLookahead;
        row(kDx ? T.dx + t * T.channels + c : nullptr, x_vec_any<L>(T, cur, r, c),
            dy_vec<L>(T, cur, r, c), r - cur.end < cur.valid);
    }
};

/* ---- the fused plain and bias backward with its load ring in shared memory ------------------
 * CAKE_CUDA_BACKWARD_ASYNC_STAGES = S > 0: the walk's loads go by cp.async (LDGSTS) into S
 * stages of shared memory instead of registers, so the ring no longer costs the registers that
 * kept the walk at one channel pair (4-byte accesses) a thread. Each thread copies and reads
 * only its own slots, so no barrier: it waits for its own copy groups (cp.async.wait_group), one
 * group a stage. A slot is refilled only after the step that read it (program order; the copy
 * lands long after the earlier shared loads issued). 0: the ring in registers. H200, side by
 * side, queued (docs/PERFORMANCE.md): S = 3 with two pairs a thread (8-byte accesses, 96 KB a
 * block, 2 blocks a multiprocessor) took the main plain backward from 709.2 to 636.8 us (86.5 ->
 * 98.5 % of copy), 3 x [8192, 4096] from 188.8 to 172.3; one pair with 6 stages or with 4 stages
 * at 3 blocks lost (740.6, 727.9): the access width, not the depth, was the limit. */
#ifndef CAKE_CUDA_BACKWARD_ASYNC_STAGES
#define CAKE_CUDA_BACKWARD_ASYNC_STAGES 3
#endif
constexpr int kBackwardAsyncStages = CAKE_CUDA_BACKWARD_ASYNC_STAGES;

/* Dynamic shared memory of the fused backward kernel of variant V. */
__host__ __device__ constexpr int backward_fused_shared_bytes(int V) {
    return (V & kSilu) || kBackwardAsyncStages == 0
               ? 0
               : kBackwardAsyncStages * kStepRows * 2 * kThreads * 4 * backward_lanes(V);
}

template <int B> /* bytes: 4, 8 or 16 */
__device__ __forceinline__ void cp_async(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (B == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(src), "n"(B) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits until at most n (<= N) of this thread's copy groups are pending. */
template <int N>
__device__ __forceinline__ void cp_async_wait_at_most(int n) {
    if constexpr (N == 0) {
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    } else {
        if (n >= N) asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
        else cp_async_wait_at_most<N - 1>(n);
    }
}

template <int L>
__device__ __forceinline__ Vec<L> shared_vec(const uint32_t *ptr) {
    Vec<L> v;
    if constexpr (L == 1) {
        v.p[0] = *ptr;
    } else if constexpr (L == 2) {
        const uint2 u = *reinterpret_cast<const uint2 *>(ptr);
        v.p[0] = u.x;
        v.p[1] = u.y;
    } else {
        const uint4 u = *reinterpret_cast<const uint4 *>(ptr);
        v.p[0] = u.x;
        v.p[1] = u.y;
        v.p[2] = u.z;
        v.p[3] = u.w;
    }
    return v;
}

template <int V, int L>
struct BackwardAsyncOp : BackwardOp<true, true, V, L> {
    using Base = BackwardOp<true, true, V, L>;
    static constexpr int kStages = kBackwardAsyncStages;
    static constexpr int kStride = kThreads * L;                 /* words between a thread's slots */
    static constexpr int kStageWords = kStepRows * 2 * kStride; /* x and dy of kStepRows rows */
    struct Stage {}; /* the slots are in shared memory, taken in order */
    uint32_t *mine;  /* this thread's first slot: [stage][row][x, dy], kStride words apart */
    int next_load = 0, next_step = 0, pending = 0;

    __device__ __forceinline__ BackwardAsyncOp() {
        extern __shared__ __align__(16) uint32_t walk_shared[];
        mine = walk_shared + threadIdx.x * L;
    }
    __device__ __forceinline__ void load(const TensorArgs &T, Stage &, int64_t t, int64_t c) {
        uint32_t *s = mine + next_load * kStageWords;
#pragma unroll
        for (int r = 0; r < kStepRows; r++) {
            cp_async<4 * L>(s + (2 * r) * kStride, T.x + (t + r) * T.channels + c);
            cp_async<4 * L>(s + (2 * r + 1) * kStride, T.dy + (t + r + Base::kLookahead) * T.channels + c);
        }
        cp_async_commit();
        next_load = next_load + 1 == kStages ? 0 : next_load + 1;
        pending++;
    }
    __device__ __forceinline__ void step(const TensorArgs &T, const Stage &, int64_t t, int64_t c) {
        cp_async_wait_at_most<kStages - 1>(pending - 1); /* this step's group has landed */
        pending--;
        const uint32_t *s = mine + next_step * kStageWords;
        next_step = next_step + 1 == kStages ? 0 : next_step + 1;
#pragma unroll
        for (int r = 0; r < kStepRows; r++)
            Base::row(T, t + r, c, shared_vec<L>(s + (2 * r) * kStride),
                      shared_vec<L>(s + (2 * r + 1) * kStride));
    }
};

template <bool kDx, bool kDw, int V>
using BackwardOpOf = typename std::conditional<
    (V & kSilu) != 0, BackwardSiluOp<kDx, kDw, V, backward_lanes(V)>,
    typename std::conditional<kBackwardAsyncStages != 0 && kDx && kDw, BackwardAsyncOp<V, backward_lanes(V)>,
                              BackwardOp<kDx, kDw, V, backward_lanes(V)>>::type>::type;

/* dw block b of L channel pairs from c: their partials, and (kDx) dx of its rows. */
template <bool kDx, int V>
__device__ __forceinline__ void backward_item(const ConvArgs &a, const TensorArgs &T, int64_t b, int64_t c) {
    const int64_t t0 = b * kBlockRows;
    const int64_t t1 = t0 + kBlockRows < a.rows ? t0 + kBlockRows : a.rows;
    BackwardOpOf<kDx, true, V> op;
    op.w.load(T, c);
#pragma unroll
    for (int l = 0; l < backward_lanes(V); l++) op.p[l].zero();
    walk_rows(a, T, op, t0, t1, c);
#pragma unroll
    for (int l = 0; l < backward_lanes(V); l++) op.p[l].store(T, b, c + 2 * l);
}

/* dx alone for rows [t0, t0 + rows_per_item) of L channel pairs from c. */
template <int V>
__device__ __forceinline__ void dx_item(const ConvArgs &a, const TensorArgs &T, int64_t t0, int64_t c) {
    const int64_t t1 = t0 + a.rows_per_item < a.rows ? t0 + a.rows_per_item : a.rows;
    BackwardOpOf<true, false, V> op;
    op.w.load(T, c);
    walk_rows(a, T, op, t0, t1, c);
}

/* The tree's rule on the first m of N roots v of W adjacent columns (N a power of two, at most
 * 32): bottom-up pairwise, level s adding v[i + s] into v[i] for i a multiple of 2s when
 * i + s < m; the sums end in v[0]. Over aligned groups of 32 this is exactly the fixed tree. */
template <int N, int W>
__device__ __forceinline__ void fold_in_tree_order(float (&v)[N][W], int64_t m) {
    static_assert(N <= kTreeWidth && (N & (N - 1)) == 0, "a power of two, at most a tree group");
#pragma unroll
    for (int s = 1; s < N; s *= 2)
#pragma unroll
        for (int i = 0; i + s < N; i += 2 * s)
            if (i + s < m)
#pragma unroll
                for (int w = 0; w < W; w++) v[i][w] = __fadd_rn(v[i][w], v[i + s][w]);
}

/* The last sum of column (tap k, channel c): dw, or for k = 4 dbias; a NaN made canonical. */
__device__ __forceinline__ void store_weight_gradient(const TensorArgs &T, int64_t k, int64_t c,
                                                      float v) {
    if (k < 4) T.dw[c * 4 + k] = canonical(v);
    else T.dbias[c] = canonical(v);
}

/* fold_in_tree_order on up to 32 consecutive roots of W adjacent columns (src: the first root's
 * first column, `stride` floats between roots). The loads bypass L1 (__ldcg): the fused backward folds roots that other
 * multiprocessors wrote during the same kernel. */
template <int W>
__device__ __forceinline__ void fold_roots(const float *src, int64_t stride, int64_t m, float (&out)[W]) {
    static_assert(W == 1 || W == 2, "one column or an even-odd pair");
    float v[kTreeWidth][W];
#pragma unroll
    for (int l = 0; l < kTreeWidth; l++) {
        if (W == 1) {
            v[l][0] = l < m ? __ldcg(src + l * stride) : 0.0f;
        } else {
            const float2 u = l < m ? __ldcg(reinterpret_cast<const float2 *>(src + l * stride))
                                   : make_float2(0.0f, 0.0f);
            v[l][0] = u.x;
            v[l][W - 1] = u.y;
        }
    }
    fold_in_tree_order(v, m);
#pragma unroll
    for (int w = 0; w < W; w++) out[w] = v[0][w];
}

/* Group `group` of a pass for W adjacent columns from col: its root at the next level, or on
 * the final pass dw (and dbias). Columns are [tap][channel]; tap 4 is dbias. */
template <int V, int W>
__device__ __forceinline__ void fold_group(const TensorArgs &T, const TreePass &pass, int64_t group,
                                           int64_t col) {
    const int64_t stride = taps_of(V) * T.channels;
    const int64_t first = group * kTreeWidth;
    const int64_t m = pass.n_in - first < kTreeWidth ? pass.n_in - first : kTreeWidth;
    float v[W];
    fold_roots<W>(T.partials + (pass.in_offset + first) * stride + col, stride, m, v);
    const int64_t k = col / T.channels, c = col % T.channels;
#pragma unroll
    for (int w = 0; w < W; w++) {
        if (!pass.final_pass) T.partials[(pass.out_offset + group) * stride + col + w] = v[w];
        else store_weight_gradient(T, k, c + w, v[w]);
    }
}

/* One tree thread of a tree pass: one group of one (tap, channel) column. */
template <int V>
__device__ void tree_item(const TensorArgs &T, const TreePass &pass, int64_t group, int64_t col) {
    fold_group<V, 1>(T, pass, group, col);
}

/* After the fused backward stored dw block b's partials of channels [c, c + backward_column(V)):
 * the fold passes of the tree for those columns, each group by the thread that completes it.
 * Every thread of a group's blocks counts its arrival (its stores made visible first); the last
 * one folds the group in the tree's order and arrives at the next level. The counters are zeroed
 * before the launch (cake_cuda_backward). */
template <int V>
__device__ void fold_block(const ConvArgs &a, const TensorArgs &T, int64_t b, int64_t c) {
    const int64_t columns = T.channels / backward_column(V);
    int64_t root = b;
    for (int p = 0; p < a.fold_passes; p++) {
        const TreePass &pass = a.fold[p];
        const int64_t group = root / kTreeWidth;
        const int64_t m = pass.n_in - group * kTreeWidth < kTreeWidth ? pass.n_in - group * kTreeWidth
                                                                      : kTreeWidth;
        __threadfence(); /* this thread's roots of the level, before its arrival */
        unsigned *counter = T.counters + (pass.group_offset + group) * columns + c / backward_column(V);
        if (atomicAdd(counter, 1u) != (unsigned)(m - 1)) return;
        __threadfence(); /* the other arrivals' roots, before the loads */
#pragma unroll
        for (int k = 0; k < taps_of(V); k++)
#pragma unroll
            for (int l = 0; l < backward_column(V); l += 2) fold_group<V, 2>(T, pass, group, k * T.channels + c + l);
        root = group;
    }
}

} // namespace cake_cuda

#endif
