/* CPU row kernels for the generic path; the target flags come from CMake. */
#define CAKE_ISA generic
#include "conv_cpu_kernels.inc"
