/* CPU row kernels for the avx512 path; the target flags come from CMake. */
#define CAKE_ISA avx512
#include "conv_cpu_kernels.inc"
