/* The SiLU loops of tests/test_activation.c and tests/cuda/test_activation_cuda.cu built for
 * the generic path: CMake gives this file the flags of src/conv_cpu_isa_generic.c (the
 * baseline of the target; on x86-64 fmaf is a libm call there, so these loops stay scalar). */
#include "activation.h"

#include <stdint.h>

void cake_test_silu_loop_generic(const float *in, float *silu, float *grad, float *quick, int64_t n);
void cake_test_silu_grad_unscaled_loop_generic(const float *in, float *grad, int64_t n);

void cake_test_silu_loop_generic(const float *restrict in, float *restrict silu,
                                 float *restrict grad, float *restrict quick, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        silu[i] = cake_silu(in[i]);
    for (int64_t i = 0; i < n; i++)
        grad[i] = cake_silu_grad(in[i]);
    for (int64_t i = 0; i < n; i++)
        quick[i] = cake_silu_for_bf16(in[i]);
}

/* cake_silu_grad_unscaled as the SiLU backward's chunks run it where every a is within
 * CAKE_ACT_UNSCALED_MAX (the caller compares only those inputs). */
void cake_test_silu_grad_unscaled_loop_generic(const float *restrict in, float *restrict grad,
                                               int64_t n) {
    for (int64_t i = 0; i < n; i++)
        grad[i] = cake_silu_grad_unscaled(in[i]);
}
