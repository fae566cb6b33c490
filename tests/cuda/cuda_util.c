/* GPU test helpers (see cuda_util.h). */
#include "cuda_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

void cu_require_gpu(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("[cake-test] no usable CUDA device (cudaGetDeviceCount: %s, %d devices): "
               "skipping (exit %d)\n",
               err == cudaSuccess ? "success" : cudaGetErrorString(err), count, CU_SKIP);
        fflush(stdout);
        exit(CU_SKIP);
    }
    err = cudaSetDevice(0);
    if (err == cudaSuccess)
        err = cudaFree(NULL); /* creates the context now, so a broken device fails here */
    if (err != cudaSuccess) {
        fprintf(stderr, "[cake-test] FAILED: CUDA device 0 is present but unusable: %s\n",
                cudaGetErrorString(err));
        exit(1);
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("[cake-test] device 0 of %d: %s, sm_%d%d, %d SMs, %.1f GiB, cooperative launch %s\n",
               count, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
               (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
               cake_cuda_cooperative_supported() ? "supported" : "NOT supported");
    fflush(stdout);
}

void *cu_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0)
        return NULL;
    CU_CHECK(cudaMalloc(&p, bytes));
    return p;
}

void *cu_upload(const void *host, size_t bytes) {
    void *p = cu_alloc(bytes);
    if (bytes)
        CU_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
}

void cu_download(void *host, const void *device, size_t bytes) {
    if (bytes)
        CU_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

void cu_free(void *device) {
    if (device)
        CU_CHECK(cudaFree(device));
}

void cu_sync(cudaStream_t stream, const char *what) {
    cudaError_t err = cudaStreamSynchronize(stream);
    if (err == cudaSuccess)
        err = cudaGetLastError();
    if (err != cudaSuccess) {
        tu_report("%s: the device reported %s: %s", what, cudaGetErrorName(err),
                  cudaGetErrorString(err));
        fail_msg("CUDA error after %s", what);
    }
}

int64_t cu_count_not_poison(const char *what, const void *host, size_t bytes,
                            unsigned char poison) {
    const unsigned char *b = host;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != poison && bad++ == 0)
            first = (int64_t)i;
    if (bad)
        tu_report("%s: %" PRId64 " of %zu bytes were written (first at byte %" PRId64
                  ": 0x%02x, poison 0x%02x)",
                  what, bad, bytes, first, b[first], poison);
    return bad;
}
