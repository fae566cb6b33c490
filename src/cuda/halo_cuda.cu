/* Pack and assemble kernels: one thread per 8 channels of one row of one tensor. */
#include "halo_cuda.h"

#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTensors = 8;

struct HaloTensors {
    int count;
    int64_t total_channels;        /* over every tensor of the call: the message row width */
    int64_t channels[kMaxTensors];
    int64_t prefix[kMaxTensors];   /* channels of the call's tensors before this one */
    int64_t work_begin[kMaxTensors + 1];
    const uint16_t *rows[kMaxTensors];
    uint16_t *pools[kMaxTensors];
};

__device__ __forceinline__ int tensor_of(const HaloTensors &t, int64_t item) {
    int i = 0;
    while (i + 1 < t.count && t.work_begin[i + 1] <= item) i++;
    return i;
}

/* Offset of (tensor i, row r of peer s) in a message buffer laid out as exchange.c does. */
__device__ __forceinline__ int64_t message_offset(const HaloTensors &t, int i, const int64_t *begin,
                                                 int s, int64_t r) {
    const int64_t count = begin[s + 1] - begin[s];
    return begin[s] * t.total_channels + t.prefix[i] * count + r * t.channels[i];
}

__global__ void pack_kernel(const __grid_constant__ HaloTensors t, const int64_t *local_row,
                            const int32_t *peer, const int64_t *begin, uint16_t *send) {
    const int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= t.work_begin[t.count]) return;
    const int i = tensor_of(t, item);
    const int64_t chunks = t.channels[i] / 8, local = item - t.work_begin[i];
    const int64_t g = local / chunks, c = (local % chunks) * 8;
    const int s = peer[g];
    const uint4 v = *reinterpret_cast<const uint4 *>(t.rows[i] + local_row[g] * t.channels[i] + c);
    *reinterpret_cast<uint4 *>(send + message_offset(t, i, begin, s, g - begin[s]) + c) = v;
}

__global__ void assemble_kernel(const __grid_constant__ HaloTensors t, const int64_t *source,
                                const int32_t *peer, const int64_t *begin, const uint16_t *recv) {
    const int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= t.work_begin[t.count]) return;
    const int i = tensor_of(t, item);
    const int64_t chunks = t.channels[i] / 8, local = item - t.work_begin[i];
    const int64_t slot = local / chunks, c = (local % chunks) * 8;
    const int64_t src = source[slot];
    uint4 v = make_uint4(0u, 0u, 0u, 0u); /* +0.0 outside the sequence */
    if (src >= 0) {
        v = *reinterpret_cast<const uint4 *>(t.rows[i] + src * t.channels[i] + c);
    } else if (src <= -2) {
        const int64_t g = -2 - src;
        const int s = peer[g];
        v = *reinterpret_cast<const uint4 *>(recv + message_offset(t, i, begin, s, g - begin[s]) + c);
    }
    *reinterpret_cast<uint4 *>(t.pools[i] + slot * t.channels[i] + c) = v;
}

/* Launch arguments for tensors [first, first + count), rows_per_tensor items of C/8 each. */
HaloTensors tensors_for(int first, int count, int num_tensors, const int64_t *channels,
                        const cake_bf16 *const *rows, cake_bf16 *const *pools,
                        int64_t rows_per_tensor) {
    HaloTensors t;
    memset(&t, 0, sizeof t);
    t.count = count;
    int64_t prefix = 0;
    for (int i = 0; i < num_tensors; i++) {
        if (i >= first && i < first + count) {
            const int k = i - first;
            t.channels[k] = channels[i];
            t.prefix[k] = prefix;
            t.rows[k] = rows ? rows[i] : NULL;
            t.pools[k] = pools ? pools[i] : NULL;
            t.work_begin[k + 1] = t.work_begin[k] + rows_per_tensor * (channels[i] / 8);
        }
        prefix += channels[i];
    }
    t.total_channels = prefix;
    return t;
}

template <typename T>
cake_status upload(T **device, const T *host, int64_t count) {
    *device = NULL;
    const size_t bytes = sizeof(T) * (size_t)(count > 0 ? count : 1);
    CAKE_CUDA_CHECK(cudaMalloc((void **)device, bytes), "cudaMalloc(halo table)");
    if (count > 0)
        CAKE_CUDA_CHECK(cudaMemcpy(*device, host, sizeof(T) * (size_t)count, cudaMemcpyHostToDevice),
                        "cudaMemcpy(halo table)");
    return CAKE_SUCCESS;
}

unsigned blocks_for(int64_t items) { return (unsigned)((items + kThreads - 1) / kThreads); }

} // namespace

extern "C" void cake_halo_device_free(cake_halo_device *h) {
    cudaFree(h->send_local_row);
    cudaFree(h->send_peer);
    cudaFree(h->send_begin);
    cudaFree(h->recv_peer);
    cudaFree(h->recv_begin);
    cudaFree(h->slot_source);
    memset(h, 0, sizeof *h);
}

extern "C" cake_status cake_halo_device_create(const cake_plan *plan, const cake_halo_lists *lists,
                                               cake_pool_kind kind, cake_halo_device *out) {
    memset(out, 0, sizeof *out);
    out->num_send_rows = lists->rows_sent;
    out->num_recv_rows = lists->rows_received;
    out->pool_rows = cake_plan_pool_rows(plan);
    int64_t *send_row = (int64_t *)malloc(sizeof(int64_t) * (size_t)(out->num_send_rows + 1));
    int32_t *send_peer = (int32_t *)malloc(sizeof(int32_t) * (size_t)(out->num_send_rows + 1));
    int64_t *send_begin = (int64_t *)malloc(sizeof(int64_t) * (size_t)(lists->num_sends + 1));
    int32_t *recv_peer = (int32_t *)malloc(sizeof(int32_t) * (size_t)(out->num_recv_rows + 1));
    int64_t *recv_begin = (int64_t *)malloc(sizeof(int64_t) * (size_t)(lists->num_receives + 1));
    int64_t *source = (int64_t *)malloc(sizeof(int64_t) * (size_t)(out->pool_rows + 1));
    cake_status status = CAKE_SUCCESS;
    if (!send_row || !send_peer || !send_begin || !recv_peer || !recv_begin || !source) {
        status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the device halo tables");
    } else {
        int64_t g = 0;
        for (int s = 0; s < lists->num_sends; s++) {
            send_begin[s] = g;
            for (int64_t r = 0; r < lists->sends[s].count; r++, g++) {
                send_row[g] = lists->sends[s].rows[r];
                send_peer[g] = s;
            }
        }
        send_begin[lists->num_sends] = g;
        /* Pool rows: +0.0 or local from the plan, then received rows from the lists. */
        const cake_fragment *fragments = cake_plan_fragments(plan);
        for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++)
            for (int j = 0; j < CAKE_HALO_ROWS; j++) {
                const cake_halo_row *row =
                    kind == CAKE_POOL_HISTORY ? &fragments[f].history[j] : &fragments[f].future[j];
                source[f * CAKE_HALO_ROWS + j] = row->global_row < 0 ? -1 : row->local_row;
            }
        g = 0;
        for (int s = 0; s < lists->num_receives; s++) {
            recv_begin[s] = g;
            for (int64_t r = 0; r < lists->receives[s].count; r++, g++) {
                source[lists->receives[s].rows[r]] = -2 - g;
                recv_peer[g] = s;
            }
        }
        recv_begin[lists->num_receives] = g;
        status = upload(&out->send_local_row, send_row, out->num_send_rows);
        if (status == CAKE_SUCCESS) status = upload(&out->send_peer, send_peer, out->num_send_rows);
        if (status == CAKE_SUCCESS) status = upload(&out->send_begin, send_begin, (int64_t)lists->num_sends + 1);
        if (status == CAKE_SUCCESS) status = upload(&out->recv_peer, recv_peer, out->num_recv_rows);
        if (status == CAKE_SUCCESS) status = upload(&out->recv_begin, recv_begin, (int64_t)lists->num_receives + 1);
        if (status == CAKE_SUCCESS) status = upload(&out->slot_source, source, out->pool_rows);
        /* Pageable copies may return before they land: wait once, at creation. */
        if (status == CAKE_SUCCESS && cudaDeviceSynchronize() != cudaSuccess)
            status = cake_fail(CAKE_ERROR_CUDA, "cudaDeviceSynchronize after the halo tables failed");
    }
    free(send_row);
    free(send_peer);
    free(send_begin);
    free(recv_peer);
    free(recv_begin);
    free(source);
    if (status != CAKE_SUCCESS) cake_halo_device_free(out);
    return status;
}

extern "C" cake_status cake_halo_pack(const cake_halo_device *h, int num_tensors,
                                      const int64_t *channels, const cake_bf16 *const *rows,
                                      cake_bf16 *send, cudaStream_t stream) {
    if (h->num_send_rows == 0) return CAKE_SUCCESS;
    for (int first = 0; first < num_tensors; first += kMaxTensors) {
        const int count = num_tensors - first < kMaxTensors ? num_tensors - first : kMaxTensors;
        const HaloTensors t = tensors_for(first, count, num_tensors, channels, rows, NULL, h->num_send_rows);
        pack_kernel<<<blocks_for(t.work_begin[count]), kThreads, 0, stream>>>(
            t, h->send_local_row, h->send_peer, h->send_begin, send);
        CAKE_CUDA_CHECK(cudaGetLastError(), "halo pack kernel launch");
    }
    return CAKE_SUCCESS;
}

extern "C" cake_status cake_halo_assemble(const cake_halo_device *h, int num_tensors,
                                          const int64_t *channels, const cake_bf16 *const *rows,
                                          const cake_bf16 *recv, cake_bf16 *const *pools,
                                          cudaStream_t stream) {
    if (h->pool_rows == 0) return CAKE_SUCCESS;
    for (int first = 0; first < num_tensors; first += kMaxTensors) {
        const int count = num_tensors - first < kMaxTensors ? num_tensors - first : kMaxTensors;
        const HaloTensors t = tensors_for(first, count, num_tensors, channels, rows, pools, h->pool_rows);
        assemble_kernel<<<blocks_for(t.work_begin[count]), kThreads, 0, stream>>>(
            t, h->slot_source, h->recv_peer, h->recv_begin, recv);
        CAKE_CUDA_CHECK(cudaGetLastError(), "halo assemble kernel launch");
    }
    return CAKE_SUCCESS;
}
