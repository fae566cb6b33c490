/* CPU row kernels for the avx512bf16 path: the avx512 path's, with the processor's bf16
 * conversion where the plain and bias forward and backward round (conv_cpu_avx512.inc); the
 * target flags come from CMake. */
#define CAKE_ISA avx512bf16
#define CAKE_AVX512 1
#define CAKE_HW_BF16 1
#include "conv_cpu_kernels.inc"
