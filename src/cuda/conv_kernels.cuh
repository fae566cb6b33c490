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
constexpr int kForwardRows = 8; /* rows per forward item */
constexpr int kBlockRows = 256; /* CAKE_DW_BLOCK_ROWS */
constexpr int kTreeWidth = 32;  /* tree leaves one tree thread folds in registers */
constexpr int kThreads = 256;
#ifndef CAKE_CUDA_MIN_BLOCKS
#define CAKE_CUDA_MIN_BLOCKS 2 /* resident blocks per SM the register budget must allow */
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

/* dy at local row r (r may be past the fragment: then a future row). */
__device__ __forceinline__ uint4 dy_at(const TensorArgs &T, const Cursor &cur, int64_t r, int64_t c) {
    return r < cur.end ? load_row8(T.dy + r * T.channels + c)
                       : load_row8(T.future + (cur.f * 3 + (r - cur.end)) * T.channels + c);
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

/* One row of the backward: dx(t) from dy(t..t+3), and p[k] += dy(t) * x(t-3+k). */
__device__ __forceinline__ void backward_row(const float (&w)[kChunk][4], const uint4 &x0,
                                             const uint4 &x1, const uint4 &x2, const uint4 &x3,
                                             const uint4 &g0, const uint4 &g1, const uint4 &g2,
                                             const uint4 &g3, float (&p)[4][kChunk], float *dx) {
#pragma unroll
    for (int e = 0; e < kChunk; e++) {
        const float g = channel(g0, e);
        float acc = __fmaf_rn(w[e][3], g, 0.0f);
        acc = __fmaf_rn(w[e][2], channel(g1, e), acc);
        acc = __fmaf_rn(w[e][1], channel(g2, e), acc);
        dx[e] = __fmaf_rn(w[e][0], channel(g3, e), acc);
        p[0][e] = __fmaf_rn(g, channel(x0, e), p[0][e]);
        p[1][e] = __fmaf_rn(g, channel(x1, e), p[1][e]);
        p[2][e] = __fmaf_rn(g, channel(x2, e), p[2][e]);
        p[3][e] = __fmaf_rn(g, channel(x3, e), p[3][e]);
    }
}

constexpr int kBackwardStep = 4; /* rows whose loads are issued together on the fast path */

/* dw block b of one tensor for channels [c, c + 8): dx of its rows and the block partials. */
__device__ void backward_item(const ConvArgs &a, const TensorArgs &T, int64_t b, int64_t c) {
    const int64_t t0 = b * kBlockRows;
    const int64_t t1 = t0 + kBlockRows < a.rows ? t0 + kBlockRows : a.rows;
    float w[kChunk][4];
    load_weights(T.w, c, w);
    float p[4][kChunk];
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
        for (int e = 0; e < kChunk; e++) p[k][e] = 0.0f;
    Cursor cur = cursor_at(a, t0);
    /* Windows: x(t-3), x(t-2), x(t-1) and dy(t), dy(t+1), dy(t+2). */
    uint4 x0 = x_at(T, cur, t0 - 3, c), x1 = x_at(T, cur, t0 - 2, c), x2 = x_at(T, cur, t0 - 1, c);
    uint4 g0 = dy_at(T, cur, t0, c), g1 = dy_at(T, cur, t0 + 1, c), g2 = dy_at(T, cur, t0 + 2, c);
    int64_t t = t0;
    while (t < t1) {
        if (t + kBackwardStep <= t1 && t + kBackwardStep + 2 < cur.end) {
            /* Fast path: every row read is inside the fragment; issue all loads first. */
            uint4 xs[kBackwardStep], gs[kBackwardStep];
#pragma unroll
            for (int r = 0; r < kBackwardStep; r++) {
                xs[r] = load_row8(T.x + (t + r) * T.channels + c);
                gs[r] = load_row8(T.dy + (t + r + 3) * T.channels + c);
            }
#pragma unroll
            for (int r = 0; r < kBackwardStep; r++) {
                const uint4 xt = xs[r], g3 = gs[r];
                float out[kChunk];
                backward_row(w, x0, x1, x2, xt, g0, g1, g2, g3, p, out);
                store_row8(T.dx + (t + r) * T.channels + c, out);
                x0 = x1; x1 = x2; x2 = xt;
                g0 = g1; g1 = g2; g2 = g3;
            }
            t += kBackwardStep;
            continue;
        }
        if (t == cur.end) { /* a new fragment: reload both windows from its pools */
            cursor_next(a, cur);
            x0 = x_at(T, cur, t - 3, c);
            x1 = x_at(T, cur, t - 2, c);
            x2 = x_at(T, cur, t - 1, c);
            g0 = dy_at(T, cur, t, c);
            g1 = dy_at(T, cur, t + 1, c);
            g2 = dy_at(T, cur, t + 2, c);
        }
        const uint4 xt = load_row8(T.x + t * T.channels + c);
        const uint4 g3 = dy_at(T, cur, t + 3, c);
        float out[kChunk];
        backward_row(w, x0, x1, x2, xt, g0, g1, g2, g3, p, out);
        store_row8(T.dx + t * T.channels + c, out);
        x0 = x1; x1 = x2; x2 = xt;
        g0 = g1; g1 = g2; g2 = g3;
        t++;
    }
    /* Partials of block b at level 0: [b][k][channels]. */
    float *dst = T.partials + b * 4 * T.channels + c;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float4 *q = reinterpret_cast<float4 *>(dst + k * T.channels);
        q[0] = make_float4(p[k][0], p[k][1], p[k][2], p[k][3]);
        q[1] = make_float4(p[k][4], p[k][5], p[k][6], p[k][7]);
    }
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
