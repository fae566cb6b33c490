/* SiLU and its derivative by the steps of docs/NUMERICS.md, "Activation" (step names below are
 * the document's). Independent of src/activation.h: written from the document, not from the
 * library. */
#include "reference_activation.h"

#include <math.h>
#include <stdint.h>

typedef union {
    float f;
    uint32_t u;
} ref_word;

static uint32_t bits_of(float f) {
    ref_word w;
    w.f = f;
    return w.u;
}

static float float_of(uint32_t u) {
    ref_word w;
    w.u = u;
    return w.f;
}

/* Steps E1-E6: everything both functions use. */
typedef struct {
    int negative;  /* E1 */
    float t, ac;   /* E1 */
    float hi, lo;  /* E5: the scaled e^-t */
    float den;     /* E6: the E of the denominator */
    float d, err;  /* E6 */
    float s;       /* E6 */
    int scaled;    /* E4 */
} ref_common;

static ref_common common_steps(float a) {
    ref_common c;
    const uint32_t in = bits_of(a);
    /* E1: sign, |a| clamped to 128 as an unsigned minimum of the magnitude bits, a's sign on it */
    c.negative = (in & 0x80000000u) != 0;
    uint32_t magnitude = in & 0x7fffffffu;
    if (magnitude > 0x43000000u)
        magnitude = 0x43000000u;
    c.t = float_of(magnitude);
    c.ac = float_of(magnitude | (in & 0x80000000u));
    /* E2: n = round-to-even(-t log2 e) through the 1.5 * 2^23 shifter */
    const float shifted = fmaf(-c.t, 0x1.715476p+0f, 0x1.8p+23f);
    const float n = shifted - 0x1.8p+23f;
    /* E3: r = -t - n ln2, two steps */
    float r = fmaf(n, -0x1.62e430p-1f, -c.t);
    r = fmaf(n, 0x1.05c610p-29f, r);
    /* E4: e^r = P(r) as hi + lo; the scale 2^n (2^(n+96) when n <= -64) */
    const float coefficient[5] = {0x1.6a23f2p-10f, 0x1.123a0ap-7f, 0x1.5558f2p-5f,
                                  0x1.555492p-3f, 0x1.fffffcp-2f};
    float h = coefficient[0];
    for (int i = 1; i < 5; i++)
        h = fmaf(h, r, coefficient[i]);
    h = fmaf(h, r, 1.0f);
    const float e_hi = fmaf(h, r, 1.0f);
    const float e_lo = fmaf(h, r, 1.0f - e_hi);
    c.scaled = n <= -64.0f;
    uint32_t exponent = (bits_of(shifted) << 23) + (127u << 23);
    if (c.scaled)
        exponent += 96u << 23;
    const float scale = float_of(exponent);
    /* E5 */
    c.hi = e_hi * scale;
    c.lo = e_lo * scale;
    /* E6: the denominator 1 + E as d + err, and its correctly rounded reciprocal */
    c.den = c.scaled ? 0.0f : c.hi;
    c.d = 1.0f + c.den;
    c.err = (1.0f - c.d) + c.den;
    c.s = 1.0f / c.d;
    return c;
}

/* A quotient (nh + nl) / (dh + dl) from the reciprocal s of dh (steps S3 and G5). */
static float compensated_quotient(float nh, float nl, float dh, float dl, float s) {
    const float q = nh * s;
    float rest = fmaf(-q, dh, nh);
    rest = rest + nl;
    rest = fmaf(-q, dl, rest);
    return fmaf(rest, s, q);
}

float ref_silu(float a) {
    const ref_common c = common_steps(a);
    /* S1-S2: the numerator ac * E' (E' = E for negative a, 1 otherwise) as a double-float */
    float m_hi = 1.0f, m_lo = 0.0f;
    if (c.negative) {
        m_hi = c.hi;
        m_lo = c.lo;
    }
    const float num_hi = c.ac * m_hi;
    float num_lo = fmaf(c.ac, m_hi, -num_hi);
    num_lo = fmaf(c.ac, m_lo, num_lo);
    /* S3 */
    float y = compensated_quotient(num_hi, num_lo, c.d, c.err, c.s);
    /* S4: undo the scale */
    if (c.negative && c.scaled)
        y = y * 0x1p-96f;
    /* S5: a's sign bit on the result */
    if (c.negative)
        y = float_of(bits_of(y) | 0x80000000u);
    /* S6 */
    if (isnan(a) || a > 128.0f)
        return a;
    return y;
}

/* Step G2's window and polynomial: T = (w - a0_lo) P(w) for |w| < 2^-4, w = a - a0_hi. */
static const float a0_hi = -0x1.474974p+0f, a0_lo = 0x1.bdf6fap-27f;
static const float p_c0_hi = 0x1.474974p+0f, p_c0_lo = -0x1.4a133ep-26f;
static const float p_c[3] = {0x1.1d25cep-3f, 0x1.7c456cp-5f, 0x1.7c3f16p-7f}; /* C1, C2, C3 */

float ref_silu_grad(float a) {
    const ref_common c = common_steps(a);
    /* G1: 1 + E = d + d_lo; T = d + d_lo + ac F (F = 1 for negative a, E otherwise) */
    const float e_lo = c.scaled ? 0.0f : c.lo;
    const float d_lo = c.err + e_lo;
    float f_hi = c.den, f_lo = e_lo;
    if (c.negative) {
        f_hi = 1.0f;
        f_lo = 0.0f;
    }
    const float x_hi = c.ac * f_hi;
    float x_lo = fmaf(c.ac, f_hi, -x_hi);
    x_lo = fmaf(c.ac, f_lo, x_lo);
    float t_hi = c.d + x_hi; /* two-sum of d and x_hi */
    const float z = t_hi - c.d;
    float t_lo = (c.d - (t_hi - z)) + (x_hi - z);
    t_lo = t_lo + (x_lo + d_lo);
    /* G2 */
    const float w = a - a0_hi;
    if (fabsf(w) < 0x1p-4f) {
        float pq = fmaf(p_c[2], w, p_c[1]);
        pq = fmaf(pq, w, p_c[0]);
        const float p_hi = fmaf(pq, w, p_c0_hi);
        float p_lo = fmaf(pq, w, p_c0_hi - p_hi);
        p_lo = p_lo + p_c0_lo;
        t_hi = w * p_hi;
        float w_lo = fmaf(w, p_hi, -t_hi);
        w_lo = fmaf(w, p_lo, w_lo);
        t_lo = fmaf(-a0_lo, p_hi, w_lo);
    }
    /* G3: numerator E' T as a double-float */
    float m_hi = 1.0f, m_lo = 0.0f;
    if (c.negative) {
        m_hi = c.hi;
        m_lo = c.lo;
    }
    const float num_hi = m_hi * t_hi;
    float num_lo = fmaf(m_hi, t_hi, -num_hi);
    num_lo = fmaf(m_lo, t_hi, num_lo);
    num_lo = fmaf(m_hi, t_lo, num_lo);
    /* G4: (d + d_lo)^2 as sq_hi + sq_lo, and s^2 */
    const float s2 = c.s * c.s;
    const float sq_hi = c.d * c.d;
    float sq_lo = fmaf(c.d, c.d, -sq_hi);
    sq_lo = fmaf(c.d + c.d, d_lo, sq_lo);
    /* G5 */
    float g = compensated_quotient(num_hi, num_lo, sq_hi, sq_lo, s2);
    /* G6 */
    if (c.negative && c.scaled)
        g = g * 0x1p-96f;
    /* G7 */
    if (isnan(a))
        return a;
    return g;
}
