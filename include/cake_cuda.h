/* cake on CUDA GPUs: the forward and backward kernels over device memory (bitwise equal to the
 * CPU path), their workspace, and the launch form. Link with libcake_cuda.
 *
 * Every call is asynchronous: it returns once the work is enqueued on `stream`, and it never
 * synchronises the host with the device (except where a comment below says so). Stream order
 * holds as for any kernel: on devices of compute capability 9.0 and later the kernels are
 * programmatic dependent launches, which may be placed on the GPU before the kernel ahead of
 * them ends but touch no memory until it has. Row arrays, pools, weights, bias and dbias are
 * device pointers, 16-byte aligned (cudaMalloc gives 256); a caller's workspace is a device
 * pointer aligned to 16 bytes for the plan-level backward and to 256 bytes for the context
 * calls. The pointer arrays themselves (x[i], ...) and the cake_conv_params struct are host
 * memory. */
#ifndef CAKE_CUDA_H
#define CAKE_CUDA_H

#include "cake.h"

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The launch form. Bits never depend on it. */
typedef enum cake_cooperative {
    CAKE_COOPERATIVE_AUTO = -1, /* the library picks: ordinary launches today, measured as fast
                                   or faster for every shape on H200 (docs/PERFORMANCE.md) */
    CAKE_COOPERATIVE_OFF = 0,   /* ordinary launches */
    CAKE_COOPERATIVE_ON = 1     /* one grid-synchronised kernel per direction; an error where the
                                   device cannot launch cooperatively */
} cake_cooperative;

/* A plan's fragment table on the current device. Creating it copies the table synchronously:
 * do it once, outside the training step (a context does it once). */
typedef struct cake_cuda_plan cake_cuda_plan;
CAKE_API cake_status cake_cuda_plan_create(const cake_plan *plan, cake_cuda_plan **out);
CAKE_API void cake_cuda_plan_destroy(cake_cuda_plan *plan);

/* 1 if the current device supports cooperative launches, else 0. */
CAKE_API int cake_cuda_cooperative_supported(void);

/* Bytes of device workspace a backward needs (the forward needs none). */
CAKE_API cake_status cake_cuda_backward_workspace_size(const cake_cuda_plan *plan,
                                                       int num_tensors, const int64_t *channels,
                                                       const cake_conv_params *params,
                                                       size_t *bytes);

/* As cake_cpu_forward / cake_cpu_backward, on the device of `plan`, with the pools laid out as
 * cake.h describes. The backward uses `workspace` (16-byte aligned) when it is at least the size
 * above; with NULL it allocates (cudaMallocAsync) and frees on the stream. */
CAKE_API cake_status cake_cuda_forward(const cake_cuda_plan *plan, int num_tensors,
                                       const int64_t *channels, const cake_bf16 *const *x,
                                       const float *const *w, const cake_conv_params *params,
                                       const cake_bf16 *const *history, cake_bf16 *const *y,
                                       cake_cooperative cooperative, cudaStream_t stream);
CAKE_API cake_status cake_cuda_backward(const cake_cuda_plan *plan, int num_tensors,
                                        const int64_t *channels, const cake_bf16 *const *x,
                                        const float *const *w, const cake_conv_params *params,
                                        const cake_bf16 *const *history,
                                        const cake_bf16 *const *dy,
                                        const cake_bf16 *const *future, cake_bf16 *const *dx,
                                        float *const *dw, cake_cooperative cooperative,
                                        void *workspace, size_t workspace_bytes,
                                        cudaStream_t stream);


/*
 * Context parallelism on the GPU: as cake_forward / cake_backward (cake.h) with device arrays.
 * The exchange packs the rows peers need with one kernel, moves them with the context's
 * transport (NCCL enqueues on `stream`; a host transport such as MPI is staged through pinned
 * host memory, which waits for the stream), then one kernel assembles the pools. The first GPU
 * call on a context uploads its tables (synchronously, once). Workspace: a 256-byte aligned
 * device buffer of at least cake_ctx_cuda_workspace_size bytes, or NULL to allocate on the
 * stream.
 */
CAKE_API cake_status cake_ctx_cuda_workspace_size(const cake_ctx *ctx, int num_tensors,
                                                  const int64_t *channels,
                                                  const cake_conv_params *params, int backward,
                                                  size_t *bytes);
CAKE_API cake_status cake_forward_cuda(cake_ctx *ctx, int64_t channels, const cake_bf16 *x,
                                       const float *w, const cake_conv_params *params,
                                       cake_bf16 *y, cake_bf16 *history,
                                       cake_recompute_handle *handle, cake_cooperative cooperative,
                                       void *workspace, size_t workspace_bytes,
                                       cudaStream_t stream);
CAKE_API cake_status cake_backward_cuda(cake_ctx *ctx, int64_t channels, const cake_bf16 *x,
                                        const float *w, const cake_conv_params *params,
                                        const cake_bf16 *history, const cake_bf16 *dy,
                                        cake_bf16 *dx, float *dw, cake_cooperative cooperative,
                                        void *workspace, size_t workspace_bytes,
                                        cudaStream_t stream);
CAKE_API cake_status cake_forward_multi_cuda(cake_ctx *ctx, int num_tensors,
                                             const int64_t *channels, const cake_bf16 *const *x,
                                             const float *const *w, const cake_conv_params *params,
                                             cake_bf16 *const *y, cake_bf16 *const *history,
                                             cake_recompute_handle *handle,
                                             cake_cooperative cooperative, void *workspace,
                                             size_t workspace_bytes, cudaStream_t stream);
CAKE_API cake_status cake_backward_multi_cuda(cake_ctx *ctx, int num_tensors,
                                              const int64_t *channels, const cake_bf16 *const *x,
                                              const float *const *w,
                                              const cake_conv_params *params,
                                              const cake_bf16 *const *history,
                                              const cake_bf16 *const *dy, cake_bf16 *const *dx,
                                              float *const *dw, cake_cooperative cooperative,
                                              void *workspace, size_t workspace_bytes,
                                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
