/* TEMPORARY: stands in for tests/reference_activation.h (ref_silu, ref_silu_grad, the tests' own
 * implementation of the documented SiLU sequence) until that file exists. It calls the library's
 * functions, so while it is in use the reference's activation is not independent. */
#ifndef CAKE_TEST_REF_ACTIVATION_STUB_H
#define CAKE_TEST_REF_ACTIVATION_STUB_H

float ref_silu(float a);
float ref_silu_grad(float a);

#endif
