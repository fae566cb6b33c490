/* CPU row kernels for the avx512 path (the plain and bias steps and bands of
 * conv_cpu_avx512.inc); the target flags come from CMake. */
#define CAKE_ISA avx512
#define CAKE_AVX512 1
#include "conv_cpu_kernels.inc"
