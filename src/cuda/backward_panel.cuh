/* The backward of calls of at most kPanelMaxRows local rows, in one launch: one CUDA block (a
 * "panel") per group of panel_channels(V) channels of a tensor, over all of its rows.
 *
 * The tiles (backward_tile.cuh) take a 256-row dw block each: every block loads, then looks up,
 * then runs its chains, all blocks of the call in the same phase at once, and a second launch
 * folds the partials. A panel holds every dw block of its channels, so
 *   - its loads go out at once into shared memory (tensor copies, CAKE_CUDA_PANEL_TMA; with
 *     SiLU cp.async), one mbarrier a dw block: the chains and dx of block b wait for b's rows
 *     (and the 3 before, or after) alone, not for the whole panel;
 *   - the dw tree is folded in the block (at most kPanelMaxBlocks partials a column): dw and
 *     dbias are written by the same launch, no tree kernel.
 * Threads: with SiLU (CAKE_CUDA_PANEL_BACKWARD=1 only) every thread first computes g = dy *
 * silu'(a) of the rows it is given, a dw block at a time (dy lands bf16 in the second half of its
 * g rows, read before the barrier and overwritten by the fp32 g after it). Then warps 0 ..
 * (kPanelMaxBlocks * CH / 32 - 1) run the chains, a thread per (dw block, channel): its four taps'
 * chains p_k = fma(g(t), x(t - 3 + k), p_k) and dbias's over the block's rows in order; the others
 * compute dx, a thread per (channel pair, run of rows), g(t + 3) from shared memory (past a
 * fragment's end from its future pool, as the walk reads it). The same operations on the same
 * values in the same order as the walk and the tree (docs/NUMERICS.md), so the same bits. */
#ifndef CAKE_BACKWARD_PANEL_CUH
#define CAKE_BACKWARD_PANEL_CUH

#include "backward_tile.cuh"

#include <cuda.h> /* CUtensorMap */
#include <type_traits>

namespace cake_cuda {

/* Which ordinary backward calls of at most kPanelMaxRows rows that the tiles would take run the
 * panels: 2 (default) those without SiLU; 1 all; 0 none (measurement variants). H200, 1 x [2048,
 * 2048], side by side (docs/PERFORMANCE.md): plain 17.6 -> 16.1 us queued with the panels, bias
 * + SiLU 34.8 -> 35.8-36.0 (lost: the tiles keep it). */
#ifndef CAKE_CUDA_PANEL_BACKWARD
#define CAKE_CUDA_PANEL_BACKWARD 2
#endif
/* Rows of a chain's loop body: the body's shared-memory loads go out together, and the chain
 * waits for them once a body (H200, 1 x [2048, 2048] plain, queued: 4 rows 15.7 us, 8 14.3-14.6,
 * 16 13.7, 32 13.5; docs/PERFORMANCE.md). */
#ifndef CAKE_CUDA_PANEL_CHAIN_UNROLL
#define CAKE_CUDA_PANEL_CHAIN_UNROLL 16
#endif
constexpr int kPanelChainUnroll = CAKE_CUDA_PANEL_CHAIN_UNROLL;
constexpr int kPanelMaxBlocks = 8;
constexpr int64_t kPanelMaxRows = (int64_t)kPanelMaxBlocks * kBlockRows;
/* Threads of a panel: 128 run the chains, the rest dx. 1024 (a measurement variant: more warps
 * for a grid of one panel a multiprocessor) lost on the H200: 1 x [2048, 2048] plain backward
 * 12.8 us queued against 12.3-12.4 (docs/PERFORMANCE.md). */
#ifndef CAKE_CUDA_PANEL_THREADS
#define CAKE_CUDA_PANEL_THREADS 512
#endif
constexpr int kPanelThreads = CAKE_CUDA_PANEL_THREADS;
/* Channels of a panel: 16 (32-byte row pieces, whole sectors) for the memory-bound variants,
 * 8 with SiLU, whose fp32 g takes twice the room: two panels a multiprocessor then. */
__host__ __device__ constexpr int panel_channels(int V) { return (V & kSilu) ? 8 : 16; }
__host__ __device__ constexpr int panel_min_blocks(int V) { /* two of 1024 threads do not fit */
    return (V & kSilu) && kPanelThreads <= 512 ? 2 : 1;
}
/* 1: the plain and bias panels load their rows by the Hopper's tensor memory accelerator: per
 * dw block one 2-D tensor copy of x and one of dy ([256 rows, panel_channels] boxes, rows past
 * the call's and channels past the tensor's filled with zeros), issued by one thread and
 * completing on the block's barrier, in place of 16-byte cp.async by every thread (whose issue the
 * ncu profile found throttled). x then keeps no spare rows (a tensor copy lands 128-byte aligned).
 * Default: on the H200 it took 1 x [2048, 2048]'s plain backward from 13.6 to 12.3 us queued
 * (docs/PERFORMANCE.md). 0: cp.async (dev/variants.txt, panel-cp-async). Copies by pieces of a
 * block, each with its own barrier so that the chains could start on a block's first rows, lost
 * on the H100 (docs/PERFORMANCE.md, eleventh session). */
#ifndef CAKE_CUDA_PANEL_TMA
#define CAKE_CUDA_PANEL_TMA 1
#endif
__host__ __device__ constexpr bool panel_tma(int V) { return CAKE_CUDA_PANEL_TMA && !(V & kSilu); }

/* The tensor maps of the panel launch's tensors (CAKE_CUDA_PANEL_TMA builds). */
struct PanelMaps {
#if CAKE_CUDA_PANEL_TMA
    CUtensorMap x[kMaxTensors], dy[kMaxTensors];
#else
    int unused;
#endif
};

/* x keeps a spare row after each dw block's 256, so that the chains of two blocks, which read
 * the same row of each in step, meet other banks (g is read in row runs by dx and keeps its rows
 * contiguous); not with the tensor copies. */
constexpr int kPanelPaddedRows = kPanelMaxBlocks * (kBlockRows + 1);
template <int V>
__device__ __forceinline__ int panel_row(int t) {
    return panel_tma(V) ? t : t + (t >> 8);
}

template <int V>
struct PanelShared {
    static constexpr int CH = panel_channels(V);
    /* g in shared memory: dy itself (bf16) without SiLU, g = dy * silu'(a) (fp32) with it */
    using G = typename std::conditional<(V & kSilu) != 0, float, uint16_t>::type;
    unsigned long long loaded[kPanelMaxBlocks]; /* mbarrier: dw block b's x and dy rows landed */
    int32_t starts[kPanelMaxRows + 1];          /* frag_start (local rows) */
    uint8_t offset[kPanelMaxRows];              /* SiLU: the row - its fragment's start, capped at 3 */
    float partial[kPanelMaxBlocks][5][CH];      /* [dw block][tap; 4: dbias][channel] */
    static constexpr size_t kAlign = panel_tma(V) ? 128 : 16; /* 128: tensor copies land there */
    alignas(kAlign) uint16_t x[kPanelPaddedRows][CH];
    alignas(kAlign) G g[kPanelMaxRows][CH];
};

/* Dynamic shared memory of the panel kernel of variant V (the layout depends on SiLU alone). */
__host__ __device__ constexpr size_t panel_shared_bytes(int V) {
    return (V & kSilu) ? sizeof(PanelShared<kSilu>) : sizeof(PanelShared<0>);
}

/* Panels of one tensor. */
__host__ __device__ __forceinline__ int64_t panels_of(const TensorArgs &T, int V) {
    return (T.channels + panel_channels(V) - 1) / panel_channels(V);
}

__device__ __forceinline__ unsigned shared_address(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbarrier_init(unsigned long long *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count)
                 : "memory");
}
/* This thread's arrival on bar, made when all of its earlier cp.async copies have landed (the
 * barrier was initialised with one arrival per thread: .noinc). */
__device__ __forceinline__ void mbarrier_arrive_after_copies(unsigned long long *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_address(bar))
                 : "memory");
}
/* Until bar's first phase has completed (every thread arrived): the copies it tracks are then
 * visible to this thread. */
__device__ __forceinline__ void mbarrier_wait_first_phase(unsigned long long *bar) {
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(shared_address(bar))
                     : "memory");
    } while (!done);
}

#if CAKE_CUDA_PANEL_TMA
/* Makes the barriers' initialisation visible to the tensor copies (the async proxy). */
__device__ __forceinline__ void fence_barrier_init_for_copies() {
    asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
}
/* Every dw block's x and dy rows by two tensor copies, each completing `bytes` on the block's
 * barrier (initialised with one arrival: this thread's, which announces the bytes). */
template <int V>
__device__ void panel_tensor_copies(PanelShared<V> &s, const CUtensorMap *mx,
                                    const CUtensorMap *mdy, int nb, int64_t c0) {
    constexpr unsigned kBytes = 2u * kBlockRows * panel_channels(V) * sizeof(uint16_t);
    for (int b = 0; b < nb; b++) {
        const unsigned bar = shared_address(&s.loaded[b]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kBytes)
                     : "memory");
        const void *dst[2] = {&s.x[b * kBlockRows][0], &s.g[b * kBlockRows][0]};
        const CUtensorMap *map[2] = {mx, mdy};
#pragma unroll
        for (int j = 0; j < 2; j++)
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                         " [%0], [%1, {%2, %3}], [%4];" ::"r"(shared_address(dst[j])),
                         "l"(map[j]), "r"((int)c0), "r"(b * kBlockRows), "r"(bar)
                         : "memory");
    }
}
#endif

/* The last fragment j < nf with starts[j] <= t. */
__device__ __forceinline__ int panel_fragment(const int32_t *starts, int nf, int t) {
    int lo = 0, hi = nf;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (starts[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* x(u) of channel c (global channel cg) for a row of fragment f starting at `start`, u >= start
 * - 3: the local row, or before the start the fragment's history row. */
template <int V>
__device__ __forceinline__ float panel_x(const TensorArgs &T, const PanelShared<V> &s, int f,
                                         int start, int u, int c, int64_t cg) {
    const uint16_t v = u >= start
                           ? s.x[panel_row<V>(u)][c]
                           : __ldg(T.history + ((int64_t)f * 3 + 3 + (u - start)) * T.channels + cg);
    return __uint_as_float((uint32_t)v << 16);
}

/* The same for channel pair q (global first channel cq), as a bf16 pair. */
template <int V>
__device__ __forceinline__ uint32_t panel_x_pair(const TensorArgs &T, const PanelShared<V> &s,
                                                 int f, int start, int u, int q, int64_t cq) {
    if (u >= start) return *reinterpret_cast<const uint32_t *>(&s.x[panel_row<V>(u)][2 * q]);
    return __ldg(reinterpret_cast<const uint32_t *>(
        T.history + ((int64_t)f * 3 + 3 + (u - start)) * T.channels + cq));
}

/* g of channel c at a local row from its shared-memory entry. */
__device__ __forceinline__ float panel_g(uint16_t dy) { return __uint_as_float((uint32_t)dy << 16); }
__device__ __forceinline__ float panel_g(float g) { return g; }

/* g of a channel pair from its shared-memory entry. */
__device__ __forceinline__ float2 panel_g_pair(const uint16_t *g) {
    const uint32_t u = *reinterpret_cast<const uint32_t *>(g);
    return make_float2(bf16_lo(u), bf16_hi(u));
}
__device__ __forceinline__ float2 panel_g_pair(const float *g) {
    return *reinterpret_cast<const float2 *>(g);
}

/* SiLU: where dw block b's dy rows land (bf16, CH a row): the second half of its g rows. */
template <int V>
__device__ __forceinline__ uint16_t *panel_dy_stage(PanelShared<V> &s, int b) {
    return reinterpret_cast<uint16_t *>(&s.g[b * kBlockRows + kBlockRows / 2][0]);
}

/* Every x and dy row of the panel into shared memory by cp.async, in dw block order: a thread
 * keeps one 16-byte piece of every (kPanelThreads / pieces)-th row (about 10 SASS instructions a
 * copy; an index per copy, with its divisions, took about 40). Each thread arrives on every dw
 * block's barrier once, after its copies of that block. */
template <int V>
__device__ void panel_copies(const TensorArgs &T, PanelShared<V> &s, int rows, int nb, int64_t c0) {
    constexpr int CH = panel_channels(V), kSegs = CH / 8, kRowStep = kPanelThreads / kSegs;
    const int seg = threadIdx.x % kSegs, r0 = threadIdx.x / kSegs;
    const int64_t C = T.channels, cs = c0 + 8 * seg;
    for (int b = 0; b < nb; b++) {
        const int end = (b + 1) * kBlockRows < rows ? (b + 1) * kBlockRows : rows;
        if (cs < C) /* C is a multiple of 8 */
            for (int t = b * kBlockRows + r0; t < end; t += kRowStep) {
                cp_async<16>(&s.x[panel_row<V>(t)][8 * seg], T.x + (int64_t)t * C + cs);
                void *dy = (V & kSilu)
                               ? (void *)(panel_dy_stage(s, b) + (t - b * kBlockRows) * CH + 8 * seg)
                               : (void *)&s.g[t][8 * seg];
                cp_async<16>(dy, T.dy + (int64_t)t * C + cs);
            }
        mbarrier_arrive_after_copies(&s.loaded[b]);
    }
}

/* SiLU: g = dy * silu'(a) of every local row, dw block by dw block as its rows land, by all
 * threads (a thread per channel pair and row, kPanelThreads / pairs rows at once). A row's x
 * window comes from shared memory unless the row is one of its fragment's first three
 * (s.offset): then its history rows too. */
template <int V>
__device__ void panel_silu_g(const TensorArgs &T, PanelShared<V> &s, int rows, int nb, int nf,
                             int64_t c0) {
    constexpr int CH = panel_channels(V), kPairs = CH / 2, kRowsAtOnce = kPanelThreads / kPairs;
    constexpr int kPasses = kBlockRows / kRowsAtOnce;
    static_assert(kBlockRows % kRowsAtOnce == 0, "whole passes over a dw block");
    const int q = threadIdx.x % kPairs, r = threadIdx.x / kPairs;
    const int64_t cq = c0 + 2 * q;
    const bool live = cq < T.channels;
    PairWeights w = {};
    if (live) w = load_weights<V>(T, cq);
    for (int b = 0; b < nb; b++) {
        mbarrier_wait_first_phase(&s.loaded[b]); /* block b - 1's x waited for before */
        const uint16_t *stage = panel_dy_stage(s, b);
        float2 g[kPasses];
#pragma unroll
        for (int m = 0; m < kPasses; m++) {
            const int t = b * kBlockRows + r + m * kRowsAtOnce;
            g[m] = make_float2(0.0f, 0.0f);
            if (live && t < rows) {
                const uint32_t dy =
                    *reinterpret_cast<const uint32_t *>(stage + (t - b * kBlockRows) * CH + 2 * q);
                const int off = s.offset[t];
                uint32_t x[4];
                if (off == 3) {
#pragma unroll
                    for (int j = 0; j < 3; j++)
                        x[j] = *reinterpret_cast<const uint32_t *>(&s.x[panel_row<V>(t - 3 + j)][2 * q]);
                } else {
                    const int f = panel_fragment(s.starts, nf, t);
#pragma unroll
                    for (int j = 0; j < 3; j++) x[j] = panel_x_pair(T, s, f, t - off, t - 3 + j, q, cq);
                }
                x[3] = *reinterpret_cast<const uint32_t *>(&s.x[panel_row<V>(t)][2 * q]);
                const float2 d = silu_grad_pair(conv_pair<V>(w, x[0], x[1], x[2], x[3]));
                g[m] = make_float2(__fmul_rn(bf16_lo(dy), d.x), __fmul_rn(bf16_hi(dy), d.y));
            }
        }
        __syncthreads(); /* every dy of block b read: its g may overwrite the stage */
#pragma unroll
        for (int m = 0; m < kPasses; m++) {
            const int t = b * kBlockRows + r + m * kRowsAtOnce;
            if (live && t < rows) *reinterpret_cast<float2 *>(&s.g[t][2 * q]) = g[m];
        }
    }
    __syncthreads(); /* every g written */
}

/* Channel c's partials over dw block b (dw taps; dbias with a bias), into s.partial[b], once
 * the block's rows have landed. */
template <int V>
__device__ void panel_chains(const TensorArgs &T, PanelShared<V> &s, int rows, int nf, int b,
                             int c, int64_t cg) {
    constexpr int CH = panel_channels(V);
    const int t0 = b * kBlockRows, t1 = t0 + kBlockRows < rows ? t0 + kBlockRows : rows;
    int f = panel_fragment(s.starts, nf, t0);
    /* the first window's history rows while the block's rows are on their way */
    const int start0 = s.starts[f];
    float h[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 3; j++)
        if (t0 - 3 + j < start0) h[j] = panel_x(T, s, f, start0, t0 - 3 + j, c, cg);
    if (b > 0) mbarrier_wait_first_phase(&s.loaded[b - 1]); /* x(t0 - 3) .. x(t0 - 1) */
    mbarrier_wait_first_phase(&s.loaded[b]);
#pragma unroll
    for (int j = 0; j < 3; j++)
        if (t0 - 3 + j >= start0) h[j] = panel_x(T, s, f, start0, t0 - 3 + j, c, cg);
    ChannelChains<V> ch;
    for (int t = t0; t < t1; f++) { /* a fragment's piece of the block at a time */
        const int start = s.starts[f], end = s.starts[f + 1] < t1 ? s.starts[f + 1] : t1;
        ch.x0 = h[0]; /* x(t - 3), x(t - 2), x(t - 1) */
        ch.x1 = h[1];
        ch.x2 = h[2];
        if (t > t0) { /* a fragment that starts inside the block: its history */
            ch.x0 = panel_x(T, s, f, start, t - 3, c, cg);
            ch.x1 = panel_x(T, s, f, start, t - 2, c, cg);
            ch.x2 = panel_x(T, s, f, start, t - 1, c, cg);
        }
        const uint16_t *xp = &s.x[panel_row<V>(t)][c]; /* rows of one dw block are contiguous */
        const typename PanelShared<V>::G *gp = &s.g[t][c];
#pragma unroll kPanelChainUnroll
        for (; t < end; t++, xp += CH, gp += CH)
            ch.row(panel_g(*gp), __uint_as_float((uint32_t)*xp << 16));
    }
    ch.store(&s.partial[b][0][c], CH);
}

/* dx of rows [r0, r1) of channel pair q (global first channel cq). */
template <int V>
__device__ void panel_dx(const ConvArgs &a, const TensorArgs &T, const PanelShared<V> &s,
                         const PairWeights &w, int nf, int r0, int r1, int q, int64_t cq) {
    constexpr int CH = panel_channels(V);
    const int64_t C = T.channels;
    int f = panel_fragment(s.starts, nf, r0);
    for (int t = r0; t < r1; f++) {
        const int start = s.starts[f], end = s.starts[f + 1];
        /* rows whose g(t) .. g(t + 3) are all local rows of the fragment */
        const int fast_end = end - 3 < r1 ? end - 3 : r1;
        if (t < fast_end) {
            const typename PanelShared<V>::G *gp = &s.g[t][2 * q];
            uint16_t *dx = T.dx + (int64_t)t * C + cq;
            float2 g0 = panel_g_pair(gp), g1 = panel_g_pair(gp + CH), g2 = panel_g_pair(gp + 2 * CH);
#pragma unroll 4
            for (; t < fast_end; t++) {
                gp += CH;
                const float2 g3 = panel_g_pair(gp + 2 * CH);
                *reinterpret_cast<uint32_t *>(dx) =
                    dx_pair<kHwBf16>(w, g0.x, g0.y, g1.x, g1.y, g2.x, g2.y, g3.x, g3.y);
                dx += C;
                g0 = g1;
                g1 = g2;
                g2 = g3;
            }
        }
        /* the fragment's last rows: g past its end from its future pool */
        const int slow_end = end < r1 ? end : r1;
        for (; t < slow_end; t++) {
            const int lim = end - t, off = t - start < 3 ? t - start : 3;
            float2 g[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                g[j] = j < lim ? panel_g_pair(&s.g[t + j][2 * q])
                               : tile_future_g<V>(a, T, w, f, t, off, end, j - lim, cq);
            *reinterpret_cast<uint32_t *>(T.dx + (int64_t)t * C + cq) =
                dx_pair<kHwBf16>(w, g[0].x, g[0].y, g[1].x, g[1].y, g[2].x, g[2].y, g[3].x, g[3].y);
        }
    }
}

/* The whole backward of channels [c0, c0 + panel_channels(V)) of T: dx, dw (and dbias). */
template <int V>
__device__ void backward_panel(const ConvArgs &a, const PanelMaps &m, int i, int64_t c0,
                               PanelShared<V> &s) {
    const TensorArgs &T = a.t[i];
    (void)m;
    constexpr int CH = panel_channels(V), kPairs = CH / 2;
    constexpr int kChainThreads = kPanelMaxBlocks * CH;
    constexpr int kRuns = (kPanelThreads - kChainThreads) / kPairs / kPanelMaxBlocks; /* a block */
    constexpr int kRunRows = (kBlockRows + kRuns - 1) / kRuns;
    static_assert(kChainThreads % 32 == 0, "the chains take whole warps");
    static_assert((kPanelThreads - kChainThreads) % (kPairs * kPanelMaxBlocks) == 0, "whole runs");
    const int tid = threadIdx.x;
    const int rows = (int)a.rows, nb = (int)a.num_blocks, nf = (int)a.num_fragments;
    const int64_t C = T.channels;

    if (tid == 0) {
        for (int b = 0; b < nb; b++) mbarrier_init(&s.loaded[b], panel_tma(V) ? 1 : kPanelThreads);
#if CAKE_CUDA_PANEL_TMA
        if constexpr (panel_tma(V)) fence_barrier_init_for_copies();
#endif
    }
    __syncthreads();
#if CAKE_CUDA_PANEL_TMA
    if constexpr (panel_tma(V)) {
        if (tid == 0) panel_tensor_copies<V>(s, &m.x[i], &m.dy[i], nb, c0); /* all go out now */
    } else
#endif
        panel_copies<V>(T, s, rows, nb, c0); /* every copy goes out now */
    for (int j = tid; j <= nf; j += kPanelThreads) s.starts[j] = (int32_t)__ldg(a.frag_start + j);
    if constexpr ((V & kSilu) != 0) {
        for (int t = tid; t < rows; t += kPanelThreads) s.offset[t] = 3;
        __syncthreads();
        for (int j = tid; j < nf; j += kPanelThreads)
            for (int t = s.starts[j]; t < s.starts[j + 1] && t < s.starts[j] + 3; t++)
                s.offset[t] = (uint8_t)(t - s.starts[j]);
    }
    __syncthreads();
    if constexpr ((V & kSilu) != 0) panel_silu_g<V>(T, s, rows, nb, nf, c0);

    if (tid < kChainThreads) {
        const int c = tid % CH, b = tid / CH;
        if (b < nb && c0 + c < C) panel_chains<V>(T, s, rows, nf, b, c, c0 + c);
    } else {
        const int i = tid - kChainThreads, q = i % kPairs, run = i / kPairs;
        const int b = run / kRuns, r0 = b * kBlockRows + (run % kRuns) * kRunRows;
        const int block_end = (b + 1) * kBlockRows < rows ? (b + 1) * kBlockRows : rows;
        const int r1 = r0 + kRunRows < block_end ? r0 + kRunRows : block_end;
        const int64_t cq = c0 + 2 * q;
        if (b < nb && r0 < r1 && cq < C) {
            const PairWeights w = load_weights<V>(T, cq);
            mbarrier_wait_first_phase(&s.loaded[b]);
            if (b + 1 < nb) mbarrier_wait_first_phase(&s.loaded[b + 1]); /* g(t + 1) .. g(t + 3) */
            panel_dx<V>(a, T, s, w, nf, r0, r1, q, cq);
        }
    }
    __syncthreads();

    /* The tree over the nb partials of each (tap, channel), as the tree kernel folds them. */
    if (tid < taps_of(V) * CH) {
        const int k = tid / CH, c = tid % CH;
        if (c0 + c < C) {
            float v[kPanelMaxBlocks][1];
#pragma unroll
            for (int b = 0; b < kPanelMaxBlocks; b++) v[b][0] = b < nb ? s.partial[b][k][c] : 0.0f;
            fold_in_tree_order(v, nb);
            store_weight_gradient(T, k, c0 + c, v[0][0]);
        }
    }
}

} // namespace cake_cuda

#endif
