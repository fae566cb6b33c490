/* GPU forward and backward: argument checks, launch forms, and the kernels' launchers.
 *
 * Ordinary form: the forward is one launch; the backward is one launch for dx and the 256-row
 * block partials (the fused walk, or for calls with too few dw blocks to fill the GPU the tiles
 * of backward_tile.cuh), then one launch per level of the dw tree (one level folds 32 roots, so
 * two launches up to 1024 blocks; with CAKE_CUDA_DW_FOLD=1 the fused walk folds the first two
 * itself); a small call of at most kPanelMaxRows rows is one launch of the panels of
 * backward_panel.cuh, which fold the tree themselves. Cooperative form: one kernel per
 * direction (the split walk), the tree levels separated by grid-wide barriers. Every form computes the same operations in
 * the same order, so the bits agree. Ordinary launches may start before the kernel ahead of them
 * ends; every kernel waits for it before touching memory (dependent_launch.cuh). */
#include "cake_cuda.h"

#include "backward_panel.cuh"
#include "backward_tile.cuh"
#include "conv_kernels.cuh"
#include "cuda_common.h"
#include "dependent_launch.cuh"

#include <cooperative_groups.h>
#include <string.h>
#if CAKE_CUDA_PANEL_TMA
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */
#endif

namespace cg = cooperative_groups;
using namespace cake_cuda;

namespace {

constexpr int kMaxTreePasses = 12; /* 32^12 blocks: far beyond any int64 row count */

struct TreePlan {
    int num_passes;
    int64_t total_roots; /* of every level, per (tap, channel) column */
    TreePass pass[kMaxTreePasses];
};

__device__ __forceinline__ int64_t first_item() {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t item_stride() { return (int64_t)gridDim.x * blockDim.x; }

/* Forward items: (run of rows, column of forward_lanes(V, large) pairs); consecutive threads
 * take consecutive columns. */
template <int V, bool large>
__device__ void forward_items(const ConvArgs &a) {
    constexpr int column = 2 * forward_lanes(V, large);
    for (int64_t item = first_item(); item < a.total_work; item += item_stride()) {
        const TensorArgs &T = a.t[tensor_of(a, item)];
        const int64_t local = item - T.work_begin, columns = T.channels / column;
        forward_item<V, large>(a, T, (local / columns) * a.rows_per_item, column * (local % columns));
    }
}

__device__ __forceinline__ int tensor_of_dx(const ConvArgs &a, int64_t item) {
    int i = 0;
    while (i + 1 < a.num_tensors && a.t[i + 1].dx_begin <= item) i++;
    return i;
}

/* Backward items: (dw block, column), consecutive threads on consecutive columns. Fused: dx
 * comes with the dw walk. Split: the dw walks, then the dx items (run of rows, column). */
template <bool kSplit, int V>
__device__ void backward_items(const ConvArgs &a) {
    for (int64_t item = first_item(); item < a.total_work + a.dx_work; item += item_stride()) {
        if (item < a.total_work) {
            const TensorArgs &T = a.t[tensor_of(a, item)];
            const int64_t local = item - T.work_begin, columns = T.channels / backward_column(V);
            const int64_t b = local / columns, c = backward_column(V) * (local % columns);
            backward_item<!kSplit, V>(a, T, b, c);
            if (!kSplit && CAKE_CUDA_DW_FOLD && a.fold_passes > 0) fold_block<V>(a, T, b, c);
        } else if (kSplit) {
            const int64_t dx = item - a.total_work;
            const TensorArgs &T = a.t[tensor_of_dx(a, dx)];
            const int64_t local = dx - T.dx_begin, columns = T.channels / backward_column(V);
            dx_item<V>(a, T, (local / columns) * a.rows_per_item,
                       backward_column(V) * (local % columns));
        }
    }
}

/* Items of a tree pass: per tensor, (groups of 32 roots) x (taps * channels columns). */
template <int V>
__device__ void tree_items(const ConvArgs &a, const TreePass &pass) {
    const int64_t groups = (pass.n_in + kTreeWidth - 1) / kTreeWidth;
    int64_t total = 0;
    for (int i = 0; i < a.num_tensors; i++) total += groups * taps_of(V) * a.t[i].channels;
    for (int64_t item = first_item(); item < total; item += item_stride()) {
        int64_t local = item;
        int i = 0;
        while (local >= groups * taps_of(V) * a.t[i].channels) {
            local -= groups * taps_of(V) * a.t[i].channels;
            i++;
        }
        const int64_t cols = taps_of(V) * a.t[i].channels;
        tree_item<V>(a.t[i], pass, local / cols, local % cols);
    }
}

/* Forward blocks per SM the registers must allow (a bound the compiler keeps without spilling
 * for the lanes and rows in flight chosen). SiLU is bound by its arithmetic and gains from more
 * warps to interleave: since its quick sequence needs fewer registers, 4 blocks (64 registers)
 * with one load stage fit without spilling, and its main-shape forward takes 504.9 us queued on
 * the H200 against 530.4 at 3 blocks (80 registers, two stages), side by side
 * (docs/PERFORMANCE.md). */
#ifndef CAKE_CUDA_FORWARD_MIN_BLOCKS
#define CAKE_CUDA_FORWARD_MIN_BLOCKS 2
#endif
#ifndef CAKE_CUDA_FORWARD_SILU_MIN_BLOCKS
#define CAKE_CUDA_FORWARD_SILU_MIN_BLOCKS 4
#endif
__host__ __device__ constexpr int forward_min_blocks(int V, bool large) {
    return !(V & kSilu) ? CAKE_CUDA_FORWARD_MIN_BLOCKS
           : large      ? CAKE_CUDA_FORWARD_SILU_LARGE_MIN_BLOCKS
                        : CAKE_CUDA_FORWARD_SILU_MIN_BLOCKS;
}
/* The forward in one of its two forms: the one for every call, or (`large`) the one for calls
 * that fill the GPU (pick_large_forward). */
template <int V, bool large>
__global__ void __launch_bounds__(kThreads, forward_min_blocks(V, large))
    forward_kernel(const __grid_constant__ ConvArgs a) {
    dependent_launch_begin();
    forward_items<V, large>(a);
}

/* The split walk serves small cooperative calls (ordinary ones run the tiles unless
 * CAKE_CUDA_TILE_BACKWARD=0), with few dw chains: their latency, not occupancy, bounds
 * it, so it may trade blocks for a deeper load ring (CAKE_CUDA_DW_STAGES). With SiLU its walks
 * spill at two blocks' 128 registers (about 180 bytes a thread) and fit in 150 at one. */
#ifndef CAKE_CUDA_SPLIT_MIN_BLOCKS
#define CAKE_CUDA_SPLIT_MIN_BLOCKS 2
#endif
#ifndef CAKE_CUDA_SILU_SPLIT_MIN_BLOCKS
#define CAKE_CUDA_SILU_SPLIT_MIN_BLOCKS 1
#endif
__host__ __device__ constexpr int split_min_blocks(int V) {
    return (V & kSilu) ? CAKE_CUDA_SILU_SPLIT_MIN_BLOCKS : CAKE_CUDA_SPLIT_MIN_BLOCKS;
}
template <bool kSplit, int V>
__global__ void __launch_bounds__(kThreads, kSplit ? split_min_blocks(V) : kBackwardMinBlocks)
    backward_kernel(const __grid_constant__ ConvArgs a) {
    dependent_launch_begin<CAKE_CUDA_DEPENDENT_EARLY_PARTIALS>();
    backward_items<kSplit, V>(a);
}

/* The backward of a small call, one tile per CUDA block (backward_tile.cuh). */
template <int V>
__global__ void __launch_bounds__(kTileThreads, kTileMinBlocks)
    backward_tile_kernel(const __grid_constant__ ConvArgs a) {
    dependent_launch_begin<CAKE_CUDA_DEPENDENT_EARLY_PARTIALS>();
    extern __shared__ __align__(16) unsigned char tile_shared[];
    int64_t local = blockIdx.x;
    int i = 0;
    while (i + 1 < a.num_tensors && local >= tiles_of(a, a.t[i])) local -= tiles_of(a, a.t[i++]);
    const TensorArgs &T = a.t[i];
    const int64_t groups = (T.channels + kTileChannels - 1) / kTileChannels;
    backward_tile<V>(a, T, local / groups, kTileChannels * (local % groups),
                     *reinterpret_cast<TileShared *>(tile_shared));
}

/* The backward of a call of at most kPanelMaxRows rows, one panel per CUDA block
 * (backward_panel.cuh): dx, dw and dbias in this one launch. */
template <int V>
__global__ void __launch_bounds__(kPanelThreads, panel_min_blocks(V))
    backward_panel_kernel(const __grid_constant__ ConvArgs a, const __grid_constant__ PanelMaps m) {
    dependent_launch_begin();
    extern __shared__ __align__(128) unsigned char panel_shared[];
    int64_t local = blockIdx.x;
    int i = 0;
    while (i + 1 < a.num_tensors && local >= panels_of(a.t[i], V)) local -= panels_of(a.t[i++], V);
    backward_panel<V>(a, m, i, panel_channels(V) * local,
                      *reinterpret_cast<PanelShared<V> *>(panel_shared));
}

template <int V>
__global__ void __launch_bounds__(kThreads) tree_kernel(const __grid_constant__ ConvArgs a,
                                                        const TreePass pass) {
    dependent_launch_begin();
    tree_items<V>(a, pass);
}

/* Always split: one kernel holding all three walks would not fit its registers. */
template <int V>
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocks)
    backward_cooperative_kernel(const __grid_constant__ ConvArgs a,
                                const __grid_constant__ TreePlan tree) {
    dependent_launch_begin();
    backward_items<true, V>(a);
    for (int p = 0; p < tree.num_passes; p++) {
        cg::this_grid().sync(); /* the level below is complete */
        tree_items<V>(a, tree.pass[p]);
    }
}

/* The kernels of one variant, as host pointers (the supported set at a glance). */
struct Kernels {
    const void *forward[2]; /* [large] */
    const void *backward_fused, *backward_split, *backward_cooperative, *tree,
        *backward_tile, *backward_panel;
};

/* The large calls' forward: its own kernel where the form differs (SiLU), else the one form. */
template <int V>
constexpr const void *large_forward_kernel() {
    if constexpr ((V & kSilu) != 0) return (const void *)forward_kernel<V, true>;
    else return (const void *)forward_kernel<V, false>;
}

template <int V>
constexpr Kernels kernels_of() {
    return {{(const void *)forward_kernel<V, false>, large_forward_kernel<V>()},
            (const void *)backward_kernel<false, V>,
            (const void *)backward_kernel<true, V>, (const void *)backward_cooperative_kernel<V>,
            (const void *)tree_kernel<V>, (const void *)backward_tile_kernel<V>,
            (const void *)backward_panel_kernel<V>};
}

const Kernels kKernels[kVariants] = {kernels_of<0>(), kernels_of<kBias>(), kernels_of<kSilu>(),
                                     kernels_of<kBias | kSilu>()};

int variant_of(const cake_conv_params *p) {
    return (p->bias ? kBias : 0) | (p->activation == CAKE_ACTIVATION_SILU ? kSilu : 0);
}

/* An ordinary launch of `kernel` with `args` (pointers to its parameters); where the device
 * allows, one that may start before the kernel ahead of it in the stream ends
 * (dependent_launch.cuh: every kernel waits for that one first). */
cake_status launch(const cake_cuda_launch_facts &facts, const void *kernel, int64_t blocks,
                   void **args, cudaStream_t stream, const char *what, int threads = kThreads,
                   size_t shared = 0) {
    cudaLaunchAttribute early = {};
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)blocks);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = &early;
    config.numAttrs = facts.dependent_launch ? 1 : 0;
    const cudaError_t err = cudaLaunchKernelExC(&config, kernel, args);
    if (err != cudaSuccess) return cake_fail(CAKE_ERROR_CUDA, "%s launch: %s", what, cudaGetErrorString(err));
    return CAKE_SUCCESS;
}

#if CAKE_CUDA_PANEL_TMA
/* The tensor map of a [rows, C] bf16 array for the panels' tensor copies: boxes of 256 rows and
 * `box_channels` channels, out-of-range elements read as zeros. */
cake_status encode_panel_map(const cake_cuda_launch_facts &f, CUtensorMap *map, const uint16_t *base,
                             int64_t rows, int64_t C, int box_channels) {
    const auto encode = (PFN_cuTensorMapEncodeTiled_v12000)f.tensor_map_encode;
    const cuuint64_t dims[2] = {(cuuint64_t)C, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)C * sizeof(uint16_t)};
    const cuuint32_t box[2] = {(cuuint32_t)box_channels, (cuuint32_t)kBlockRows};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides,
                              box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return cake_fail(CAKE_ERROR_CUDA, "cuTensorMapEncodeTiled: CUresult %d", (int)r);
    return CAKE_SUCCESS;
}
#endif

/* Levels of the tree: level 0 holds num_blocks roots, each pass folds groups of 32. */
TreePlan plan_tree(int64_t num_blocks) {
    TreePlan tree;
    memset(&tree, 0, sizeof tree);
    int64_t n = num_blocks, offset = 0, groups = 0;
    tree.total_roots = num_blocks;
    while (n > 0) {
        TreePass &pass = tree.pass[tree.num_passes++];
        const int64_t out = (n + kTreeWidth - 1) / kTreeWidth;
        pass.n_in = n;
        pass.in_offset = offset;
        pass.out_offset = offset + n;
        pass.group_offset = groups;
        pass.final_pass = n <= kTreeWidth;
        if (pass.final_pass) break;
        offset += n;
        groups += out;
        n = out;
        tree.total_roots += out;
    }
    return tree;
}

/* Tree passes the fused walk folds itself (CAKE_CUDA_DW_FOLD, conv_kernels.cuh): the first two,
 * or none. */
int fold_passes_of(const TreePlan &tree) {
    if (!CAKE_CUDA_DW_FOLD) return 0;
    return tree.num_passes < kMaxFoldPasses ? tree.num_passes : kMaxFoldPasses;
}

/* Where the fold's counters start in the workspace: after the partials, 16-byte aligned. */
int64_t fold_counters_offset(int64_t partial_bytes) { return (partial_bytes + 15) / 16 * 16; }

/* Arrival counters of the fold per backward column: one per group of each folded pass. */
int64_t fold_counters_per_column(const TreePlan &tree) {
    int64_t groups = 0;
    for (int p = 0; p < fold_passes_of(tree); p++)
        groups += (tree.pass[p].n_in + kTreeWidth - 1) / kTreeWidth;
    return groups;
}

int64_t grid_for(int64_t items) { return (items + kThreads - 1) / kThreads; }

/* Co-resident blocks of a grid-wide kernel: blocks per multiprocessor (from the plan's launch
 * facts) times multiprocessors. */
cake_status max_resident_grid(const cake_cuda_launch_facts &f, int64_t per_sm, int64_t *blocks) {
    if (per_sm < 1)
        return cake_fail(CAKE_ERROR_UNSUPPORTED,
                         "cooperative: the kernel cannot keep one block of %d threads resident "
                         "per multiprocessor, so its grid cannot be co-resident", kThreads);
    *blocks = per_sm * f.sms;
    return CAKE_SUCCESS;
}

/* A grid-stride kernel over `items` threads' worth of work, at most one co-resident wave. */
cake_status launch_cooperative(const void *kernel, int64_t max_blocks, int64_t items,
                               void **params, cudaStream_t stream) {
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
int64_t resident_threads(const cake_cuda_plan *plan) {
    const cake_cuda_launch_facts *f = cake_cuda_plan_launch_facts(plan);
    return f->sms * f->threads_per_sm;
}

/* Forward items a call must at least have, as a percentage of the threads the forward kernel
 * keeps resident (its occupancy): the largest item that still gives about every resident
 * thread one. A small call then runs in one wave of longer items, each thread's steps in flight
 * together, instead of waves of short ones, each waiting for its own lookups and loads (H200,
 * 1 x [2048, 2048]: 7.8-8.0 us queued against 9.2; docs/PERFORMANCE.md). 0: the earlier rule,
 * twice the device's maximum resident threads (a measurement variant). */
#ifndef CAKE_CUDA_FORWARD_FILL
#define CAKE_CUDA_FORWARD_FILL 90
#endif
int64_t forward_items_wanted(const cake_cuda_plan *plan, int V, bool large) {
    const cake_cuda_launch_facts *f = cake_cuda_plan_launch_facts(plan);
    if (CAKE_CUDA_FORWARD_FILL == 0) return 2 * resident_threads(plan);
    return f->sms * f->forward_blocks_per_sm[V][large] * kThreads * CAKE_CUDA_FORWARD_FILL / 100;
}

/* Threads across one row of tensors [first, first + count) at `column` channels a thread. */
int64_t row_columns(const cake_call_args &call, int first, int count, int column) {
    int64_t columns = 0;
    for (int i = first; i < first + count; i++) columns += call.channels[i] / column;
    return columns;
}

/* The forward's large calls' form (forward_lanes) for a call that, at its lanes, still gives
 * every thread the form keeps resident an item of the longest run of rows: only there do its
 * wider accesses pay (docs/PERFORMANCE.md). Never changes bits. */
bool pick_large_forward(const cake_cuda_plan *plan, const cake_call_args &call, int first,
                        int count, int V) {
    if (forward_lanes(V, true) == forward_lanes(V, false)) return false; /* one form */
    const int64_t rows = cake_cuda_plan_rows(plan);
    const int64_t columns = row_columns(call, first, count, 2 * forward_lanes(V, true));
    return (rows + kForwardRows - 1) / kForwardRows * columns >= forward_items_wanted(plan, V, true);
}

/* Rows per item of the row-run walks: long runs stream best, but small calls need `want`
 * items to fill the GPU. `columns`: threads across one row of every tensor. Never changes
 * bits. */
int64_t rows_per_item(int64_t rows, int64_t columns, int64_t want) {
    int64_t r = kForwardRows;
    while (r > kStepRows && (rows + r - 1) / r * columns < want) r /= 2;
    return r;
}

/* Fills the launch arguments of tensors [first, first + count) of a call. */
void fill_args(ConvArgs &a, const cake_cuda_plan *plan, const cake_call_args &call, int first,
               int count, float *partials, unsigned *counters, const TreePlan *tree,
               int cooperative) {
    const cake_conv_params *p = cake_params_or_default(call.params);
    const int V = variant_of(p);
    const int backward = call.backward;
    memset(&a, 0, sizeof a);
    a.num_tensors = count;
    a.rows = cake_cuda_plan_rows(plan);
    a.frag_start = cake_cuda_plan_frag_start(plan);
    a.future_valid = cake_cuda_plan_future_valid(plan);
    a.num_fragments = cake_cuda_plan_num_fragments(plan);
    a.num_blocks = (a.rows + kBlockRows - 1) / kBlockRows;
    a.large = !backward && pick_large_forward(plan, call, first, count, V);
    const int column = backward ? backward_column(V) : 2 * forward_lanes(V, a.large);
    const int64_t columns = row_columns(call, first, count, column);
    /* (the backward's dx items, split cooperative calls only, keep the earlier rule) */
    a.rows_per_item = rows_per_item(a.rows, columns, backward ? 2 * resident_threads(plan)
                                                              : forward_items_wanted(plan, V, a.large));
    /* Too few dw blocks to fill the GPU: the tiles (ordinary launches), or the split walk
     * (cooperative: dx apart, in short runs, next to the dw chains). */
    a.split = backward && (cooperative || a.num_blocks * columns < resident_threads(plan) / 8);
    /* the fused walk folds (ordinary launches; the tiles and the split walk leave it to the
     * tree's launches, the cooperative kernel to its own passes) */
    if (backward && !cooperative && !a.split && CAKE_CUDA_TILE_BACKWARD != 2) {
        a.fold_passes = fold_passes_of(*tree);
        for (int p = 0; p < a.fold_passes; p++) a.fold[p] = tree->pass[p];
    }
    const int64_t roots = backward ? tree->total_roots : 0;
    int64_t work = 0, dx_work = 0;
    for (int k = 0; k < count; k++) {
        const int i = first + k;
        const int64_t C = call.channels[i];
        TensorArgs &T = a.t[k];
        T.x = call.x[i];
        T.w = call.w[i];
        T.bias = p->bias ? p->bias[i] : NULL;
        T.history = call.history[i];
        T.channels = C;
        T.work_begin = work;
        T.dx_begin = dx_work;
        if (backward) {
            T.dy = call.dy[i];
            T.future = call.future[i];
            /* the x half of the future pool (cake.h) */
            T.future_x = (V & kSilu) && T.future ? T.future + call.pool_rows * C : NULL;
            T.dx = call.dx[i];
            T.dw = call.dw[i];
            T.dbias = p->dbias ? p->dbias[i] : NULL;
            T.partials = partials;
            partials += roots * taps_of(V) * C;
            T.counters = counters;
            counters += fold_counters_per_column(*tree) * (C / backward_column(V));
            work += a.num_blocks * (C / column);
            if (a.split) dx_work += (a.rows + a.rows_per_item - 1) / a.rows_per_item * (C / column);
        } else {
            T.y = call.y[i];
            work += (a.rows + a.rows_per_item - 1) / a.rows_per_item * (C / column);
        }
    }
    a.total_work = work;
    a.dx_work = dx_work;
}

} // namespace

extern "C" cake_status cake_cuda_launch_facts_query(cake_cuda_launch_facts *f) {
    int device, sms, per_sm, major;
    CAKE_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
    CAKE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                    "cudaDeviceGetAttribute");
    f->dependent_launch = CAKE_CUDA_DEPENDENT_LAUNCH && major >= 9;
    CAKE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                    "cudaDeviceGetAttribute");
    CAKE_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device),
                    "cudaDeviceGetAttribute");
    f->sms = sms;
    f->threads_per_sm = per_sm;
    for (int v = 0; v < kVariants; v++) {
        int fwd[2] = {0, 0}, bwd = 0;
        for (int large = 0; large < 2; large++)
            CAKE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                &fwd[large], kKernels[v].forward[large], kThreads, 0),
                            "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        CAKE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                            &bwd, kKernels[v].backward_cooperative, kThreads, 0),
                        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        /* The tiles' shared memory is above the 48 KB a launch gets without asking. */
        CAKE_CUDA_CHECK(cudaFuncSetAttribute(kKernels[v].backward_tile,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)kTileSharedBytes),
                        "cudaFuncSetAttribute(backward tile kernel)");
        CAKE_CUDA_CHECK(cudaFuncSetAttribute(kKernels[v].backward_panel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)panel_shared_bytes(v)),
                        "cudaFuncSetAttribute(backward panel kernel)");
        if (backward_fused_shared_bytes(v) > 0) /* its load ring (CAKE_CUDA_BACKWARD_ASYNC_STAGES) */
            CAKE_CUDA_CHECK(cudaFuncSetAttribute(kKernels[v].backward_fused,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 backward_fused_shared_bytes(v)),
                            "cudaFuncSetAttribute(fused backward kernel)");
        for (int large = 0; large < 2; large++) f->forward_blocks_per_sm[v][large] = fwd[large];
        f->cooperative_backward_blocks_per_sm[v] = bwd;
    }
    f->tensor_map_encode = NULL;
#if CAKE_CUDA_PANEL_TMA
    cudaDriverEntryPointQueryResult found;
    CAKE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f->tensor_map_encode,
                                                     12000, cudaEnableDefault, &found),
                    "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || !f->tensor_map_encode)
        return cake_fail(CAKE_ERROR_CUDA, "the driver has no cuTensorMapEncodeTiled (query result %d)",
                         (int)found);
#endif
    return CAKE_SUCCESS;
}

static TreePlan tree_of_rows(int64_t rows) { return plan_tree((rows + kBlockRows - 1) / kBlockRows); }

extern "C" int cake_cuda_cooperative_supported(void) {
    int device, supported = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, device) != cudaSuccess)
        return 0;
    return supported;
}

extern "C" cake_status cake_cuda_kernel_workspace_bytes(int64_t rows, int num_tensors,
                                                        const int64_t *channels,
                                                        const cake_conv_params *params,
                                                        size_t *bytes) {
    const TreePlan tree = tree_of_rows(rows);
    const int V = variant_of(cake_params_or_default(params));
    const int64_t taps = taps_of(V);
    const int64_t counters = fold_counters_per_column(tree);
    int64_t total = 0, total_counters = 0; /* bytes of partials; counters */
    for (int i = 0; i < num_tensors; i++) {
        int64_t column;
        if (channels[i] <= 0 || channels[i] % 8 != 0)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "channels[%d]: expected a positive multiple of 8, got %lld", i,
                             (long long)channels[i]);
        if (!cake_mul_fits(tree.total_roots, taps * channels[i], &column) ||
            !cake_mul_fits(column, (int64_t)sizeof(float), &column) || column > INT64_MAX / 2 - total)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "channels[%d]: %lld channels overflow the workspace size", i,
                             (long long)channels[i]);
        total += column;
        total_counters += counters * (channels[i] / backward_column(V)); /* below the partials */
    }
    *bytes = (size_t)(fold_counters_offset(total) + total_counters * (int64_t)sizeof(unsigned));
    return CAKE_SUCCESS;
}

extern "C" cake_status cake_cuda_backward_workspace_size(const cake_cuda_plan *plan,
                                                         int num_tensors, const int64_t *channels,
                                                         const cake_conv_params *params,
                                                         size_t *bytes) {
    cake_clear_error();
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    if (!bytes) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "bytes: expected a pointer, got NULL");
    if (num_tensors < 1)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "num_tensors: expected >= 1, got %d", num_tensors);
    if (!channels) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "channels: expected a pointer, got NULL");
    return cake_cuda_kernel_workspace_bytes(cake_cuda_plan_rows(plan), num_tensors, channels,
                                            params, bytes);
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
static cake_status check_call(const cake_cuda_plan *plan, const cake_call_args &args,
                              cake_cooperative cooperative) {
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    CAKE_CHECK(cake_check_call_args(&args));
    CAKE_CHECK(cake_cuda_check_cooperative(cooperative));
    return cake_cuda_plan_check_device(plan);
}

static cake_call_args args_of(const cake_cuda_plan *plan, int backward, int num_tensors,
                              const int64_t *channels, const cake_bf16 *const *x,
                              const float *const *w, const cake_conv_params *params,
                              const cake_bf16 *const *history) {
    cake_call_args args;
    memset(&args, 0, sizeof args);
    args.num_tensors = num_tensors;
    args.channels = channels;
    args.rows = plan ? cake_cuda_plan_rows(plan) : 0;
    args.pool_rows = plan ? 3 * cake_cuda_plan_num_fragments(plan) : 0;
    args.x = x;
    args.w = w;
    args.params = params;
    args.history = history;
    args.backward = backward;
    args.alignment = 16;
    return args;
}

extern "C" cake_status cake_cuda_forward(const cake_cuda_plan *plan, int num_tensors,
                                         const int64_t *channels, const cake_bf16 *const *x,
                                         const float *const *w, const cake_conv_params *params,
                                         const cake_bf16 *const *history, cake_bf16 *const *y,
                                         cake_cooperative cooperative, cudaStream_t stream) {
    cake_clear_error();
    cake_call_args args = args_of(plan, 0, num_tensors, channels, x, w, params, history);
    args.y = y;
    CAKE_CHECK(check_call(plan, args, cooperative));
    if (cake_cuda_plan_rows(plan) == 0) return CAKE_SUCCESS;
    const int V = variant_of(cake_params_or_default(params));
    const Kernels &kernels = kKernels[V];
    const cake_cuda_launch_facts &facts = *cake_cuda_plan_launch_facts(plan);
    const int coop = pick_cooperative(cooperative);
    for (int first = 0; first < num_tensors; first += kMaxTensors) {
        const int count = num_tensors - first < kMaxTensors ? num_tensors - first : kMaxTensors;
        ConvArgs a;
        fill_args(a, plan, args, first, count, NULL, NULL, NULL, 0);
        const void *kernel = kernels.forward[a.large];
        /* Ordinary launches too: a grid the size of what fits at once, striding over the
         * items, streams better than one block per 256 items (measured on the H200). */
        int64_t resident = 0;
        CAKE_CHECK(max_resident_grid(facts, facts.forward_blocks_per_sm[V][a.large], &resident));
        void *launch_args[] = {&a};
        if (coop) {
            CAKE_CHECK(launch_cooperative(kernel, resident, a.total_work, launch_args, stream));
        } else {
            int64_t blocks;
            CAKE_CHECK(launch_ordinary_grid(a.total_work, &blocks));
            if (blocks > resident) blocks = resident;
            CAKE_CHECK(launch(facts, kernel, blocks, launch_args, stream, "forward kernel"));
        }
    }
    return CAKE_SUCCESS;
}

extern "C" cake_status cake_cuda_backward(const cake_cuda_plan *plan, int num_tensors,
                                          const int64_t *channels, const cake_bf16 *const *x,
                                          const float *const *w, const cake_conv_params *params,
                                          const cake_bf16 *const *history,
                                          const cake_bf16 *const *dy,
                                          const cake_bf16 *const *future, cake_bf16 *const *dx,
                                          float *const *dw, cake_cooperative cooperative,
                                          void *workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
    cake_clear_error();
    cake_call_args args = args_of(plan, 1, num_tensors, channels, x, w, params, history);
    args.dy = dy;
    args.future = future;
    args.dx = dx;
    args.dw = dw;
    CAKE_CHECK(check_call(plan, args, cooperative));
    const cake_conv_params *p = cake_params_or_default(params);
    const int64_t rows = cake_cuda_plan_rows(plan);
    if (workspace && (uintptr_t)workspace % 16 != 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "workspace: expected a 16-byte aligned device pointer, got %p", workspace);
    size_t needed;
    CAKE_CHECK(cake_cuda_kernel_workspace_bytes(rows, num_tensors, channels, params, &needed));
    if (workspace && workspace_bytes < needed)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "workspace_bytes: expected >= %zu (cake_cuda_backward_workspace_size), got %zu",
                         needed, workspace_bytes);
    if (rows == 0) { /* no rows: dw (and dbias) = +0.0 */
        for (int i = 0; i < num_tensors; i++) {
            CAKE_CUDA_CHECK(cudaMemsetAsync(dw[i], 0, sizeof(float) * 4 * (size_t)channels[i], stream),
                            "cudaMemsetAsync(dw)");
            if (p->dbias)
                CAKE_CUDA_CHECK(cudaMemsetAsync(p->dbias[i], 0, sizeof(float) * (size_t)channels[i], stream),
                                "cudaMemsetAsync(dbias)");
        }
        return CAKE_SUCCESS;
    }
    void *owned = NULL;
    if (!workspace) {
        CAKE_CUDA_CHECK(cudaMallocAsync(&owned, needed, stream), "cudaMallocAsync(workspace)");
        workspace = owned;
    }
    const int V = variant_of(p);
    const Kernels &kernels = kKernels[V];
    const cake_cuda_launch_facts &facts = *cake_cuda_plan_launch_facts(plan);
    const int coop = pick_cooperative(cooperative);
    const TreePlan tree = tree_of_rows(rows);
    cake_status status = CAKE_SUCCESS;
    float *partials = (float *)workspace;
    int64_t partial_floats = 0;
    for (int i = 0; i < num_tensors; i++) partial_floats += tree.total_roots * taps_of(V) * channels[i];
    unsigned *counters =
        (unsigned *)((char *)workspace + fold_counters_offset(partial_floats * (int64_t)sizeof(float)));
    for (int first = 0; first < num_tensors && status == CAKE_SUCCESS; first += kMaxTensors) {
        const int count = num_tensors - first < kMaxTensors ? num_tensors - first : kMaxTensors;
        ConvArgs a;
        fill_args(a, plan, args, first, count, partials, counters, &tree, coop);
        int64_t chunk_counters = 0;
        for (int i = 0; i < count; i++) {
            partials += tree.total_roots * taps_of(V) * channels[first + i];
            chunk_counters += fold_counters_per_column(tree) * (channels[first + i] / backward_column(V));
        }
        if (a.fold_passes > 0) { /* every arrival counts from zero */
            const cudaError_t err =
                cudaMemsetAsync(counters, 0, sizeof(unsigned) * (size_t)chunk_counters, stream);
            if (err != cudaSuccess) {
                status = cake_fail(CAKE_ERROR_CUDA, "cudaMemsetAsync(fold counters): %s",
                                   cudaGetErrorString(err));
                break;
            }
        }
        counters += chunk_counters;
        if (coop) {
            int64_t resident = 0;
            status = max_resident_grid(facts, facts.cooperative_backward_blocks_per_sm[V], &resident);
            void *launch_args[] = {&a, (void *)&tree};
            if (status == CAKE_SUCCESS)
                status = launch_cooperative(kernels.backward_cooperative, resident,
                                            a.total_work + a.dx_work, launch_args, stream);
            continue;
        }
        int64_t blocks;
        /* Small calls of at most kPanelMaxRows rows: the panels, which fold dw themselves. */
        const bool panel = (CAKE_CUDA_PANEL_BACKWARD == 1 ||
                            (CAKE_CUDA_PANEL_BACKWARD == 2 && !(V & kSilu))) &&
                           a.split && rows <= kPanelMaxRows && CAKE_CUDA_TILE_BACKWARD != 2;
        if (panel) {
            int64_t panels = 0;
            for (int i = 0; i < count; i++) panels += panels_of(a.t[i], V);
            PanelMaps maps;
            memset(&maps, 0, sizeof maps);
#if CAKE_CUDA_PANEL_TMA
            for (int i = 0; i < count && panel_tma(V) && status == CAKE_SUCCESS; i++) {
                status = encode_panel_map(facts, &maps.x[i], a.t[i].x, rows, a.t[i].channels,
                                          panel_channels(V));
                if (status == CAKE_SUCCESS)
                    status = encode_panel_map(facts, &maps.dy[i], a.t[i].dy, rows,
                                              a.t[i].channels, panel_channels(V));
            }
            if (status != CAKE_SUCCESS) break;
#endif
            void *panel_args[] = {&a, &maps};
            status = panels > 0x7fffffff
                         ? cake_fail(CAKE_ERROR_UNSUPPORTED,
                                     "launch: %lld backward panels exceed the grid limit", (long long)panels)
                         : launch(facts, kernels.backward_panel, panels, panel_args, stream,
                                  "backward panel kernel", kPanelThreads, panel_shared_bytes(V));
            continue;
        }
        if (CAKE_CUDA_TILE_BACKWARD == 2 || (CAKE_CUDA_TILE_BACKWARD == 1 && a.split)) {
            int64_t tiles = 0;
            for (int i = 0; i < count; i++) tiles += tiles_of(a, a.t[i]);
            void *tile_args[] = {&a};
            status = tiles > 0x7fffffff
                         ? cake_fail(CAKE_ERROR_UNSUPPORTED,
                                     "launch: %lld backward tiles exceed the grid limit", (long long)tiles)
                         : launch(facts, kernels.backward_tile, tiles, tile_args, stream,
                                  "backward tile kernel", kTileThreads, kTileSharedBytes);
        } else {
            status = launch_ordinary_grid(a.total_work + a.dx_work, &blocks);
            void *launch_args[] = {&a};
            if (status == CAKE_SUCCESS)
                status = launch(facts, a.split ? kernels.backward_split : kernels.backward_fused, blocks,
                                launch_args, stream, "backward kernel", kThreads,
                                a.split ? 0 : backward_fused_shared_bytes(V));
        }
        for (int pass = a.fold_passes; pass < tree.num_passes && status == CAKE_SUCCESS; pass++) {
            int64_t items = 0;
            const int64_t groups = (tree.pass[pass].n_in + kTreeWidth - 1) / kTreeWidth;
            for (int i = 0; i < count; i++) items += groups * taps_of(V) * a.t[i].channels;
            TreePass tree_pass = tree.pass[pass];
            void *tree_args[] = {&a, &tree_pass};
            status = launch_ordinary_grid(items, &blocks);
            if (status == CAKE_SUCCESS)
                status = launch(facts, kernels.tree, blocks, tree_args, stream, "dw tree kernel");
        }
    }
    if (owned) {
        const cudaError_t err = cudaFreeAsync(owned, stream);
        if (err != cudaSuccess && status == CAKE_SUCCESS)
            status = cake_fail(CAKE_ERROR_CUDA, "cudaFreeAsync(workspace): %s", cudaGetErrorString(err));
    }
    return status;
}
