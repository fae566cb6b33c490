/* SiLU and its derivative in fp32: the fixed operation sequences of docs/NUMERICS.md section 9
 * (step names E1-E6, S1-S6, G1-G7 below are the document's), written once for every build that
 * computes them (generic C, AVX2 and AVX-512 through the compiler's vectoriser, CUDA device
 * code), so all of them give the same bits.
 *
 *   cake_silu(a)      = a * sigmoid(a)                          (docs/NUMERICS.md: <= 2 ulp; 1.02 measured)
 *   cake_silu_grad(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))) (<= 2 ulp; 1.16 measured)
 *   cake_silu_for_bf16(a): a value with bf16 rounding bf16(cake_silu(a)), usually by a shorter
 *                      sequence (section 9.8; what the forwards use, since y is bf16)
 *
 * Only these operations appear: fp32 fma, add, subtract, multiply, one correctly rounded divide
 * per function (on the GPU computed as CUDA's own correctly rounded reciprocal computes it:
 * cake_act_recip_), compares, selections and integer operations on bit patterns (in device code
 * also fabsf and fminf, exact and one instruction each). No libm function other than fmaf (an
 * exact IEEE operation; a libm call in builds without hardware fma), no rint
 * (rounding to an integer is an fma with 1.5 * 2^23), no double, no table, no branch: the plain
 * loop over an array vectorises (device code alone puts step G2 of silu' behind a
 * branch: CAKE_ACT_GRAD_NEAR_BRANCH). A NaN input is returned unchanged. (The quick sequence at the
 * end only decides a bf16: on the GPU its exponential and its divide are the hardware's
 * approximations, and cake_silu_for_bf16 branches to the full sequence; see there.)
 *
 * Rules that keep the bits equal everywhere, for whoever edits this file:
 *  - Build without contraction and fast-math (C: -ffp-contract=off -fno-math-errno, never
 *    -ffast-math; CUDA: -fmad=false, no --use_fast_math, no -ftz=true, no -prec-div=false).
 *    Subnormals must not be flushed (the default of both).
 *  - Every constant is an exact hex float, so no compiler rounds a decimal differently.
 *  - Selections between floats are bit masks (cake_act_sel_), never ?: on floats: under GCC's
 *    default -ftrapping-math a ?: becomes a branch that the arithmetic around it is sunk into,
 *    and the loop no longer vectorises (seen with AVX2). Masks compile to blends, vpternlogd and
 *    LOP3.
 *  - Never negate the result of an fma, add or subtract: GCC rewrites -(x*y + z) as -(x*y) - z,
 *    which differs in the sign of a zero result. Negating an operand (fmaf(-x, y, z)) or a
 *    product is exact and safe; the sign of silu's zeros is applied once, at the end, from a.
 * tests/test_activation.c checks every fp32 input against a float64 oracle, against the
 * independent tests/reference_activation.c and across the generic, AVX2 and AVX-512 builds;
 * tests/cuda/test_activation_cuda.cu checks the GPU against the CPU for every input. */
#ifndef CAKE_ACTIVATION_H
#define CAKE_ACTIVATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Always inlined: the vectoriser needs the whole sequence in the loop body, and GCC's inlining
 * heuristics stopped inlining cake_silu_grad once it grew (the CPU backward with SiLU became
 * scalar, 11 times slower). */
#if defined(__CUDACC__)
#define CAKE_ACT_FN static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define CAKE_ACT_FN static inline __attribute__((always_inline))
#else
#define CAKE_ACT_FN static inline
#endif

CAKE_ACT_FN uint32_t cake_act_bits_(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

CAKE_ACT_FN float cake_act_float_(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* m ? x : y for a mask m of all ones or all zeros, on the bit patterns. */
CAKE_ACT_FN float cake_act_sel_(uint32_t m, float x, float y) {
    return cake_act_float_((cake_act_bits_(x) & m) | (cake_act_bits_(y) & ~m));
}

/* 1 / d, correctly rounded, for d in [1, 2] (E6's only division; d is never outside).
 * CAKE_ACT_RCP_BRANCHLESS (default 1) on the GPU: the fast path of CUDA's correctly rounded
 * reciprocal (__frcp_rn: MUFU.RCP, then one fma residual and one fma correction, as its SASS
 * shows) without the range check around it, which costs a compare, a branch and a call to the
 * slow path for every element and stops the scheduler from interleaving the elements' sequences.
 * The check can only fire for zeros, subnormals, huge values and specials, none of which d is,
 * so the bits are those of 1/d (tests/cuda/test_activation_cuda.cu compares every input with the
 * CPU). 1 - d*s0 is computed as fma(-d, s0, 1), the negation of __frcp_rn's fma(d, s0, -1):
 * round-to-nearest is symmetric, so the same value. */
#ifndef CAKE_ACT_RCP_BRANCHLESS
#define CAKE_ACT_RCP_BRANCHLESS 1
#endif
#if defined(__CUDA_ARCH__)
/* The hardware's approximate reciprocal (MUFU.RCP), where both reciprocals below start. */
static __device__ __forceinline__ float cake_act_rcp_approx_(float d) {
    float s;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(d));
    return s;
}
#endif
CAKE_ACT_FN float cake_act_recip_(float d) {
#if defined(__CUDA_ARCH__) && CAKE_ACT_RCP_BRANCHLESS
    const float s0 = cake_act_rcp_approx_(d);
    return __fmaf_rn(s0, __fmaf_rn(-d, s0, 0x1p+0f), s0);
#else
    return 0x1p+0f / d;
#endif
}

/* E1-E6, what both functions share: E = e^-|a| (|a| clamped to 128) as eh + el, scaled by 2^96
 * when E < 2^-63 so that nothing before the last multiply is subnormal, and the denominator
 * 1 + E as d + err (exactly the sum of 1 and the unscaled eh; 1 alone when scaled), s = 1/d. */
typedef struct cake_act_core_ {
    float ac;     /* a clamped to [-128, 128] (a NaN becomes +-128; callers return the NaN) */
    float eh, el; /* e^-|ac| * 2^(96 if scaled), as a high part and its rounding error */
    float ed;     /* eh, or 0 when scaled: the E of the denominator */
    float d, err; /* 1 + ed = d + err exactly */
    float s;      /* 1 / d, correctly rounded: the one division */
    uint32_t neg;    /* all ones when the sign bit of a is set (-0 included), else 0 */
    uint32_t scaled; /* all ones when n <= -64, i.e. E < 2^-63, else 0 */
} cake_act_core_;

/* `unscaled` (a constant the inlining folds): the caller guarantees |a| <= CAKE_ACT_UNSCALED_MAX
 * (so a is no NaN): then the clamp changes nothing and n >= -63, so `scaled` is 0, and the
 * operations that only matter otherwise are left out; every value is the same. */
#define CAKE_ACT_UNSCALED_MAX 0x1.6p+5f /* 44: t log2(e) <= 63.48, so n = rint(-t log2(e)) >= -63 */
CAKE_ACT_FN cake_act_core_ cake_act_core_eval_(float a, const int unscaled) {
    cake_act_core_ k;
    /* E1: |a| clamped to 128: on the CPU on the bit pattern (integer min; every NaN is above
     * 128), on the GPU by one float min on |a| (FMNMX, which returns 128 for a NaN): the same
     * t for every input, one instruction fewer. */
    const uint32_t u = cake_act_bits_(a);
#if defined(__CUDA_ARCH__)
    const float t = unscaled ? fabsf(a) : fminf(fabsf(a), 0x1p+7f);
    const uint32_t tb = cake_act_bits_(t);
#else
    const uint32_t mag = u & 0x7fffffffu;
    const uint32_t tb = unscaled || mag < 0x43000000u ? mag : 0x43000000u;
    const float t = cake_act_float_(tb);
#endif
    k.ac = unscaled ? a : cake_act_float_(tb | (u & 0x80000000u));
    k.neg = 0u - (u >> 31);
    /* E2: n = rint(-t * log2(e)), ties to even: the fma rounds to an integer at 1.5 * 2^23,
     * whose low mantissa bits then hold n (two's complement, n in [-185, 0]). */
    const float j = fmaf(-t, 0x1.715476p+0f, 0x1.8p+23f);
    const float n = j - 0x1.8p+23f;
    /* E3: r = -t - n ln2 (Cody-Waite; the first step is exact), |r| <= 0.34658 */
    const float r1 = fmaf(n, -0x1.62e430p-1f, -t);
    const float r = fmaf(n, 0x1.05c610p-29f, r1);
    /* E4: e^r = 1 + r * P(r) (minimax, 2^-28) as ph + pl, pl the rounding error of ph */
    float p = fmaf(0x1.6a23f2p-10f, r, 0x1.123a0ap-7f);
    p = fmaf(p, r, 0x1.5558f2p-5f);
    p = fmaf(p, r, 0x1.555492p-3f);
    p = fmaf(p, r, 0x1.fffffcp-2f);
    p = fmaf(p, r, 0x1p+0f);
    const float ph = fmaf(p, r, 0x1p+0f);
    const float pl = fmaf(p, r, 0x1p+0f - ph); /* 1 - ph is exact */
    /* 2^n, or 2^(n+96) when scaled: n + 127 (+ 96) placed in the exponent field */
    k.scaled = unscaled ? 0u : -(uint32_t)(n < -0x1.fcp+5f); /* n <= -64 */
    const float two_n = cake_act_float_((cake_act_bits_(j) << 23) + 0x3f800000u +
                                        (k.scaled & 0x30000000u));
    /* E5 */
    k.eh = ph * two_n;
    k.el = pl * two_n;
    /* E6 */
    k.ed = cake_act_float_(cake_act_bits_(k.eh) & ~k.scaled);
    k.d = 0x1p+0f + k.ed;
    k.err = (0x1p+0f - k.d) + k.ed;
    k.s = cake_act_recip_(k.d);
    return k;
}

/* silu(a) = a E' / (1 + E) with E' = E for a < 0 (a * sigmoid(a) = a e^a / (1 + e^a)) and E' = 1
 * for a >= 0: the numerator as a double-float, then one compensated quotient (S1-S6). */
CAKE_ACT_FN float cake_silu(float a) {
    const cake_act_core_ k = cake_act_core_eval_(a, 0);
    const float ph = cake_act_sel_(k.neg, k.eh, 0x1p+0f);                 /* S1 */
    const float pl = cake_act_float_(cake_act_bits_(k.el) & k.neg);
    const float nh = k.ac * ph;                                           /* S2 */
    const float nl = fmaf(k.ac, pl, fmaf(k.ac, ph, -nh));
    const float q = nh * k.s;                                             /* S3 */
    const float rr = fmaf(-q, k.d, nh) + nl;
    const float t2 = fmaf(-q, k.err, rr);
    float y = fmaf(t2, k.s, q);
    y = y * cake_act_float_(0x3f800000u - (k.neg & k.scaled & 0x30000000u)); /* S4: 2^-96 or 1 */
    y = cake_act_float_(cake_act_bits_(y) | (cake_act_bits_(a) & 0x80000000u)); /* S5 */
    /* S6: a > 128 (silu(a) = a, +inf included) or NaN: a itself */
    return cake_act_sel_(0u - (uint32_t)!(a <= 0x1p+7f), a, y);
}

/* G2's T near the zero of silu' a0 = A0H + A0L (to 2^-53): T = (w - A0L) P(w) as *th + *tl, for
 * w = a - A0H (exact there), P(w) = C0 + w (C1 + w (C2 + w C3)) fitted on |w| <= 2^-4 to 2^-28
 * relative, C0 = C0H + C0L and the last step a double-float (C0H - ph is exact). */
CAKE_ACT_FN void cake_act_grad_near_(float w, float *th, float *tl) {
    const float pq = fmaf(fmaf(0x1.7c3f16p-7f, w, 0x1.7c456cp-5f), w, 0x1.1d25cep-3f);
    const float ph = fmaf(pq, w, 0x1.474974p+0f);
    const float pl = fmaf(pq, w, 0x1.474974p+0f - ph) + -0x1.4a133ep-26f;
    *th = w * ph;
    *tl = fmaf(-0x1.bdf6fap-27f, ph, fmaf(w, pl, fmaf(w, ph, -*th)));
}

/* CAKE_ACT_GRAD_NEAR_BRANCH (default 1) in device code: G2 behind a branch, run only by the warps
 * with a lane near the zero, instead of computed for every element and selected (0; what the CPU
 * builds do, for the vectoriser). Same bits. H200, main-shape bias + SiLU backward: 1747 us
 * against 1924 selected (docs/PERFORMANCE.md). */
#ifndef CAKE_ACT_GRAD_NEAR_BRANCH
#define CAKE_ACT_GRAD_NEAR_BRANCH 1
#endif

/* silu'(a) = E' T / (1 + E)^2 with T = 1 + E + a E (a >= 0) or 1 + E + a (a < 0), E' = E for a < 0
 * and 1 otherwise (G1-G7): T and the numerator as double-floats, the squared denominator as a
 * double-float with el in it, one compensated quotient. T vanishes at a0 = -1.27846...: there
 * no evaluation through E is accurate enough, so for |a - a0| < 2^-4 T comes from a polynomial
 * in a - a0 instead (G2). Within 1.16 ulp of float64 on every finite input (docs/NUMERICS.md
 * 9.6). */
CAKE_ACT_FN float cake_silu_grad_(float a, const int unscaled) {
    const cake_act_core_ k = cake_act_core_eval_(a, unscaled);
    /* G1: 1 + E = d + dlo; T = d + dlo + ac F (F = 1 for a < 0, E = ed + eld otherwise) as
     * th + tl, its head by a two-sum (|ac F| may exceed d when a < -2) */
    const float eld = cake_act_float_(cake_act_bits_(k.el) & ~k.scaled);
    const float dlo = k.err + eld;
    const float fh = cake_act_sel_(k.neg, 0x1p+0f, k.ed);
    const float fl = cake_act_float_(cake_act_bits_(eld) & ~k.neg);
    const float xh = k.ac * fh;
    const float xl = fmaf(k.ac, fl, fmaf(k.ac, fh, -xh));
    float th = k.d + xh;
    const float z = th - k.d;
    float tl = ((k.d - (th - z)) + (xh - z)) + (xl + dlo);
    /* G2: near the zero (|w| < 2^-4, w = a - A0H), T from a polynomial instead */
    const float w = a - -0x1.474974p+0f;
#if defined(__CUDA_ARCH__) && CAKE_ACT_GRAD_NEAR_BRANCH
    /* one compare on |w| (FSETP); false for a NaN w, as the test on the bits below */
    if (fabsf(w) < 0x1p-4f) cake_act_grad_near_(w, &th, &tl);
#else
    const uint32_t near = 0u - (uint32_t)((cake_act_bits_(w) & 0x7fffffffu) < 0x3d800000u);
    float wh, wl;
    cake_act_grad_near_(w, &wh, &wl);
    th = cake_act_sel_(near, wh, th);
    tl = cake_act_sel_(near, wl, tl);
#endif
    /* G3: the numerator E' T as a double-float */
    const float mh = cake_act_sel_(k.neg, k.eh, 0x1p+0f);
    const float ml = cake_act_float_(cake_act_bits_(k.el) & k.neg);
    const float nh = mh * th;
    const float nl = fmaf(mh, tl, fmaf(ml, th, fmaf(mh, th, -nh)));
    /* G4: (d + dlo)^2 as dh + dl, and 1/d^2 */
    const float s2 = k.s * k.s;
    const float dh = k.d * k.d;
    const float dl = fmaf(k.d + k.d, dlo, fmaf(k.d, k.d, -dh));
    /* G5 */
    const float q = nh * s2;
    const float rr = fmaf(-q, dh, nh) + nl;
    const float t2 = fmaf(-q, dl, rr);
    float g = fmaf(t2, s2, q);
    if (unscaled) return g; /* G6 multiplies by 1, G7 sees no NaN */
    g = g * cake_act_float_(0x3f800000u - (k.neg & k.scaled & 0x30000000u)); /* G6: 2^-96 or 1 */
    return cake_act_sel_(0u - (uint32_t)(a != a), a, g);                  /* G7: NaN: a itself */
}
CAKE_ACT_FN float cake_silu_grad(float a) { return cake_silu_grad_(a, 0); }
/* cake_silu_grad(a) for |a| <= CAKE_ACT_UNSCALED_MAX only (the same bits, fewer operations: in
 * device code about 10 of its 85 instructions; the walks take it where a step's a are all in
 * range, which ordinary activations are). */
CAKE_ACT_FN float cake_silu_grad_unscaled(float a) { return cake_silu_grad_(a, 1); }

/* ---- silu for a bf16 output: the quick sequence Q1-Q5 (docs/NUMERICS.md 9.8) ----------------
 * Where only bf16(silu(a)) is kept (the forward's y), a shorter fp32 sequence usually decides the
 * same bf16: q below is within CAKE_SILU_QUICK_DISTANCE bit patterns of cake_silu(a) for every
 * |a| <= 64 (5 measured over every such input, on the CPU and on the H200), so when q's low 16
 * bits are farther than that from the bf16 rounding midpoint 0x8000, q and cake_silu(a) round
 * to the same bf16. Elsewhere (about 2.6 in 10^4 of those inputs, and |a| > 64, infinities,
 * NaN) the full sequence runs. The bits that come out are always those of bf16(cake_silu(a)):
 * tests/test_activation.c and tests/cuda/test_activation_cuda.cu check every fp32 input. The
 * CPU builds use the operations above (no exp, no fast intrinsic), so their decisions agree; the
 * GPU's E and Q3 (cake_silu_quick_exp_, cake_silu_quick_recip_) may differ from theirs in the
 * last bits, never in y.
 * cake_silu_for_bf16 branches, so a plain loop of it does not vectorise: the CPU forward
 * vectorises cake_silu_quick_ and calls cake_silu_for_bf16 only for the elements it flagged
 * (src/conv_cpu_kernels.inc). */
#define CAKE_SILU_QUICK_DISTANCE 8u

/* Q3's reciprocal 1/d, d in [1, 2]: correctly rounded (cake_act_recip_), except in device code
 * with CAKE_SILU_QUICK_RCP_APPROX (default 1): the hardware's approximate reciprocal alone
 * (MUFU.RCP; PTX states 1 ulp of 1/d), without the two fmas that round it correctly. That moves
 * s by at most one bit pattern and q by at most 3 (docs/NUMERICS.md 9.8), inside the guard's 8;
 * tests/cuda/test_activation_cuda.cu measures the GPU's q against cake_silu on every input.
 * Only q's bf16 rounding is used, and Q5 makes it that of cake_silu on every build, so the
 * bits of y do not change; which inputs take the full sequence may differ from the CPU's. */
#ifndef CAKE_SILU_QUICK_RCP_APPROX
#define CAKE_SILU_QUICK_RCP_APPROX 1
#endif
CAKE_ACT_FN float cake_silu_quick_recip_(float d) {
#if defined(__CUDA_ARCH__) && CAKE_SILU_QUICK_RCP_APPROX
    return cake_act_rcp_approx_(d);
#else
    return cake_act_recip_(d);
#endif
}

/* Q1-Q2 on the GPU: E = e^-t (t = |a|, or a itself with CAKE_SILU_QUICK_SIGNED) from the
 * hardware's 2^x (MUFU.EX2; CUDA documents its exp2f, this instruction, within 2 ulp), with
 * CAKE_SILU_QUICK_EX2 (default 1). Its argument -t log2(e) is
 * carried as xh + xl: xh the rounded product, xl the product's rounding error (exact by an fma)
 * plus t times the part of log2(e) below the fp32 constant, so E = 2^xh 2^xl = 2^xh (1 + xl ln2)
 * to 2^-35 (|xl| < 2^-17). Six instructions, none of them integer, against Q1-Q2's eleven (two
 * integer); the GPU's q stays within 5 patterns of cake_silu, as the CPU's, measured on every
 * input by tests/cuda/test_activation_cuda.cu (docs/NUMERICS.md 9.8). H200, main-shape bias +
 * SiLU forward 669.9 -> 612.8 us queued (docs/PERFORMANCE.md). 0: the CPU's Q1-Q2 on the GPU. */
#ifndef CAKE_SILU_QUICK_EX2
#define CAKE_SILU_QUICK_EX2 1
#endif
#if defined(__CUDA_ARCH__)
static __device__ __forceinline__ float cake_silu_quick_exp_(float t) {
    const float xh = -t * 0x1.715476p+0f;
    /* -xl, so that every operand is one the fmas take without a negation of their own */
    const float nxl = __fmaf_rn(t, 0x1.4ae0c0p-26f, __fmaf_rn(t, 0x1.715476p+0f, xh));
    float eh;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(eh) : "f"(xh)); /* |a| <= 64: 2^xh is normal */
    return __fmaf_rn(eh, nxl * -0x1.62e430p-1f, eh);
}
#endif

/* Q5: whether bf16(q) = bf16(cake_silu(a)) is guaranteed: |a| <= 64 and q's low 16 bits more
 * than the distance away from the bf16 rounding midpoint 0x8000. In device code both tests take
 * one instruction each: |a| by the compare's absolute-value operand (FSETP), and the window test
 * on the low half moved to the top, v = (low - (0x8000 - D)) mod 2^16, times 2^16 (one IMAD),
 * which is above 2D exactly when v > (2D << 16) + 0xffff. On the CPU, the same test on the
 * integers as they are (what the vectoriser compiles best). */
CAKE_ACT_FN uint32_t cake_silu_quick_decides_(float a, float q) {
#if defined(__CUDA_ARCH__)
    const uint32_t v = (cake_act_bits_(q) << 16) - ((0x8000u - CAKE_SILU_QUICK_DISTANCE) << 16);
    return (uint32_t)(fabsf(a) <= 0x1p+6f) &
           (uint32_t)(v > ((2u * CAKE_SILU_QUICK_DISTANCE) << 16) + 0xffffu);
#else
    const uint32_t low = cake_act_bits_(q) & 0xffffu;
    return (uint32_t)((cake_act_bits_(a) & 0x7fffffffu) <= 0x42800000u) &
           (uint32_t)(low - (0x8000u - CAKE_SILU_QUICK_DISTANCE) > 2u * CAKE_SILU_QUICK_DISTANCE);
#endif
}

/* Q4 on the GPU, with CAKE_SILU_QUICK_SIGNED (default 1; needs CAKE_SILU_QUICK_EX2): q = a s with
 * s = 1 / (1 + e^-a) for either sign of a, E = e^-a from cake_silu_quick_exp_(a) (for a < 0 up to
 * e^64, far inside fp32), instead of E = e^-|a| and q = a E s for negative a. No sign mask, no
 * selection and one multiply fewer; for a < 0 the error moves from a E (one rounding) to
 * 1 + E (one rounding), and the GPU's q stays inside the guard, measured on every input by
 * tests/cuda/test_activation_cuda.cu (docs/NUMERICS.md 9.8). 0: Q1-Q4 as below. */
#ifndef CAKE_SILU_QUICK_SIGNED
#define CAKE_SILU_QUICK_SIGNED 1
#endif

/* q (Q1-Q4), and through *ok whether bf16(q) = bf16(cake_silu(a)) is guaranteed (Q5). */
CAKE_ACT_FN float cake_silu_quick_(float a, uint32_t *ok) {
#if defined(__CUDA_ARCH__) && CAKE_SILU_QUICK_EX2 && CAKE_SILU_QUICK_SIGNED
    const float q = a * cake_silu_quick_recip_(0x1p+0f + cake_silu_quick_exp_(a));
#else
    const uint32_t u = cake_act_bits_(a), mag = u & 0x7fffffffu;
    const float t = cake_act_float_(mag);
    const uint32_t neg = 0u - (u >> 31);
#if defined(__CUDA_ARCH__) && CAKE_SILU_QUICK_EX2
    const float e = cake_silu_quick_exp_(t);
#else
    /* Q1: n = rint(-t log2(e)) as E2; r = -t - n ln2 with one constant (|n| <= 93) */
    const float j = fmaf(-t, 0x1.715476p+0f, 0x1.8p+23f);
    const float n = j - 0x1.8p+23f;
    const float r = fmaf(n, -0x1.62e430p-1f, -t);
    /* Q2: e^r by a degree-5 minimax polynomial (2^-23.1 relative), E = e^r 2^n */
    float p = fmaf(0x1.107536p-7f, r, 0x1.572a6cp-5f);
    p = fmaf(p, r, 0x1.55578cp-3f);
    p = fmaf(p, r, 0x1.fffdfcp-2f);
    p = fmaf(p, r, 0x1p+0f);
    p = fmaf(p, r, 0x1p+0f);
    const float e = p * cake_act_float_((cake_act_bits_(j) << 23) + 0x3f800000u);
#endif
    /* Q3: s = 1 / (1 + E), correctly rounded as E6 (within one pattern of it on the GPU) */
    const float s = cake_silu_quick_recip_(0x1p+0f + e);
    /* Q4: q = a E' s, E' = E for negative a, else 1 */
    const float q = (a * cake_act_sel_(neg, e, 0x1p+0f)) * s;
#endif
    *ok = cake_silu_quick_decides_(a, q);
    return q;
}

/* A value whose bf16 rounding is bf16(cake_silu(a)): q where Q5 allows, else cake_silu(a). The
 * full sequence is behind a branch, so the SIMT GPU runs it only for warps that need it. */
CAKE_ACT_FN float cake_silu_for_bf16(float a) {
    uint32_t ok;
    const float q = cake_silu_quick_(a, &ok);
    if (ok) return q;
    return cake_silu(a);
}

#endif
