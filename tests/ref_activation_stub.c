/* TEMPORARY (see ref_activation_stub.h). */
#include "ref_activation_stub.h"

#include "activation.h"

float ref_silu(float a) { return cake_silu(a); }
float ref_silu_grad(float a) { return cake_silu_grad(a); }
