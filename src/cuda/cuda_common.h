/* Internal helpers of the CUDA library: error checks and the device plan's accessors. */
#ifndef CAKE_CUDA_COMMON_H
#define CAKE_CUDA_COMMON_H

#include "cake_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "args.h"
#include "internal.h"
#ifdef __cplusplus
}
#endif

#define CAKE_CUDA_CHECK(expr, what)                                                             \
    do {                                                                                        \
        const cudaError_t cake_cuda_err_ = (expr);                                              \
        if (cake_cuda_err_ != cudaSuccess)                                                      \
            return cake_fail(CAKE_ERROR_CUDA, "%s: %s", what, cudaGetErrorString(cake_cuda_err_)); \
    } while (0)

/* What the launches need to know about the device, read once when a plan is made (querying it
 * costs microseconds a call): multiprocessors, threads per multiprocessor, and the blocks of the
 * grid-wide kernels each multiprocessor keeps resident, per variant. The query also lets the
 * backward tile kernels use their shared memory (a function attribute of the device). */
#define CAKE_CUDA_VARIANTS 4
typedef struct cake_cuda_launch_facts {
    int64_t sms, threads_per_sm;
    int64_t forward_blocks_per_sm[CAKE_CUDA_VARIANTS][2]; /* [variant][large calls' form] */
    int64_t cooperative_backward_blocks_per_sm[CAKE_CUDA_VARIANTS];
    void *tensor_map_encode; /* the driver's cuTensorMapEncodeTiled (CAKE_CUDA_PANEL_TMA), else NULL */
    int dependent_launch;    /* ordinary launches may start early (dependent_launch.cuh) */
} cake_cuda_launch_facts;

#ifdef __cplusplus
extern "C" {
#endif
/* Fills `facts` for the current device (conv_cuda.cu, where the kernels are). */
cake_status cake_cuda_launch_facts_query(cake_cuda_launch_facts *facts);
const cake_cuda_launch_facts *cake_cuda_plan_launch_facts(const cake_cuda_plan *plan);
int64_t cake_cuda_plan_rows(const cake_cuda_plan *plan);
int64_t cake_cuda_plan_num_fragments(const cake_cuda_plan *plan);
const int64_t *cake_cuda_plan_frag_start(const cake_cuda_plan *plan); /* device */
/* Per fragment: its future rows inside its sequence, 0..3 (device). */
const int32_t *cake_cuda_plan_future_valid(const cake_cuda_plan *plan);
/* Bytes of the backward kernels' workspace (the tree levels of dw and dbias, and the fused
 * backward's fold counters) for S_local rows; checks the channel counts. */
cake_status cake_cuda_kernel_workspace_bytes(int64_t rows, int num_tensors,
                                             const int64_t *channels,
                                             const cake_conv_params *params, size_t *bytes);
/* cooperative must be one of the three values, and ON needs a device that supports it. */
cake_status cake_cuda_check_cooperative(cake_cooperative cooperative);
/* The current device must be the plan's. */
cake_status cake_cuda_plan_check_device(const cake_cuda_plan *plan);
#ifdef __cplusplus
}
#endif

#endif
