/* GPU test helpers: skip cleanly where there is no GPU, check CUDA runtime calls with a readable
 * report, and move test arrays between host and device. */
#ifndef CAKE_TEST_CUDA_UTIL_H
#define CAKE_TEST_CUDA_UTIL_H

#include "test_util.h"

#include "cake_cuda.h"

/* CTest's SKIP_RETURN_CODE for these programs. */
#define CU_SKIP 77

/* Exits with CU_SKIP (after saying why) when the CUDA runtime sees no device; otherwise selects
 * device 0, creates its context and prints what it found. A device that is present but cannot
 * be used is a failure (exit 1), not a skip. */
void cu_require_gpu(void);

/* A CUDA runtime call that must succeed (inside a cmocka test). */
#define CU_CHECK(expr)                                                                             \
    do {                                                                                           \
        cudaError_t cu_err_ = (expr);                                                              \
        if (cu_err_ != cudaSuccess) {                                                              \
            tu_report("%s -> %s: %s", #expr, cudaGetErrorName(cu_err_),                            \
                      cudaGetErrorString(cu_err_));                                                \
            fail_msg("CUDA call failed: %s", #expr);                                               \
        }                                                                                          \
    } while (0)

/* Device buffer of `bytes` bytes (NULL for 0 bytes), optionally filled from host memory. */
void *cu_alloc(size_t bytes);
void *cu_upload(const void *host, size_t bytes);
void cu_download(void *host, const void *device, size_t bytes);
void cu_free(void *device);

/* Waits for `stream` and fails the test on any error the runtime reports, naming `what` (a
 * kernel fault surfaces here, after the call that launched it returned success). */
void cu_sync(cudaStream_t stream, const char *what);

/* Number of bytes of host[0..bytes) that differ from `poison`; the first one is reported. */
int64_t cu_count_not_poison(const char *what, const void *host, size_t bytes, unsigned char poison);

#endif
