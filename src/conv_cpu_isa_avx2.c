/* CPU row kernels for the avx2 path; the target flags come from CMake. */
#define CAKE_ISA avx2
#define CAKE_AVX2 1
#include "conv_cpu_kernels.inc"
