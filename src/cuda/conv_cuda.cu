/* GPU forward and backward: argument checks, launch forms, and the kernels' launchers.
 *
 * Ordinary form: the forward is one launch; the backward is one launch for dx and the 256-row
 * block partials, then one launch per level of the dw tree (one level folds 32 roots, so two
 * launches up to 8192 blocks). Cooperative form: one kernel per direction, the tree levels
 * separated by grid-wide barriers. Both run the same per-item code, so the bits agree. */
#include "cake_cuda.h"

#include "conv_kernels.cuh"
#include "cuda_common.h"

#include <cooperative_groups.h>
#include <string.h>

namespace cg = cooperative_groups;
using namespace cake_cuda;

namespace {

constexpr int kMaxTreePasses = 12; /* 32^12 blocks: far beyond any int64 row count */

struct TreePlan {
    int num_passes;
    TreePass pass[kMaxTreePasses];
};

__device__ __forceinline__ int64_t first_item() {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t item_stride() { return (int64_t)gridDim.x * blockDim.x; }

/* Forward items: (run of rows, channel pair); consecutive threads take consecutive pairs. */
__device__ void forward_items(const ConvArgs &a) {
    for (int64_t item = first_item(); item < a.total_work; item += item_stride()) {
        const TensorArgs &T = a.t[tensor_of(a, item)];
        const int64_t local = item - T.work_begin, pairs = T.channels / 2;
        forward_item(a, T, (local / pairs) * a.rows_per_item, 2 * (local % pairs));
    }
}

__device__ __forceinline__ int tensor_of_dx(const ConvArgs &a, int64_t item) {
    int i = 0;
    while (i + 1 < a.num_tensors && a.t[i + 1].dx_begin <= item) i++;
    return i;
}

/* Backward items: (dw block, channel pair), consecutive threads on consecutive pairs. Fused:
 * dx comes with the dw walk. Split: the dw walks, then the dx items (run of rows, pair). */
template <bool kSplit>
__device__ void backward_items(const ConvArgs &a) {
    for (int64_t item = first_item(); item < a.total_work + a.dx_work; item += item_stride()) {
        if (item < a.total_work) {
            const TensorArgs &T = a.t[tensor_of(a, item)];
            const int64_t local = item - T.work_begin, pairs = T.channels / 2;
            backward_item<!kSplit>(a, T, local / pairs, 2 * (local % pairs));
        } else if (kSplit) {
            const int64_t dx = item - a.total_work;
            const TensorArgs &T = a.t[tensor_of_dx(a, dx)];
            const int64_t local = dx - T.dx_begin, pairs = T.channels / 2;
            dx_item(a, T, (local / pairs) * a.rows_per_item, 2 * (local % pairs));
        }
    }
}

/* Items of a tree pass: per tensor, (groups of 32 roots) x (4 * channels columns). */
__device__ void tree_items(const ConvArgs &a, const TreePass &pass) {
    const int64_t groups = (pass.n_in + kTreeWidth - 1) / kTreeWidth;
    int64_t total = 0;
    for (int i = 0; i < a.num_tensors; i++) total += groups * 4 * a.t[i].channels;
    for (int64_t item = first_item(); item < total; item += item_stride()) {
        int64_t local = item;
        int i = 0;
        while (local >= groups * 4 * a.t[i].channels) {
            local -= groups * 4 * a.t[i].channels;
            i++;
        }
        const int64_t cols = 4 * a.t[i].channels;
        tree_item(a.t[i], pass, local / cols, local % cols);
    }
}

__global__ void __launch_bounds__(kThreads) forward_kernel(const __grid_constant__ ConvArgs a) {
    forward_items(a);
}

template <bool kSplit>
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocks)
    backward_kernel(const __grid_constant__ ConvArgs a) {
    backward_items<kSplit>(a);
}

__global__ void __launch_bounds__(kThreads) tree_kernel(const __grid_constant__ ConvArgs a,
                                                        const TreePass pass) {
    tree_items(a, pass);
}

/* Always split: one kernel holding all three walks would not fit its registers. */
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocks)
    backward_cooperative_kernel(const __grid_constant__ ConvArgs a,
                                const __grid_constant__ TreePlan tree) {
    backward_items<true>(a);
    for (int p = 0; p < tree.num_passes; p++) {
        cg::this_grid().sync(); /* the level below is complete */
        tree_items(a, tree.pass[p]);
    }
}

/* Levels of the tree: level 0 holds num_blocks roots, each pass folds groups of 32. */
TreePlan plan_tree(int64_t num_blocks, int64_t *total_roots) {
    TreePlan tree;
    memset(&tree, 0, sizeof tree);
    int64_t n = num_blocks, offset = 0;
    *total_roots = num_blocks;
    while (n > 0) {
        TreePass &pass = tree.pass[tree.num_passes++];
        const int64_t out = (n + kTreeWidth - 1) / kTreeWidth;
        pass.n_in = n;
        pass.in_offset = offset;
        pass.out_offset = offset + n;
        pass.final_pass = n <= kTreeWidth;
        if (pass.final_pass) break;
        offset += n;
        n = out;
        *total_roots += out;
    }
    return tree;
}

int64_t grid_for(int64_t items) { return (items + kThreads - 1) / kThreads; }

/* Co-resident blocks of `kernel` on the current device. */
cake_status max_cooperative_grid(const void *kernel, int64_t *blocks) {
    int device, sms, per_sm = 0;
    CAKE_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
    CAKE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                    "cudaDeviceGetAttribute");
    CAKE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0),
                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    if (per_sm < 1)
        return cake_fail(CAKE_ERROR_UNSUPPORTED,
                         "cooperative: the kernel cannot keep one block of %d threads resident "
                         "per multiprocessor, so its grid cannot be co-resident", kThreads);
    *blocks = (int64_t)per_sm * sms;
    return CAKE_SUCCESS;
}

/* A grid-stride kernel over `items` threads' worth of work, at most one co-resident wave. */
cake_status launch_cooperative(const void *kernel, int64_t items, void **params,
                               cudaStream_t stream) {
    int64_t max_blocks = 0;
    CAKE_CHECK(max_cooperative_grid(kernel, &max_blocks));
    int64_t blocks = grid_for(items);
    if (blocks > max_blocks) blocks = max_blocks;
    if (blocks < 1) blocks = 1;
    CAKE_CUDA_CHECK(cudaLaunchCooperativeKernel(kernel, dim3((unsigned)blocks), dim3(kThreads),
                                                params, 0, stream),
                    "cudaLaunchCooperativeKernel");
    return CAKE_SUCCESS;
}

cake_status launch_ordinary_grid(int64_t items, int64_t *blocks) {
    *blocks = grid_for(items);
    if (*blocks > 0x7fffffff)
        return cake_fail(CAKE_ERROR_UNSUPPORTED, "launch: %lld items exceed the grid limit",
                         (long long)items);
    return CAKE_SUCCESS;
}

/* AUTO: ordinary launches. On the H200 the cooperative form was never faster (main shape, S =
 * 8192, 2048 x 2048; docs/PERFORMANCE.md): its grid is capped at one resident wave and the
 * backward must walk dx and dw apart to fit one kernel's registers. */
int pick_cooperative(cake_cooperative requested) {
    return requested == CAKE_COOPERATIVE_ON;
}

/* Threads the device keeps resident at once (for sizing the work). */
int64_t resident_threads() {
    int device = 0, sms = 132, per_sm = 2048;
    if (cudaGetDevice(&device) == cudaSuccess) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    }
    return (int64_t)sms * per_sm;
}

/* Rows per item of the row-run walks: long runs stream best, but small calls need more items
 * to fill the GPU. Never changes bits. */
int64_t rows_per_item(int64_t rows, int64_t pairs) {
    const int64_t want = 2 * resident_threads();
    int64_t r = kForwardRows;
    while (r > kStepRows && (rows + r - 1) / r * pairs < want) r /= 2;
    return r;
}

/* Fills the launch arguments of tensors [first, first + count). */
void fill_args(ConvArgs &a, const cake_cuda_plan *plan, int count, const int64_t *channels,
               const cake_bf16 *const *x, const float *const *w, const cake_bf16 *const *history,
               const cake_bf16 *const *dy, const cake_bf16 *const *future, cake_bf16 *const *y,
               cake_bf16 *const *dx, float *const *dw, float *partials, int64_t roots,
               int backward, int force_split) {
    memset(&a, 0, sizeof a);
    a.num_tensors = count;
    a.rows = cake_cuda_plan_rows(plan);
    a.frag_start = cake_cuda_plan_frag_start(plan);
    a.num_fragments = cake_cuda_plan_num_fragments(plan);
    a.num_blocks = (a.rows + kBlockRows - 1) / kBlockRows;
    int64_t pairs = 0;
    for (int i = 0; i < count; i++) pairs += channels[i] / 2;
    a.rows_per_item = rows_per_item(a.rows, pairs);
    /* Too few dw blocks to fill the GPU: walk dx apart, in short runs, next to the dw chains. */
    a.split = backward && (force_split || a.num_blocks * pairs < resident_threads() / 8);
    int64_t work = 0, dx_work = 0;
    for (int i = 0; i < count; i++) {
        TensorArgs &T = a.t[i];
        T.x = x[i];
        T.w = w[i];
        T.history = history[i];
        T.channels = channels[i];
        T.work_begin = work;
        T.dx_begin = dx_work;
        if (backward) {
            T.dy = dy[i];
            T.future = future[i];
            T.dx = dx[i];
            T.dw = dw[i];
            T.partials = partials;
            partials += roots * 4 * channels[i];
            work += a.num_blocks * (channels[i] / 2);
            if (a.split) dx_work += (a.rows + a.rows_per_item - 1) / a.rows_per_item * (channels[i] / 2);
        } else {
            T.y = y[i];
            work += (a.rows + a.rows_per_item - 1) / a.rows_per_item * (channels[i] / 2);
        }
    }
    a.total_work = work;
    a.dx_work = dx_work;
}

} // namespace

extern "C" int64_t cake_cuda_tree_roots(int64_t rows) {
    int64_t roots;
    plan_tree((rows + kBlockRows - 1) / kBlockRows, &roots);
    return roots;
}

extern "C" int cake_cuda_cooperative_supported(void) {
    int device, supported = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, device) != cudaSuccess)
        return 0;
    return supported;
}

extern "C" cake_status cake_cuda_backward_workspace_size(const cake_cuda_plan *plan,
                                                         int num_tensors,
                                                         const int64_t *channels, size_t *bytes) {
    cake_clear_error();
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    if (!bytes) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "bytes: expected a pointer, got NULL");
    if (num_tensors < 1)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "num_tensors: expected >= 1, got %d", num_tensors);
    if (!channels) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "channels: expected a pointer, got NULL");
    const int64_t roots = cake_cuda_tree_roots(cake_cuda_plan_rows(plan));
    int64_t total = 0;
    for (int i = 0; i < num_tensors; i++) {
        if (channels[i] <= 0 || channels[i] % 8 != 0)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "channels[%d]: expected a positive multiple of 8, got %lld", i,
                             (long long)channels[i]);
        total += roots * 4 * channels[i];
    }
    *bytes = sizeof(float) * (size_t)total;
    return CAKE_SUCCESS;
}

extern "C" cake_status cake_cuda_check_cooperative(cake_cooperative cooperative) {
    if (cooperative != CAKE_COOPERATIVE_AUTO && cooperative != CAKE_COOPERATIVE_OFF &&
        cooperative != CAKE_COOPERATIVE_ON)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "cooperative: expected CAKE_COOPERATIVE_AUTO, _OFF or _ON, got %d",
                         (int)cooperative);
    if (cooperative == CAKE_COOPERATIVE_ON && !cake_cuda_cooperative_supported())
        return cake_fail(CAKE_ERROR_UNSUPPORTED,
                         "cooperative: True was asked for, but the current device cannot launch "
                         "cooperative kernels");
    return CAKE_SUCCESS;
}

/* The arrays of a plan-level call, checked (16-byte alignment for the vector loads). */
static cake_status check_call(const cake_cuda_plan *plan, int backward, int num_tensors,
                              const int64_t *channels, const cake_bf16 *const *x,
                              const float *const *w, const cake_bf16 *const *history,
                              const cake_bf16 *const *dy, const cake_bf16 *const *future,
                              cake_bf16 *const *y, cake_bf16 *const *dx, float *const *dw,
                              cake_cooperative cooperative) {
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    cake_call_args args;
    memset(&args, 0, sizeof args);
    args.num_tensors = num_tensors;
    args.channels = channels;
    args.rows = cake_cuda_plan_rows(plan);
    args.pool_rows = 3 * cake_cuda_plan_num_fragments(plan);
    args.x = x;
    args.w = w;
    args.history = history;
    args.dy = dy;
    args.future = future;
    args.y = y;
    args.dx = dx;
    args.dw = dw;
    args.backward = backward;
    args.alignment = 16;
    CAKE_CHECK(cake_check_call_args(&args));
    CAKE_CHECK(cake_cuda_check_cooperative(cooperative));
    return cake_cuda_plan_check_device(plan);
}

extern "C" cake_status cake_cuda_forward(const cake_cuda_plan *plan, int num_tensors,
                                         const int64_t *channels, const cake_bf16 *const *x,
                                         const float *const *w, const cake_bf16 *const *history,
                                         cake_bf16 *const *y, cake_cooperative cooperative,
                                         cudaStream_t stream) {
    cake_clear_error();
    CAKE_CHECK(check_call(plan, 0, num_tensors, channels, x, w, history, NULL, NULL, y, NULL, NULL,
                          cooperative));
    if (cake_cuda_plan_rows(plan) == 0) return CAKE_SUCCESS;
    const int coop = pick_cooperative(cooperative);
    for (int first = 0; first < num_tensors; first += kMaxTensors) {
        const int count = num_tensors - first < kMaxTensors ? num_tensors - first : kMaxTensors;
        ConvArgs a;
        fill_args(a, plan, count, channels + first, x + first, w + first, history + first, NULL,
                  NULL, y + first, NULL, NULL, NULL, 0, 0, 0);
        if (coop) {
            void *params[] = {&a};
            CAKE_CHECK(launch_cooperative((const void *)forward_kernel, a.total_work, params, stream));
        } else {
            /* A grid the size of what fits at once, striding over the items, streams better
             * than one block per 256 items (measured on the H200). */
            int64_t blocks, resident = 0;
            CAKE_CHECK(launch_ordinary_grid(a.total_work, &blocks));
            CAKE_CHECK(max_cooperative_grid((const void *)forward_kernel, &resident));
            if (blocks > resident) blocks = resident;
            forward_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(a);
            CAKE_CUDA_CHECK(cudaGetLastError(), "forward kernel launch");
        }
    }
    return CAKE_SUCCESS;
}

extern "C" cake_status cake_cuda_backward(const cake_cuda_plan *plan, int num_tensors,
                                          const int64_t *channels, const cake_bf16 *const *x,
                                          const float *const *w, const cake_bf16 *const *history,
                                          const cake_bf16 *const *dy,
                                          const cake_bf16 *const *future, cake_bf16 *const *dx,
                                          float *const *dw, cake_cooperative cooperative,
                                          void *workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
    cake_clear_error();
    CAKE_CHECK(check_call(plan, 1, num_tensors, channels, x, w, history, dy, future, NULL, dx, dw,
                          cooperative));
    const int64_t rows = cake_cuda_plan_rows(plan);
    if (workspace && (uintptr_t)workspace % 16 != 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "workspace: expected a 16-byte aligned device pointer, got %p", workspace);
    if (rows == 0) { /* no rows: dw = +0.0 */
        for (int i = 0; i < num_tensors; i++)
            CAKE_CUDA_CHECK(cudaMemsetAsync(dw[i], 0, sizeof(float) * 4 * (size_t)channels[i], stream),
                            "cudaMemsetAsync(dw)");
        return CAKE_SUCCESS;
    }
    size_t needed;
    CAKE_CHECK(cake_cuda_backward_workspace_size(plan, num_tensors, channels, &needed));
    void *owned = NULL;
    if (!workspace || workspace_bytes < needed) {
        if (workspace)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "workspace_bytes: expected >= %zu (cake_cuda_backward_workspace_size), got %zu",
                             needed, workspace_bytes);
        CAKE_CUDA_CHECK(cudaMallocAsync(&owned, needed, stream), "cudaMallocAsync(workspace)");
        workspace = owned;
    }
    const int coop = pick_cooperative(cooperative);
    int64_t roots;
    const TreePlan tree = plan_tree((rows + kBlockRows - 1) / kBlockRows, &roots);
    cake_status status = CAKE_SUCCESS;
    float *partials = (float *)workspace;
    for (int first = 0; first < num_tensors && status == CAKE_SUCCESS; first += kMaxTensors) {
        const int count = num_tensors - first < kMaxTensors ? num_tensors - first : kMaxTensors;
        ConvArgs a;
        fill_args(a, plan, count, channels + first, x + first, w + first, history + first,
                  dy + first, future + first, NULL, dx + first, dw + first, partials, roots, 1, coop);
        for (int i = 0; i < count; i++) partials += roots * 4 * channels[first + i];
        if (coop) {
            void *params[] = {&a, (void *)&tree};
            status = launch_cooperative((const void *)backward_cooperative_kernel,
                                        a.total_work + a.dx_work, params, stream);
            continue;
        }
        int64_t blocks;
        status = launch_ordinary_grid(a.total_work + a.dx_work, &blocks);
        if (status != CAKE_SUCCESS) break;
        if (a.split) backward_kernel<true><<<(unsigned)blocks, kThreads, 0, stream>>>(a);
        else backward_kernel<false><<<(unsigned)blocks, kThreads, 0, stream>>>(a);
        for (int p = 0; p < tree.num_passes && status == CAKE_SUCCESS; p++) {
            int64_t items = 0;
            const int64_t groups = (tree.pass[p].n_in + kTreeWidth - 1) / kTreeWidth;
            for (int i = 0; i < count; i++) items += groups * 4 * a.t[i].channels;
            status = launch_ordinary_grid(items, &blocks);
            if (status == CAKE_SUCCESS) tree_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(a, tree.pass[p]);
        }
        if (status == CAKE_SUCCESS) {
            const cudaError_t err = cudaGetLastError();
            if (err != cudaSuccess)
                status = cake_fail(CAKE_ERROR_CUDA, "backward kernel launch: %s", cudaGetErrorString(err));
        }
    }
    if (owned) {
        const cudaError_t err = cudaFreeAsync(owned, stream);
        if (err != cudaSuccess && status == CAKE_SUCCESS)
            status = cake_fail(CAKE_ERROR_CUDA, "cudaFreeAsync(workspace): %s", cudaGetErrorString(err));
    }
    return status;
}
