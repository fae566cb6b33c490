/* CPU row kernels for the avx2 path; the target flags come from CMake. */
#define CAKE_ISA avx2
#include "conv_cpu_kernels.inc"
