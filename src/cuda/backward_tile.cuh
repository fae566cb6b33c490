/* The backward of small calls, one shared-memory tile per CUDA block.
 *
 * A small call has too few dw blocks to fill the GPU with the walk's one thread per (dw block,
 * channel pair): its few thousand chains each wait on their own loads, the split form then reads
 * x and dy twice (a dx walk and a dw walk), and with SiLU computes every g = dy * silu'(a) twice,
 * inside the chains. Here one CUDA block of kTileThreads threads takes one dw block of rows and
 * kTileChannels channels:
 *   A. all of its x rows (t0 - 3 .. t0 + 258) and dy rows (t0 .. t0 + 258) are loaded at once,
 *      16 bytes a thread, while the fragment starts around them are read (into shared memory,
 *      where each row finds its fragment);
 *   B. with SiLU, g of every (row, channel) is computed once, a thread per pair taking a run of
 *      rows in order, CAKE_CUDA_TILE_G_ROWS rows a step, with x in a window of registers
 *      (refilled where a fragment starts);
 *   C. the first warp runs the chains, a thread per channel: its four taps' chains
 *      p_k = fma(g(t), x(t - 3 + k), p_k) and dbias's over the rows in order, x from a window in
 *      registers (refilled from the history rows where a fragment starts); the other warps
 *      meanwhile compute dx of every (row, pair) from a window of g, a run of rows a thread (the
 *      first rows past a fragment's end from its future pool, as the walk reads them).
 * The same operations on the same values in the same order as the walk (docs/NUMERICS.md), so
 * the same bits; the tree then folds the partials as before. */
#ifndef CAKE_BACKWARD_TILE_CUH
#define CAKE_BACKWARD_TILE_CUH

#include "conv_kernels.cuh"

namespace cake_cuda {

/* 1: split (small) backward calls run the tiles (unless the panels of backward_panel.cuh take
 * them); 0: the split walk; 2: every ordinary backward call runs the tiles (a measurement
 * variant). */
#ifndef CAKE_CUDA_TILE_BACKWARD
#define CAKE_CUDA_TILE_BACKWARD 1
#endif
/* Rows of a chain's loop body. The panels' 16 (CAKE_CUDA_PANEL_CHAIN_UNROLL) took the plain
 * small backward from 15.7 to 13.7 us; the tiles' bias + SiLU backward did not move: 4 rows
 * 36.5-37.1 us, 8 36.7, 16 36.8 (docs/PERFORMANCE.md, sixth session of 2026-12-04). */
#ifndef CAKE_CUDA_TILE_CHAIN_UNROLL
#define CAKE_CUDA_TILE_CHAIN_UNROLL 4
#endif
/* 1: B's g and C's dx slide a window along a run of rows, one new row an iteration (the
 * fragment checks once a fragment's piece); 0: every row reads its four rows and checks each.
 * B's loop went from 322 to 189 SASS instructions a (row, pair); H100, 1 x [2048, 2048] bias +
 * SiLU backward, queued: 36.7 us without, 35.9-36.6 with B's alone, 34.6-34.7 with both
 * (docs/PERFORMANCE.md, twelfth session). */
#ifndef CAKE_CUDA_TILE_G_WINDOW
#define CAKE_CUDA_TILE_G_WINDOW 1
#endif
/* Rows a step of B's window (the rest of a fragment's piece a row a step): one range check for
 * their 2 * rows silu' sequences, which then run side by side. A tile has only about 6 warps a
 * scheduler, and the longer independent work hides more of each sequence's latency: H200, 1 x
 * [2048, 2048] bias + SiLU backward, queued, 2 rows 30.2-30.3 us against 31.7 for 1
 * (docs/PERFORMANCE.md, fifteenth session). */
#ifndef CAKE_CUDA_TILE_G_ROWS
#define CAKE_CUDA_TILE_G_ROWS 2
#endif
#ifndef CAKE_CUDA_TILE_DX_WINDOW
#define CAKE_CUDA_TILE_DX_WINDOW 1
#endif
/* Threads of a tile (warp 0 the chains, the others dx) and the blocks a multiprocessor must
 * fit (shared memory fits 4 tiles). 256 at 4 blocks (64 registers a thread, 8 bytes spilled)
 * has twice the warps of 128 at 4 (107 registers): with both windows, on the H100 as above,
 * 33.6-33.7 us against 34.6-34.7; 256 at 3 blocks 35.3-35.7. */
#ifndef CAKE_CUDA_TILE_THREADS
#define CAKE_CUDA_TILE_THREADS 256
#endif
#ifndef CAKE_CUDA_TILE_MIN_BLOCKS
#define CAKE_CUDA_TILE_MIN_BLOCKS 4
#endif
constexpr int kTileChainUnroll = CAKE_CUDA_TILE_CHAIN_UNROLL;
constexpr int kTileGRowsStep = CAKE_CUDA_TILE_G_ROWS;
constexpr int kTileChannels = 32;
constexpr int kTileThreads = CAKE_CUDA_TILE_THREADS;
constexpr int kTileMinBlocks = CAKE_CUDA_TILE_MIN_BLOCKS;
static_assert(kTileThreads % 32 == 0 && kTileThreads >= 64, "a chain warp and dx warps");
constexpr int kTilePairs = kTileChannels / 2;
constexpr int kTileRowGroups = kTileThreads / kTilePairs;  /* rows B covers at once */
constexpr int kTileDxRowGroups = kTileRowGroups - 2;       /* rows C's dx covers (warps 1..) */
constexpr int kTileSegs = kTileChannels / 8;               /* 16-byte segments of a tile row */
constexpr int kTileLoadRows = kTileThreads / kTileSegs;    /* rows A loads at once */
constexpr int kTileXRows = kBlockRows + 6;                 /* x rows t0 - 3 .. t0 + 258 */
constexpr int kTileGRows = kBlockRows + 3;                 /* g rows t0 .. t0 + 258 */
constexpr int kTileXPasses = (kTileXRows + kTileLoadRows - 1) / kTileLoadRows;
constexpr int kTileGPasses = (kTileGRows + kTileLoadRows - 1) / kTileLoadRows;
constexpr int kTileGSpan = (kTileGRows + kTileRowGroups - 1) / kTileRowGroups; /* B's run */
constexpr int kTileDxSpan = (kBlockRows + kTileDxRowGroups - 1) / kTileDxRowGroups; /* C's */

/* Row i of the tile is row t0 + i (x: t0 - 3 + i). */
struct TileShared {
    float g[kTileGRows][kTileChannels];    /* dy, then (SiLU) g = dy * silu'(a) */
    uint16_t x[kTileXRows][kTileChannels];
    int64_t starts[kTileGRows + 1];        /* frag_start[f0 ..]: f0 the fragment of row t0 */
    int64_t f0;                            /* and f0 .. f0 + nf the tile's fragments */
    int32_t nf;
    int32_t f[kTileGRows];                 /* the row's fragment - f0 */
    int32_t end[kTileGRows];               /* its end - t0, capped at kTileXRows */
    int32_t off[kTileGRows];               /* the row - its fragment's start, capped at 3 */
};
constexpr size_t kTileSharedBytes = sizeof(TileShared);

/* Tiles of one tensor: its dw blocks times its groups of kTileChannels channels. */
__host__ __device__ __forceinline__ int64_t tiles_of(const ConvArgs &a, const TensorArgs &T) {
    return a.num_blocks * ((T.channels + kTileChannels - 1) / kTileChannels);
}

/* x at local row u for a row t of fragment f with t - start = off (capped at 3, so exact when u
 * is before the start) and end `end`: a history row, a local row, or past the end a row of the
 * future pool's x half (SiLU). One channel pair from cq, from global memory. */
__device__ __forceinline__ uint32_t tile_x_global(const TensorArgs &T, int64_t f, int64_t t,
                                                  int off, int64_t end, int64_t u, int64_t cq) {
    const uint16_t *row = u < t - off ? T.history + (f * 3 + 3 + (u - (t - off))) * T.channels
                          : u < end   ? T.x + u * T.channels
                                      : T.future_x + (f * 3 + (u - end)) * T.channels;
    return __ldg(reinterpret_cast<const uint32_t *>(row + cq));
}

/* x(t - 3 + j) for row i of the tile (t = t0 + i), pair q: the tile's row, or its fragment's
 * history row before the fragment's start. */
__device__ __forceinline__ uint32_t tile_x_pair(const TensorArgs &T, const TileShared &s,
                                                int64_t f0, int i, int j, int q, int64_t t,
                                                int64_t cq) {
    if (3 - j > s.off[i]) return tile_x_global(T, f0 + s.f[i], t, s.off[i], t + 1, t - 3 + j, cq);
    return *reinterpret_cast<const uint32_t *>(&s.x[i + j][2 * q]);
}

/* The same for one channel c (the chains), as fp32. */
__device__ __forceinline__ float tile_x_channel(const TensorArgs &T, const TileShared &s,
                                                int64_t f0, int i, int j, int ch, int64_t c) {
    const uint16_t v = 3 - j > s.off[i]
                           ? __ldg(T.history + ((f0 + s.f[i]) * 3 + j + s.off[i]) * T.channels + c)
                           : s.x[i + j][ch];
    return __uint_as_float((uint32_t)v << 16);
}

/* g of the pair at future row fu (0..2) of fragment f (a row past its end): dy from the future
 * pool, with SiLU times silu'(a) of that row, +0.0 past the sequence end (as the walk's). */
template <int V>
__device__ __forceinline__ float2 tile_future_g(const ConvArgs &a, const TensorArgs &T,
                                                const PairWeights &w, int64_t f, int64_t t,
                                                int off, int64_t end, int fu, int64_t cq) {
    const uint32_t dy = __ldg(reinterpret_cast<const uint32_t *>(
        T.future + (f * 3 + fu) * T.channels + cq));
    if (!(V & kSilu)) return make_float2(bf16_lo(dy), bf16_hi(dy));
    if (fu >= __ldg(a.future_valid + f)) return make_float2(0.0f, 0.0f);
    const int64_t u = end + fu;
    const float2 av = conv_pair<V>(w, tile_x_global(T, f, t, off, end, u - 3, cq),
                                   tile_x_global(T, f, t, off, end, u - 2, cq),
                                   tile_x_global(T, f, t, off, end, u - 1, cq),
                                   tile_x_global(T, f, t, off, end, u, cq));
    return make_float2(__fmul_rn(bf16_lo(dy), cake_silu_grad(av.x)),
                       __fmul_rn(bf16_hi(dy), cake_silu_grad(av.y)));
}

/* The starts of the fragments of the tile at t0 into s.starts (where each row then finds its
 * own), and s.f0, s.nf, by `count` threads (the calling one the `lane`-th). Every fragment a row
 * of the tile is in is one of f0 .. f0 + kTileGRows - 1 (fragments are never empty). */
__device__ __forceinline__ void tile_fragment_starts(const ConvArgs &a, int64_t t0, TileShared &s,
                                                     int lane, int count) {
    const int64_t f0 = fragment_of(a, t0);
    const int nf = a.num_fragments - f0 < kTileGRows ? (int)(a.num_fragments - f0) : kTileGRows;
    for (int j = lane; j <= nf; j += count) s.starts[j] = __ldg(a.frag_start + f0 + j);
    if (lane == 0) {
        s.f0 = f0;
        s.nf = nf;
    }
}

/* dx of rows [t0, t0 + 256) of dw block b and its partials (dw taps; dbias with a bias) for
 * channels [c0, c0 + kTileChannels) of T, by the kTileThreads threads of the calling block. */
template <int V>
__device__ void backward_tile(const ConvArgs &a, const TensorArgs &T, int64_t b, int64_t c0,
                              TileShared &s) {
    const int tid = threadIdx.x;
    const int64_t C = T.channels;
    const int64_t t0 = b * kBlockRows;
    const int n = a.rows - t0 < kBlockRows ? (int)(a.rows - t0) : kBlockRows;

    /* The dependent lookups (a search of frag_start, then the starts) by the last warp before
     * its loads, and the weights right after the loads: neither then waits behind the tile's
     * 16-byte loads and again after the barriers (ncu on the H100: the prologue was about a third
     * of the tiles' time; 32.5-32.7 us against 31.9-32.1 at 1 x [2048, 2048] bias + SiLU,
     * docs/PERFORMANCE.md, fourteenth session). */
    constexpr int kLookupLane0 = kTileThreads - 32; /* the last warp */
    if (tid >= kLookupLane0) tile_fragment_starts(a, t0, s, tid - kLookupLane0, 32);
    /* A: the loads, 16 bytes a thread. */
    const int seg = tid % kTileSegs, lr = tid / kTileSegs;
    const int64_t cs = c0 + 8 * seg;
    const bool seg_live = cs < C; /* C is a multiple of 8 */
    uint4 xv[kTileXPasses], dv[kTileGPasses];
#pragma unroll
    for (int m = 0; m < kTileXPasses; m++) {
        const int i = lr + m * kTileLoadRows;
        const int64_t u = t0 - 3 + i;
        xv[m] = make_uint4(0u, 0u, 0u, 0u);
        if (seg_live && i < kTileXRows && u >= 0 && u < a.rows)
            xv[m] = __ldg(reinterpret_cast<const uint4 *>(T.x + u * C + cs));
    }
#pragma unroll
    for (int m = 0; m < kTileGPasses; m++) {
        const int i = lr + m * kTileLoadRows;
        const int64_t t = t0 + i;
        dv[m] = make_uint4(0u, 0u, 0u, 0u);
        if (seg_live && i < kTileGRows && t < a.rows)
            dv[m] = __ldg(reinterpret_cast<const uint4 *>(T.dy + t * C + cs));
    }
    const int q = tid % kTilePairs, rg = tid / kTilePairs; /* B's thread: pair q, rows rg .. */
    const int64_t cq = c0 + 2 * q;
    const bool pair_live = cq < C;
    PairWeights w = {};
    if (pair_live) w = load_weights<V>(T, cq);
#pragma unroll
    for (int m = 0; m < kTileXPasses; m++) {
        const int i = lr + m * kTileLoadRows;
        if (i < kTileXRows) *reinterpret_cast<uint4 *>(&s.x[i][8 * seg]) = xv[m];
    }
#pragma unroll
    for (int m = 0; m < kTileGPasses; m++) {
        const int i = lr + m * kTileLoadRows;
        if (i < kTileGRows) {
            const uint32_t p[4] = {dv[m].x, dv[m].y, dv[m].z, dv[m].w};
            float4 *dst = reinterpret_cast<float4 *>(&s.g[i][8 * seg]);
            dst[0] = make_float4(bf16_lo(p[0]), bf16_hi(p[0]), bf16_lo(p[1]), bf16_hi(p[1]));
            dst[1] = make_float4(bf16_lo(p[2]), bf16_hi(p[2]), bf16_lo(p[3]), bf16_hi(p[3]));
        }
    }
    __syncthreads();
    const int64_t f0 = s.f0;
    const int nf = s.nf;
    for (int i = tid; i < kTileGRows && t0 + i < a.rows; i += kTileThreads) {
        const int64_t t = t0 + i;
        int lo = 0, hi = nf; /* the last j with starts[j] <= t */
        while (hi - lo > 1) {
            const int mid = (lo + hi) / 2;
            if (s.starts[mid] <= t) lo = mid;
            else hi = mid;
        }
        s.f[i] = lo;
        s.off[i] = t - s.starts[lo] < 3 ? (int)(t - s.starts[lo]) : 3;
        s.end[i] = s.starts[lo + 1] - t0 < kTileXRows ? (int)(s.starts[lo + 1] - t0) : kTileXRows;
    }
    __syncthreads();

    /* B: a thread per pair q, rows rg, rg + 8, ... */
    if ((V & kSilu) && CAKE_CUDA_TILE_G_WINDOW) { /* rows [rg * span, + span) in order */
        const int rows = a.rows - t0 < kTileGRows ? (int)(a.rows - t0) : kTileGRows;
        const int last = (rg + 1) * kTileGSpan < rows ? (rg + 1) * kTileGSpan : rows;
        for (int i = rg * kTileGSpan; i < last && pair_live;) {
            const int64_t t = t0 + i;
            uint32_t x0 = tile_x_pair(T, s, f0, i, 0, q, t, cq); /* x(t - 3) .. x(t - 1) */
            uint32_t x1 = tile_x_pair(T, s, f0, i, 1, q, t, cq);
            uint32_t x2 = tile_x_pair(T, s, f0, i, 2, q, t, cq);
            const int e = s.end[i] < last ? s.end[i] : last; /* the fragment's piece */
            for (; i + kTileGRowsStep - 1 < e; i += kTileGRowsStep) {
                /* kTileGRowsStep rows a step: x(t - 3) .. x(t + step - 1) */
                uint32_t x[kTileGRowsStep + 3] = {x0, x1, x2};
                float2 av[kTileGRowsStep], dsilu[kTileGRowsStep];
#pragma unroll
                for (int r = 0; r < kTileGRowsStep; r++) {
                    x[r + 3] = *reinterpret_cast<const uint32_t *>(&s.x[i + r + 3][2 * q]);
                    av[r] = conv_pair<V>(w, x[r], x[r + 1], x[r + 2], x[r + 3]);
                }
                silu_grad_pairs<kTileGRowsStep>(av, dsilu);
#pragma unroll
                for (int r = 0; r < kTileGRowsStep; r++) {
                    float2 &g = *reinterpret_cast<float2 *>(&s.g[i + r][2 * q]);
                    g = make_float2(__fmul_rn(g.x, dsilu[r].x), __fmul_rn(g.y, dsilu[r].y));
                }
                x0 = x[kTileGRowsStep];
                x1 = x[kTileGRowsStep + 1];
                x2 = x[kTileGRowsStep + 2];
            }
            for (; i < e; i++) {
                const uint32_t x3 = *reinterpret_cast<const uint32_t *>(&s.x[i + 3][2 * q]);
                float2 &g = *reinterpret_cast<float2 *>(&s.g[i][2 * q]);
                const float2 d = silu_grad_pair(conv_pair<V>(w, x0, x1, x2, x3));
                g = make_float2(__fmul_rn(g.x, d.x), __fmul_rn(g.y, d.y));
                x0 = x1;
                x1 = x2;
                x2 = x3;
            }
        }
        __syncthreads();
    } else if (V & kSilu) { /* rows rg, rg + kTileRowGroups, ... */
        for (int i = rg; i < kTileGRows && t0 + i < a.rows; i += kTileRowGroups) {
            if (!pair_live) break;
            const int64_t t = t0 + i;
            const float2 av = conv_pair<V>(w, tile_x_pair(T, s, f0, i, 0, q, t, cq),
                                           tile_x_pair(T, s, f0, i, 1, q, t, cq),
                                           tile_x_pair(T, s, f0, i, 2, q, t, cq),
                                           tile_x_pair(T, s, f0, i, 3, q, t, cq));
            float2 &g = *reinterpret_cast<float2 *>(&s.g[i][2 * q]);
            const float2 d = silu_grad_pair(av);
            g = make_float2(__fmul_rn(g.x, d.x), __fmul_rn(g.y, d.y));
        }
        __syncthreads();
    }
    if (tid >= kTileChannels && CAKE_CUDA_TILE_DX_WINDOW) { /* C, warps 1..: dx, a thread per
                                                              pair, rows [(rg - 2) * span, + span) */
        const int last = (rg - 1) * kTileDxSpan < n ? (rg - 1) * kTileDxSpan : n;
        for (int i = (rg - 2) * kTileDxSpan; i < last && pair_live;) {
            const int fe = s.end[i]; /* g(u) for u < fe from the tile, then the future rows */
            const auto g_at = [&](int u) {
                return u < fe ? *reinterpret_cast<const float2 *>(&s.g[u][2 * q])
                              : tile_future_g<V>(a, T, w, f0 + s.f[i], t0 + i, s.off[i], t0 + fe,
                                                 u - fe, cq);
            };
            float2 g0 = g_at(i), g1 = g_at(i + 1), g2 = g_at(i + 2);
            const int e = fe < last ? fe : last;
            for (; i < e; i++) {
                const float2 g3 = g_at(i + 3);
                *reinterpret_cast<uint32_t *>(T.dx + (t0 + i) * C + cq) =
                    dx_pair<kHwBf16>(w, g0.x, g0.y, g1.x, g1.y, g2.x, g2.y, g3.x, g3.y);
                g0 = g1;
                g1 = g2;
                g2 = g3;
            }
        }
        return;
    }
    if (tid >= kTileChannels) { /* C, warps 1..: dx, a thread per pair, rows rg - 2, ... */
        for (int i = rg - 2; i < n && pair_live; i += kTileDxRowGroups) {
            const int lim = s.end[i] - i; /* taps j < lim read rows of the row's fragment */
            float2 g[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (j < lim) {
                    g[j] = *reinterpret_cast<const float2 *>(&s.g[i + j][2 * q]);
                } else { /* past the fragment's end: its future rows */
                    const int64_t end = t0 + s.end[i];
                    g[j] = tile_future_g<V>(a, T, w, f0 + s.f[i], t0 + i, s.off[i], end,
                                            j - lim, cq);
                }
            }
            *reinterpret_cast<uint32_t *>(T.dx + (t0 + i) * C + cq) =
                dx_pair<kHwBf16>(w, g[0].x, g[0].y, g[1].x, g[1].y, g[2].x, g[2].y, g[3].x, g[3].y);
        }
        return;
    }

    /* C, warp 0: the chains of channel c, a fragment's piece of the tile at a time. */
    const int64_t c = c0 + tid;
    if (c >= C) return;
    ChannelChains<V> ch;
    for (int i = 0; i < n;) {
        const int e = s.end[i] < n ? s.end[i] : n;
        ch.x0 = tile_x_channel(T, s, f0, i, 0, tid, c); /* x(t - 3), x(t - 2), x(t - 1) */
        ch.x1 = tile_x_channel(T, s, f0, i, 1, tid, c);
        ch.x2 = tile_x_channel(T, s, f0, i, 2, tid, c);
#pragma unroll kTileChainUnroll
        for (; i < e; i++) ch.row(s.g[i][tid], __uint_as_float((uint32_t)s.x[i + 3][tid] << 16));
    }
    ch.store(T.partials + b * taps_of(V) * C + c, C); /* as Partials::store */
}

} // namespace cake_cuda

#endif
