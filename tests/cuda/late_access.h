/* A helper kernel for test_ordering (cuda_ordering.c), compiled by nvcc (late_access.cu). */
#ifndef CAKE_TEST_LATE_ACCESS_H
#define CAKE_TEST_LATE_ACCESS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One kernel on `stream` that lets the kernels after it start at once (the programmatic launch
 * trigger, as the library's own kernels do), waits about `wait_us` microseconds, and only then
 * copies src to dst and read to seen (`bytes` each, a multiple of 16; a pair with NULL pointers
 * is skipped): so a kernel after it that reads dst or writes read before its wait sees or
 * changes the wrong values. */
cudaError_t ct_late_access(void *dst, const void *src, void *seen, const void *read, size_t bytes,
                           unsigned wait_us, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
