/* What the standalone CUDA test programs (test_activation_cuda.cu, test_bf16_cuda.cu) share:
 * CTest's skip code, a runtime-call check that ends the program with a readable report, and
 * the start that skips where there is no usable GPU. (The cmocka-based C tests use
 * cuda_util.h instead.) */
#ifndef CAKE_TEST_CUDA_TEST_MAIN_CUH
#define CAKE_TEST_CUDA_TEST_MAIN_CUH

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

/* CTest's SKIP_RETURN_CODE for these programs. */
#define SKIP 77

/* A CUDA runtime call that must succeed: otherwise the program fails (exit 1) naming it. */
#define CHECK(call)                                                                               \
    do {                                                                                          \
        cudaError_t err_ = (call);                                                                \
        if (err_ != cudaSuccess) {                                                                \
            fprintf(stderr, "[cake-test] FAILED: %s: %s (%s:%d)\n", #call,                        \
                    cudaGetErrorString(err_), __FILE__, __LINE__);                                \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* Exits with SKIP (after saying why) when the CUDA runtime sees no device; else selects
 * device 0. */
static inline void require_gpu_or_skip(void) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("[cake-test] no usable CUDA device (cudaGetDeviceCount: %s, %d devices): "
               "skipping (exit %d)\n",
               err == cudaSuccess ? "success" : cudaGetErrorString(err), count, SKIP);
        fflush(stdout);
        exit(SKIP);
    }
    CHECK(cudaSetDevice(0));
}

#endif
