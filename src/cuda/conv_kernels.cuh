/* Device code of the convolution: bf16 helpers, the kernel arguments, and the per-item work.
 *
 * Invariants (SPEC 3): every multiply-add is one __fmaf_rn in the order the spec writes, no other
 * contraction (built with -fmad=false), bf16 rounding done by hand exactly as the CPU does it, dw
 * partials over 256-row blocks in row order, summed by the fixed tree. A thread owns 8
 * consecutive channels (one 16-byte load per row) of a run of rows, so results never depend on
 * the grid shape. Offsets are 64-bit. */
#ifndef CAKE_CONV_KERNELS_CUH
#define CAKE_CONV_KERNELS_CUH

#include <stdint.h>

namespace cake_cuda {

constexpr int kMaxTensors = 8;  /* per launch; calls with more are split, bits unchanged */
constexpr int kChunk = 8;       /* channels per thread */
#ifndef CAKE_CUDA_FORWARD_ROWS
#define CAKE_CUDA_FORWARD_ROWS 8
#endif
constexpr int kForwardRows = CAKE_CUDA_FORWARD_ROWS; /* rows per forward item */
constexpr int kBlockRows = 256; /* CAKE_DW_BLOCK_ROWS */
constexpr int kTreeWidth = 32;  /* tree leaves one tree thread folds in registers */
constexpr int kThreads = 256;
#ifndef CAKE_CUDA_MIN_BLOCKS
#define CAKE_CUDA_MIN_BLOCKS 2 /* forward: resident blocks per SM the register budget must allow
                                 (measured on the H200: 2 beats 1 by about 20 %) */
#endif
constexpr int kMinBlocks = CAKE_CUDA_MIN_BLOCKS;

struct TensorArgs {
    const uint16_t *x, *history, *dy, *future;
    uint16_t *y, *dx;
    const float *w;
    float *partials; /* backward: [levels][4][channels] fp32, see tree_level_offset */
    float *dw;
    int64_t channels, chunks; /* chunks = channels / kChunk */
    int64_t work_begin;       /* first item of this tensor in the launch's flat item space */
};

struct ConvArgs {
    int num_tensors;
    int64_t rows;
    const int64_t *frag_start; /* num_fragments + 1 entries, the last = rows */
    int64_t num_fragments;
    int64_t num_blocks;        /* dw blocks: ceil(rows / 256) */
    int64_t total_work;
    TensorArgs t[kMaxTensors];
};

/* One pass of the dw tree: level `in` (n_in roots per column) to level `in + 1`. */
struct TreePass {
    int64_t n_in, in_offset, out_offset; /* offsets in units of 4 * channels floats */
    int final_pass;                      /* n_in <= kTreeWidth: write dw */
};

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/* Round to nearest even; NaN stays NaN, quiet, sign kept; same bits as src/bf16.h. */
__device__ __forceinline__ uint32_t to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : rounded;
}

__device__ __forceinline__ uint32_t pack2(float even, float odd) {
    return to_bf16(even) | (to_bf16(odd) << 16);
}

/* Channel e (0..7, a compile-time constant after unrolling) of 8 packed bf16 values. Rows stay
 * packed in registers (4 words, not 8 floats) and are widened where they are used. */
__device__ __forceinline__ float channel(const uint4 &q, int e) {
    const uint32_t word = e < 2 ? q.x : e < 4 ? q.y : e < 6 ? q.z : q.w;
    return (e & 1) ? bf16_hi(word) : bf16_lo(word);
}

__device__ __forceinline__ uint4 load_row8(const uint16_t *p) {
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

__device__ __forceinline__ void store_row8(uint16_t *p, const float *v) {
    uint4 q;
    q.x = pack2(v[0], v[1]);
    q.y = pack2(v[2], v[3]);
    q.z = pack2(v[4], v[5]);
    q.w = pack2(v[6], v[7]);
    *reinterpret_cast<uint4 *>(p) = q;
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

/* Weights of 8 channels: w[e][k] = w[(c + e) * 4 + k]. */
__device__ __forceinline__ void load_weights(const float *w, int64_t c, float (&out)[kChunk][4]) {
    const float4 *p = reinterpret_cast<const float4 *>(w + c * 4);
#pragma unroll
    for (int e = 0; e < kChunk; e++) {
        const float4 q = __ldg(p + e);
        out[e][0] = q.x; out[e][1] = q.y; out[e][2] = q.z; out[e][3] = q.w;
    }
}

/* A fragment's position while walking rows. */
struct Cursor {
    int64_t f, start, end; /* fragment index and its local rows [start, end) */
};

__device__ __forceinline__ Cursor cursor_at(const ConvArgs &a, int64_t t) {
    Cursor c;
    c.f = fragment_of(a, t);
    c.start = __ldg(a.frag_start + c.f);
    c.end = __ldg(a.frag_start + c.f + 1);
    return c;
}

__device__ __forceinline__ void cursor_next(const ConvArgs &a, Cursor &c) {
    c.f++;
    c.start = c.end;
    c.end = __ldg(a.frag_start + c.f + 1);
}

/* x at local row r (r may be before the fragment: then a history row) for channel chunk c. */
__device__ __forceinline__ uint4 x_at(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r >= cur.start ? load_row8(T.x + r * T.channels + c)
                          : load_row8(T.history + (cur.f * 3 + 3 + (r - cur.start)) * T.channels + c);
}

/* y(t) from x(t-3), x(t-2), x(t-1), x(t). */
__device__ __forceinline__ void forward_row(const float (&w)[kChunk][4], const uint4 &a,
                                            const uint4 &b, const uint4 &c, const uint4 &d,
                                            float *out) {
#pragma unroll
    for (int e = 0; e < kChunk; e++) {
        float acc = __fmaf_rn(w[e][0], channel(a, e), 0.0f);
        acc = __fmaf_rn(w[e][1], channel(b, e), acc);
        acc = __fmaf_rn(w[e][2], channel(c, e), acc);
        out[e] = __fmaf_rn(w[e][3], channel(d, e), acc);
    }
}

__device__ void forward_item(const ConvArgs &a, const TensorArgs &T, int64_t t0, int64_t c) {
    const int64_t t1 = t0 + kForwardRows < a.rows ? t0 + kForwardRows : a.rows;
    float w[kChunk][4];
    load_weights(T.w, c, w);
    Cursor cur = cursor_at(a, t0);
    uint4 rows[kForwardRows];
#pragma unroll
    for (int r = 0; r < kForwardRows; r++)
        if (t0 + r < t1) rows[r] = load_row8(T.x + (t0 + r) * T.channels + c);
    uint4 w0 = x_at(T, cur, t0 - 3, c), w1 = x_at(T, cur, t0 - 2, c), w2 = x_at(T, cur, t0 - 1, c);
#pragma unroll
    for (int r = 0; r < kForwardRows; r++) {
        const int64_t t = t0 + r;
        if (t >= t1) break;
        if (t == cur.end) { /* a new fragment starts here: its window is its history */
            cursor_next(a, cur);
            w0 = x_at(T, cur, t - 3, c);
            w1 = x_at(T, cur, t - 2, c);
            w2 = x_at(T, cur, t - 1, c);
        }
        const uint4 xt = rows[r];
        float out[kChunk];
        forward_row(w, w0, w1, w2, xt, out);
        store_row8(T.y + t * T.channels + c, out);
        w0 = w1;
        w1 = w2;
        w2 = xt;
    }
}

/* ---- backward: one thread per channel pair and 256-row dw block -----------------------------
 * The 256 multiply-adds of a block partial are sequential by definition, so a thread walks its
 * block's rows in order, keeping the x and dy windows in registers. Owning only 2 channels keeps
 * the thread small (full occupancy hides the memory latency) and gives enough threads for small
 * shapes; a warp still reads 128 contiguous bytes per row. */
constexpr int kBackwardStep = 4; /* rows whose loads are issued together on the fast path */

__device__ __forceinline__ uint32_t load_pair(const uint16_t *p) {
    return __ldg(reinterpret_cast<const uint32_t *>(p));
}

/* x at local row r of the cursor's fragment (before it: a history row), channels c, c+1. */
__device__ __forceinline__ uint32_t x_pair(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r >= cur.start ? load_pair(T.x + r * T.channels + c)
                          : load_pair(T.history + (cur.f * 3 + 3 + (r - cur.start)) * T.channels + c);
}

/* dy at local row r of the cursor's fragment (past it: a future row). */
__device__ __forceinline__ uint32_t dy_pair(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r < cur.end ? load_pair(T.dy + r * T.channels + c)
                       : load_pair(T.future + (cur.f * 3 + (r - cur.end)) * T.channels + c);
}

struct PairWeights {
    float e[4], o[4]; /* taps of channels c (even) and c + 1 (odd) */
};

/* dx(t) from dy(t..t+3), and p[k] += dy(t) * x(t-3+k), for channels c and c + 1. */
__device__ __forceinline__ uint32_t backward_pair_row(const PairWeights &w, uint32_t x0, uint32_t x1,
                                                      uint32_t x2, uint32_t x3, uint32_t g0,
                                                      uint32_t g1, uint32_t g2, uint32_t g3,
                                                      float (&pe)[4], float (&po)[4]) {
    const float ge = bf16_lo(g0), go = bf16_hi(g0);
    float e = __fmaf_rn(w.e[3], ge, 0.0f), o = __fmaf_rn(w.o[3], go, 0.0f);
    e = __fmaf_rn(w.e[2], bf16_lo(g1), e);
    o = __fmaf_rn(w.o[2], bf16_hi(g1), o);
    e = __fmaf_rn(w.e[1], bf16_lo(g2), e);
    o = __fmaf_rn(w.o[1], bf16_hi(g2), o);
    e = __fmaf_rn(w.e[0], bf16_lo(g3), e);
    o = __fmaf_rn(w.o[0], bf16_hi(g3), o);
    pe[0] = __fmaf_rn(ge, bf16_lo(x0), pe[0]);
    po[0] = __fmaf_rn(go, bf16_hi(x0), po[0]);
    pe[1] = __fmaf_rn(ge, bf16_lo(x1), pe[1]);
    po[1] = __fmaf_rn(go, bf16_hi(x1), po[1]);
    pe[2] = __fmaf_rn(ge, bf16_lo(x2), pe[2]);
    po[2] = __fmaf_rn(go, bf16_hi(x2), po[2]);
    pe[3] = __fmaf_rn(ge, bf16_lo(x3), pe[3]);
    po[3] = __fmaf_rn(go, bf16_hi(x3), po[3]);
    return pack2(e, o);
}

__device__ void backward_item(const ConvArgs &a, const TensorArgs &T, int64_t b, int64_t c) {
    const int64_t t0 = b * kBlockRows;
    const int64_t t1 = t0 + kBlockRows < a.rows ? t0 + kBlockRows : a.rows;
    PairWeights w;
    {
        const float4 we = __ldg(reinterpret_cast<const float4 *>(T.w + c * 4));
        const float4 wo = __ldg(reinterpret_cast<const float4 *>(T.w + c * 4 + 4));
        w.e[0] = we.x; w.e[1] = we.y; w.e[2] = we.z; w.e[3] = we.w;
        w.o[0] = wo.x; w.o[1] = wo.y; w.o[2] = wo.z; w.o[3] = wo.w;
    }
    float pe[4] = {0.0f, 0.0f, 0.0f, 0.0f}, po[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    Cursor cur = cursor_at(a, t0);
    /* Windows: x(t-3), x(t-2), x(t-1) and dy(t), dy(t+1), dy(t+2). */
    uint32_t x0 = x_pair(T, cur, t0 - 3, c), x1 = x_pair(T, cur, t0 - 2, c), x2 = x_pair(T, cur, t0 - 1, c);
    uint32_t g0 = dy_pair(T, cur, t0, c), g1 = dy_pair(T, cur, t0 + 1, c), g2 = dy_pair(T, cur, t0 + 2, c);
    int64_t t = t0;
    while (t < t1) {
        if (t + kBackwardStep <= t1 && t + kBackwardStep + 2 < cur.end) {
            /* Fast path: every row read is inside the fragment; issue all loads first. */
            uint32_t xs[kBackwardStep], gs[kBackwardStep];
#pragma unroll
            for (int r = 0; r < kBackwardStep; r++) {
                xs[r] = load_pair(T.x + (t + r) * T.channels + c);
                gs[r] = load_pair(T.dy + (t + r + 3) * T.channels + c);
            }
#pragma unroll
            for (int r = 0; r < kBackwardStep; r++) {
                const uint32_t out = backward_pair_row(w, x0, x1, x2, xs[r], g0, g1, g2, gs[r], pe, po);
                *reinterpret_cast<uint32_t *>(T.dx + (t + r) * T.channels + c) = out;
                x0 = x1; x1 = x2; x2 = xs[r];
                g0 = g1; g1 = g2; g2 = gs[r];
            }
            t += kBackwardStep;
            continue;
        }
        if (t == cur.end) { /* a new fragment: both windows come from its pools */
            cursor_next(a, cur);
            x0 = x_pair(T, cur, t - 3, c);
            x1 = x_pair(T, cur, t - 2, c);
            x2 = x_pair(T, cur, t - 1, c);
            g0 = dy_pair(T, cur, t, c);
            g1 = dy_pair(T, cur, t + 1, c);
            g2 = dy_pair(T, cur, t + 2, c);
        }
        const uint32_t xt = load_pair(T.x + t * T.channels + c);
        const uint32_t g3 = dy_pair(T, cur, t + 3, c);
        *reinterpret_cast<uint32_t *>(T.dx + t * T.channels + c) =
            backward_pair_row(w, x0, x1, x2, xt, g0, g1, g2, g3, pe, po);
        x0 = x1; x1 = x2; x2 = xt;
        g0 = g1; g1 = g2; g2 = g3;
        t++;
    }
    /* Partials of block b at level 0: [b][k][channels]. */
    float *dst = T.partials + b * 4 * T.channels + c;
#pragma unroll
    for (int k = 0; k < 4; k++)
        *reinterpret_cast<float2 *>(dst + k * T.channels) = make_float2(pe[k], po[k]);
}

/* One tree thread: folds up to 32 consecutive roots of one (tap, channel) column by the
 * bottom-up pairwise rule (level s adds a[i + s] into a[i] for i a multiple of 2s, when
 * i + s < m). Over aligned groups of 32 this is exactly SPEC 3's tree. */
__device__ void tree_item(const TensorArgs &T, const TreePass &pass, int64_t group, int64_t col) {
    const int64_t stride = 4 * T.channels;
    const int64_t first = group * kTreeWidth;
    const int64_t m = pass.n_in - first < kTreeWidth ? pass.n_in - first : kTreeWidth;
    const float *src = T.partials + (pass.in_offset + first) * stride + col;
    float v[kTreeWidth];
#pragma unroll
    for (int l = 0; l < kTreeWidth; l++) v[l] = l < m ? src[l * stride] : 0.0f;
#pragma unroll
    for (int s = 1; s < kTreeWidth; s *= 2)
#pragma unroll
        for (int i = 0; i + s < kTreeWidth; i += 2 * s)
            if (i + s < m) v[i] = v[i] + v[i + s];
    if (pass.final_pass) {
        const int64_t k = col / T.channels, c = col % T.channels;
        T.dw[c * 4 + k] = v[0];
    } else {
        T.partials[(pass.out_offset + group) * stride + col] = v[0];
    }
}

} // namespace cake_cuda

#endif
