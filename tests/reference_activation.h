/* The tests' own SiLU and SiLU derivative: the fp32 operation sequence of docs/NUMERICS.md
 * ("Activation") written out again, step by step, for the tests. Shares no code with
 * src/activation.h; tests/test_activation.c checks that the two agree bit for bit on every fp32
 * input, so the documentation, the library and this file say the same thing. Plain scalar C
 * (if/else where the library uses masks), built with -ffp-contract=off like every test. */
#ifndef CAKE_TEST_REFERENCE_ACTIVATION_H
#define CAKE_TEST_REFERENCE_ACTIVATION_H

/* silu(a) = a * sigmoid(a) before any bf16 rounding; a NaN input is returned unchanged. */
float ref_silu(float a);
/* silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))); a NaN input is returned unchanged. */
float ref_silu_grad(float a);

#endif
