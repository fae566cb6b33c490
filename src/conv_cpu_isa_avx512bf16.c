/* CPU row kernels for the avx512bf16 path (AVX-512 with the processor's bf16 conversion in the
 * plain and bias forwards, conv_cpu_kernels.inc); the target flags come from CMake. */
#define CAKE_ISA avx512bf16
#define CAKE_HW_BF16 1
#include "conv_cpu_kernels.inc"
