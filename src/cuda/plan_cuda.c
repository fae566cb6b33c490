/* The fragment table on the device: the first local row of every fragment, then S_local; and
 * how many of each fragment's future rows lie inside its sequence. */
#include "cuda_common.h"

#include <stdlib.h>

struct cake_cuda_plan {
    int device;
    int64_t rows, num_fragments;
    int64_t *frag_start;   /* device, num_fragments + 1 */
    int32_t *future_valid; /* device, num_fragments (at least 1 entry) */
    cake_cuda_launch_facts facts;
};

cake_status cake_cuda_plan_create(const cake_plan *plan, cake_cuda_plan **out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    cake_cuda_plan *p = calloc(1, sizeof *p);
    const int64_t n = cake_plan_num_fragments(plan);
    int64_t *host = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int32_t *valid = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!p || !host || !valid) {
        free(p);
        free(host);
        free(valid);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "cuda plan: out of memory");
    }
    const cake_fragment *fragments = cake_plan_fragments(plan);
    valid[0] = 0;
    for (int64_t f = 0; f < n; f++) {
        const cake_fragment *fr = &fragments[f];
        const int64_t after = fr->seq_end - (fr->global_start + fr->length);
        host[f] = fr->local_start;
        valid[f] = (int32_t)(after < CAKE_HALO_ROWS ? after : CAKE_HALO_ROWS);
    }
    host[n] = cake_plan_local_rows(plan);
    p->rows = host[n];
    p->num_fragments = n;
    const size_t valid_bytes = sizeof(int32_t) * (size_t)(n > 0 ? n : 1);
    const cake_status facts = cake_cuda_launch_facts_query(&p->facts);
    if (facts != CAKE_SUCCESS) {
        free(p);
        free(host);
        free(valid);
        return facts;
    }
    cudaError_t err = cudaGetDevice(&p->device);
    if (err == cudaSuccess) err = cudaMalloc((void **)&p->frag_start, sizeof(int64_t) * (size_t)(n + 1));
    if (err == cudaSuccess) err = cudaMalloc((void **)&p->future_valid, valid_bytes);
    if (err == cudaSuccess)
        err = cudaMemcpy(p->frag_start, host, sizeof(int64_t) * (size_t)(n + 1), cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = cudaMemcpy(p->future_valid, valid, valid_bytes, cudaMemcpyHostToDevice);
    /* A copy from pageable memory may return before it lands: make sure it has, so kernels on
     * any stream see the table. Creation is outside the training step. */
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    free(host);
    free(valid);
    if (err != cudaSuccess) {
        cudaFree(p->frag_start);
        cudaFree(p->future_valid);
        free(p);
        return cake_fail(CAKE_ERROR_CUDA, "cuda plan: %s", cudaGetErrorString(err));
    }
    *out = p;
    return CAKE_SUCCESS;
}

void cake_cuda_plan_destroy(cake_cuda_plan *plan) {
    if (!plan) return;
    cudaFree(plan->frag_start);
    cudaFree(plan->future_valid);
    free(plan);
}

int64_t cake_cuda_plan_rows(const cake_cuda_plan *plan) { return plan->rows; }
int64_t cake_cuda_plan_num_fragments(const cake_cuda_plan *plan) { return plan->num_fragments; }
const int64_t *cake_cuda_plan_frag_start(const cake_cuda_plan *plan) { return plan->frag_start; }
const int32_t *cake_cuda_plan_future_valid(const cake_cuda_plan *plan) { return plan->future_valid; }
const cake_cuda_launch_facts *cake_cuda_plan_launch_facts(const cake_cuda_plan *plan) {
    return &plan->facts;
}

cake_status cake_cuda_plan_check_device(const cake_cuda_plan *plan) {
    int device;
    CAKE_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
    if (device != plan->device)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "plan: made on device %d, but the current device is %d", plan->device,
                         device);
    return CAKE_SUCCESS;
}
