/* bf16 <-> fp32 conversions fixed by docs/NUMERICS.md, written so compilers vectorise them. */
#ifndef CAKE_BF16_H
#define CAKE_BF16_H

#include <stdint.h>
#include <string.h>

/* Exact: a bf16 is the top half of an fp32. */
static inline float cake_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The one NaN every output holds (docs/NUMERICS.md): which NaN an operation returns when
 * several operands are NaN differs between instruction sets, so outputs never keep it. */
#define CAKE_BF16_NAN 0x7fc0u
#define CAKE_F32_NAN 0x7fc00000u

/* Round to nearest, ties to even; overflow becomes infinity; subnormals kept; NaN becomes the
 * canonical NaN. Branch-free so the loop around it vectorises; NaN found as the one value
 * unequal to itself, one unordered compare a vector (the bit test took three on avx2). */
static inline uint16_t cake_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(f != f ? CAKE_BF16_NAN : rounded);
}

/* f, or the canonical NaN when f is NaN (fp32 outputs: dw, dbias). */
static inline float cake_f32_canonical(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (f != f) u = CAKE_F32_NAN;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
