/* INTERIM placeholder so the tree builds while the documented SiLU sequence is written (it
 * replaces this file). Uses only fma, add, multiply, divide, rint and bit operations. */
#ifndef CAKE_ACTIVATION_H
#define CAKE_ACTIVATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define CAKE_ACT_FN static __host__ __device__ __forceinline__
#else
#define CAKE_ACT_FN static inline
#endif

CAKE_ACT_FN float cake_act_exp_neg(float t) { /* e^-t for 0 <= t <= 128, t clamped by callers */
    const float n = rintf(-t * 1.44269502f);
    float r = fmaf(n, -0.693145751953125f, -t);
    r = fmaf(n, -1.42860677e-06f, r);
    float p = fmaf(r, 1.0f / 5040.0f, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int32_t k = (int32_t)n < -126 ? -126 : (int32_t)n;
    const uint32_t bits = (uint32_t)(k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

CAKE_ACT_FN float cake_silu(float a) {
    const float t = fminf(fabsf(a), 128.0f);
    const float e = cake_act_exp_neg(t);
    const float s = a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    return a != a ? a : (a > 128.0f ? a : a * s);
}

CAKE_ACT_FN float cake_silu_grad(float a) {
    const float t = fminf(fabsf(a), 128.0f);
    const float e = cake_act_exp_neg(t);
    const float s = a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    const float ac = a >= 0.0f ? fminf(a, 128.0f) : -t;
    return a != a ? a : s * fmaf(ac, 1.0f - s, 1.0f);
}

#endif
