/* SiLU on the GPU: cake_silu and cake_silu_grad of src/activation.h compiled for the device with
 * the library's CUDA flags (-fmad=false), evaluated for every one of the 2^32 fp32 bit patterns,
 * in chunks of 2^28:
 *  (1) bitwise against the same header compiled for the host as one of the library's CPU paths
 *      (tests/activation_isa_<isa>.c, built with that path's flags; by default the fastest this
 *      processor runs: test_activation checks that all of them give the same bits), evaluated
 *      by every host core: every bit of every output, NaN included (a NaN input must come back
 *      unchanged on both sides);
 *  (2) against float64 oracles evaluated on the GPU (double exp; silu' near its zero from a0 in
 *      double-double, as tests/test_activation.c): cake_silu and cake_silu_grad must be within 2
 *      ulp on every finite input (SPEC 3, issue 12); their max ulp and arguments are printed;
 *  (3) the forward's quick sequence (docs/NUMERICS.md 9.8), on the GPU: bf16 of
 *      cake_silu_for_bf16(a) equal to bf16 of cake_silu(a) for every input, the quick q within
 *      CAKE_SILU_QUICK_DISTANCE bit patterns of cake_silu(a) for every |a| <= 64 (what its guard
 *      relies on), and the bf16 of cake_silu_for_bf16 equal to the host build's as in (1)
 *      (only its bf16 is kept; the GPU's quick reciprocal may move its last fp32 bit:
 *      CAKE_SILU_QUICK_RCP_APPROX in src/activation.h);
 *  (4) cake_silu_grad_unscaled (what the SiLU backward walks run where a step's a are all in its
 *      range) bitwise equal to cake_silu_grad on the GPU for every |a| <= CAKE_ACT_UNSCALED_MAX.
 * The GPU computes chunk c+1 while the host checks chunk c. On an H200 machine with 16 host
 * cores: about 10 s against the AVX-512 build, 62 s against the generic one.
 *
 * Usage: test_activation_cuda    (exit 0 pass, 1 fail, 77 when there is no usable GPU)
 * CAKE_TEST_HOST_ISA=generic|avx2|avx512 picks the host build. Threads: CAKE_NUM_THREADS, else
 * every online processor. */
#include "activation.h"
#include "cuda_test_main.cuh"

#include <cuda_runtime.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern "C" {
void cake_test_silu_loop_generic(const float *in, float *silu, float *grad, float *quick, int64_t n);
#if defined(CAKE_TEST_HAVE_X86)
void cake_test_silu_loop_avx2(const float *in, float *silu, float *grad, float *quick, int64_t n);
void cake_test_silu_loop_avx512(const float *in, float *silu, float *grad, float *quick, int64_t n);
#endif
}

/* silu, silu' and cake_silu_for_bf16 of n inputs */
typedef void (*silu_loop)(const float *, float *, float *, float *, int64_t);
static silu_loop host_loop = cake_test_silu_loop_generic;
static const char *host_isa = "generic";

/* The host build to compare with: CAKE_TEST_HOST_ISA, else the fastest this processor runs. */
static int pick_host_loop(void) {
    const char *want = getenv("CAKE_TEST_HOST_ISA");
    int avx2 = 0, avx512 = 0;
#if defined(CAKE_TEST_HAVE_X86)
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#endif
    if (want && *want && strcmp(want, "generic") != 0 && strcmp(want, "avx2") != 0 &&
        strcmp(want, "avx512") != 0) {
        fprintf(stderr, "[cake-test] FAILED: CAKE_TEST_HOST_ISA=%s: expected generic, avx2 or "
                        "avx512\n", want);
        return 0;
    }
    if (want && *want &&
        ((!strcmp(want, "avx2") && !avx2) || (!strcmp(want, "avx512") && !avx512))) {
        fprintf(stderr, "[cake-test] FAILED: CAKE_TEST_HOST_ISA=%s: not supported by this build or "
                        "processor\n", want);
        return 0;
    }
    const char *isa = want && *want ? want : avx512 ? "avx512" : avx2 ? "avx2" : "generic";
#if defined(CAKE_TEST_HAVE_X86)
    if (!strcmp(isa, "avx512")) host_loop = cake_test_silu_loop_avx512;
    if (!strcmp(isa, "avx2")) host_loop = cake_test_silu_loop_avx2;
#endif
    host_isa = isa;
    return 1;
}

static const int kChunkLog2 = 28;
static const uint64_t kChunk = UINT64_C(1) << kChunkLog2;
static const uint64_t kAll = UINT64_C(1) << 32;

/* ---- device: the oracle and the error statistics ------------------------------------------ */

/* Statistics as 64-bit keys for atomicMax: (float bits of the error) << 32 | argument pattern. An
 * error is >= 0 (or +inf), so its float bits order like its value. */
struct DeviceStats {
    unsigned long long silu;     /* ulp */
    unsigned long long grad;     /* ulp */
    unsigned long long silu_over_bound, grad_over_bound, not_finite;
    unsigned long long quick_distance; /* bit patterns between q and cake_silu, |a| <= 64 */
    unsigned long long quick_far, quick_bf16, quick_full; /* counts, as main reports them */
    unsigned long long unscaled_differs; /* |a| <= 44, cake_silu_grad_unscaled != cake_silu_grad */
};

/* bf16 of f, round to nearest even, every NaN one pattern (only equality is asked). */
__host__ __device__ unsigned bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ double oracle_silu(float a) {
    const double x = a;
    if (isinf(x)) return x > 0 ? x : -0.0;
    return x / (1.0 + exp(-x));
}

/* Near the zero a0 = -1 - W(1/e), T = 1 + E + x as u + b expm1(u), u = x - a0 (a0 in
 * double-double), b = e^a0 = -1 - a0: no cancellation. */
__device__ double oracle_grad(float a) {
    const double x = a;
    if (isinf(x)) return x > 0 ? 1.0 : -0.0;
    const double e = exp(-fabs(x)), d = 1.0 + e;
    if (x >= 0) return (d + x * e) / (d * d);
    double t = d + x;
    if (fabs(x - -0x1.474973c84120bp+0) < 0.25) {
        const double u = (x - -0x1.474973c84120bp+0) - -0x1.f8d74bc9ac154p-54;
        t = u + 0x1.1d25cf210482ep-2 * expm1(u);
    }
    return e * t / (d * d);
}

/* One fp32 ulp at |r|: 2^(e-23) for |r| in [2^e, 2^(e+1)), 2^-149 below 2^-126. */
__device__ double ulp_at(double r) {
    r = fabs(r);
    if (r < 0x1p-126) return 0x1p-149;
    const long long e = ((__double_as_longlong(r) >> 52) & 0x7ff) - 1023;
    return __longlong_as_double((e - 23 + 1023) << 52);
}

__device__ double ulp_error(float y, double exact) {
    if (isinf(exact) || isinf(y)) return (double)y == exact ? 0.0 : INFINITY;
    if (isnan(y)) return INFINITY;
    return fabs((double)y - exact) / ulp_at(exact);
}

__device__ unsigned long long key(double err, uint32_t arg) {
    return ((unsigned long long)__float_as_uint((float)err) << 32) | arg;
}

__device__ unsigned long long warp_max(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

__global__ void evaluate(uint32_t base, uint32_t n, float *silu, float *grad, float *quick,
                         DeviceStats *st) {
    unsigned long long ks = 0, kg = 0, over = 0, gover = 0, nonfinite = 0;
    unsigned long long kq = 0, far = 0, qbf16 = 0, full = 0, unscaled = 0;
    const uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint32_t u = base + i;
        const float a = __uint_as_float(u);
        const float y = cake_silu(a), g = cake_silu_grad(a);
        silu[i] = y;
        grad[i] = g;
        if (fabsf(a) <= CAKE_ACT_UNSCALED_MAX &&
            __float_as_uint(cake_silu_grad_unscaled(a)) != __float_as_uint(g))
            unscaled++;
        const float yq = cake_silu_for_bf16(a);
        quick[i] = yq;
        if (bf16_of(yq) != bf16_of(y)) qbf16++;
        uint32_t ok;
        const float q = cake_silu_quick_(a, &ok);
        full += !ok;
        if (fabsf(a) <= 64.0f) {
            const uint32_t qb = __float_as_uint(q), yb = __float_as_uint(y);
            const uint32_t dist = qb > yb ? qb - yb : yb - qb;
            const unsigned long long k3 = key((double)dist, u);
            kq = k3 > kq ? k3 : kq;
            far += dist > CAKE_SILU_QUICK_DISTANCE;
        }
        if (isnan(a)) continue;
        if (isfinite(a) && !(isfinite(y) && isfinite(g))) nonfinite++;
        const double es = ulp_error(y, oracle_silu(a));
        if (!(es <= 2.0)) over++;
        const unsigned long long k1 = key(es, u);
        ks = k1 > ks ? k1 : ks;
        const double eg = ulp_error(g, oracle_grad(a));
        if (!(eg <= 2.0)) gover++;
        const unsigned long long k2 = key(eg, u);
        kg = k2 > kg ? k2 : kg;
    }
    ks = warp_max(ks);
    kg = warp_max(kg);
    kq = warp_max(kq);
    for (int o = 16; o > 0; o >>= 1) {
        over += __shfl_xor_sync(0xffffffffu, over, o);
        gover += __shfl_xor_sync(0xffffffffu, gover, o);
        nonfinite += __shfl_xor_sync(0xffffffffu, nonfinite, o);
        far += __shfl_xor_sync(0xffffffffu, far, o);
        qbf16 += __shfl_xor_sync(0xffffffffu, qbf16, o);
        full += __shfl_xor_sync(0xffffffffu, full, o);
        unscaled += __shfl_xor_sync(0xffffffffu, unscaled, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(&st->silu, ks);
        atomicMax(&st->grad, kg);
        if (over) atomicAdd(&st->silu_over_bound, over);
        if (gover) atomicAdd(&st->grad_over_bound, gover);
        if (nonfinite) atomicAdd(&st->not_finite, nonfinite);
        atomicMax(&st->quick_distance, kq);
        if (far) atomicAdd(&st->quick_far, far);
        if (qbf16) atomicAdd(&st->quick_bf16, qbf16);
        if (full) atomicAdd(&st->quick_full, full);
        if (unscaled) atomicAdd(&st->unscaled_differs, unscaled);
    }
}

/* ---- host: the same header, generic build, every core ------------------------------------- */

struct HostSlice {
    uint64_t base, begin, end; /* patterns base + [begin, end) of the chunk */
    const float *gpu_silu, *gpu_grad, *gpu_quick;
    uint64_t mismatches;
    uint32_t first; /* lowest mismatching pattern */
};

static void *check_slice(void *arg) {
    HostSlice *s = (HostSlice *)arg;
    enum { BLOCK = 4096 };
    float in[BLOCK], y[BLOCK], g[BLOCK], q[BLOCK];
    for (uint64_t i = s->begin; i < s->end; i += BLOCK) {
        const int64_t n = (int64_t)(s->end - i < BLOCK ? s->end - i : BLOCK);
        for (int64_t k = 0; k < n; k++) {
            const uint32_t u = (uint32_t)(s->base + i + (uint64_t)k);
            memcpy(&in[k], &u, sizeof u);
        }
        host_loop(in, y, g, q, n);
        for (int64_t k = 0; k < n; k++)
            if (memcmp(&y[k], &s->gpu_silu[i + k], 4) != 0 ||
                memcmp(&g[k], &s->gpu_grad[i + k], 4) != 0 ||
                bf16_of(q[k]) != bf16_of(s->gpu_quick[i + k])) {
                const uint32_t u = (uint32_t)(s->base + i + (uint64_t)k);
                if (s->mismatches++ == 0 || u < s->first) s->first = u;
            }
    }
    return NULL;
}

static int host_threads(void) {
    const char *s = getenv("CAKE_NUM_THREADS");
    long n = (s && *s) ? strtol(s, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void print_key(const char *what, unsigned long long k, const char *unit) {
    const uint32_t u = (uint32_t)k;
    printf("[cake-test]   %-44s %.4f %s at a = %a (0x%08" PRIx32 ")\n", what,
           (double)from_bits((uint32_t)(k >> 32)), unit, (double)from_bits(u), u);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    require_gpu_or_skip();
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int T = host_threads();
    if (!pick_host_loop()) return 1;
    printf("[cake-test] device 0: %s, sm_%d%d, %d SMs; host: %d threads, the %s build\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, T, host_isa);
    fflush(stdout);

    float *d_silu[2], *d_grad[2], *d_quick[2], *h_silu[2], *h_grad[2], *h_quick[2];
    cudaStream_t stream;
    cudaEvent_t done[2];
    DeviceStats *d_st;
    CHECK(cudaStreamCreate(&stream));
    for (int b = 0; b < 2; b++) {
        CHECK(cudaMalloc(&d_silu[b], kChunk * sizeof(float)));
        CHECK(cudaMalloc(&d_grad[b], kChunk * sizeof(float)));
        CHECK(cudaMallocHost(&h_silu[b], kChunk * sizeof(float)));
        CHECK(cudaMallocHost(&h_grad[b], kChunk * sizeof(float)));
        CHECK(cudaMalloc(&d_quick[b], kChunk * sizeof(float)));
        CHECK(cudaMallocHost(&h_quick[b], kChunk * sizeof(float)));
        CHECK(cudaEventCreateWithFlags(&done[b], cudaEventDisableTiming));
    }
    CHECK(cudaMalloc(&d_st, sizeof(DeviceStats)));
    CHECK(cudaMemsetAsync(d_st, 0, sizeof(DeviceStats), stream));

    const int blocks = prop.multiProcessorCount * 8, threads = 256;
    const uint64_t chunks = kAll / kChunk;
    const double t0 = seconds();
    double host_time = 0;
    auto launch = [&](uint64_t c) {
        const int b = (int)(c & 1);
        evaluate<<<blocks, threads, 0, stream>>>((uint32_t)(c * kChunk), (uint32_t)kChunk,
                                                 d_silu[b], d_grad[b], d_quick[b], d_st);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(h_silu[b], d_silu[b], kChunk * sizeof(float),
                              cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(h_grad[b], d_grad[b], kChunk * sizeof(float),
                              cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(h_quick[b], d_quick[b], kChunk * sizeof(float),
                              cudaMemcpyDeviceToHost, stream));
        CHECK(cudaEventRecord(done[b], stream));
    };

    HostSlice *slices = (HostSlice *)calloc((size_t)T, sizeof(HostSlice));
    pthread_t *th = (pthread_t *)calloc((size_t)T, sizeof(pthread_t));
    if (!slices || !th) {
        fprintf(stderr, "[cake-test] FAILED: out of host memory\n");
        return 1;
    }
    uint64_t mismatches = 0;
    uint32_t first = 0;
    launch(0);
    for (uint64_t c = 0; c < chunks; c++) {
        const int b = (int)(c & 1);
        CHECK(cudaEventSynchronize(done[b]));
        if (c + 1 < chunks) launch(c + 1); /* the other buffers: their check finished */
        const double h0 = seconds();
        for (int i = 0; i < T; i++) {
            slices[i].base = c * kChunk;
            slices[i].begin = kChunk * (uint64_t)i / (uint64_t)T;
            slices[i].end = kChunk * (uint64_t)(i + 1) / (uint64_t)T;
            slices[i].gpu_silu = h_silu[b];
            slices[i].gpu_grad = h_grad[b];
            slices[i].gpu_quick = h_quick[b];
            slices[i].mismatches = 0;
            if (pthread_create(&th[i], NULL, check_slice, &slices[i]) != 0) {
                fprintf(stderr, "[cake-test] FAILED: pthread_create\n");
                return 1;
            }
        }
        for (int i = 0; i < T; i++) {
            pthread_join(th[i], NULL);
            if (slices[i].mismatches && (mismatches == 0 || slices[i].first < first))
                first = slices[i].first;
            mismatches += slices[i].mismatches;
        }
        host_time += seconds() - h0;
    }
    CHECK(cudaStreamSynchronize(stream));
    DeviceStats st;
    CHECK(cudaMemcpy(&st, d_st, sizeof st, cudaMemcpyDeviceToHost));
    const double total = seconds() - t0;

    printf("[cake-test] every fp32 pattern: %.1f s (host checks %.1f s)\n", total, host_time);
    printf("[cake-test]   GPU vs CPU (%s build): %" PRIu64 " inputs differ (a bit of silu or "
           "silu', the bf16 of silu for bf16)\n", host_isa, mismatches);
    print_key("cake_silu: max error (GPU, float64 oracle)", st.silu, "ulp");
    print_key("cake_silu_grad: max error (GPU, float64 oracle)", st.grad, "ulp");
    print_key("quick silu: max distance, |a| <= 64 (GPU)", st.quick_distance, "patterns");
    printf("[cake-test]   quick silu: the full sequence ran for %llu of 2^32 inputs\n",
           st.quick_full);
    printf("[cake-test]   silu' unscaled against full, |a| <= %g: %llu inputs differ\n",
           (double)CAKE_ACT_UNSCALED_MAX, st.unscaled_differs);
    int failed = 0;
    if (mismatches) {
        float in[1] = {from_bits(first)}, y[1], g[1], q[1];
        host_loop(in, y, g, q, 1);
        fprintf(stderr,
                "[cake-test] FAILED: GPU and CPU differ on %" PRIu64 " inputs, the first at a = %a "
                "(0x%08" PRIx32 "): CPU silu 0x%08" PRIx32 ", grad 0x%08" PRIx32 ", silu for bf16 "
                "0x%08" PRIx32 "\n",
                mismatches, (double)in[0], first, bits(y[0]), bits(g[0]), bits(q[0]));
        failed = 1;
    }
    if (st.quick_far) {
        fprintf(stderr, "[cake-test] FAILED: %llu inputs |a| <= 64 with the quick q more than %u "
                        "patterns from cake_silu\n", st.quick_far, CAKE_SILU_QUICK_DISTANCE);
        failed = 1;
    }
    if (st.unscaled_differs) {
        fprintf(stderr, "[cake-test] FAILED: %llu inputs |a| <= %g where cake_silu_grad_unscaled "
                        "differs from cake_silu_grad\n",
                st.unscaled_differs, (double)CAKE_ACT_UNSCALED_MAX);
        failed = 1;
    }
    if (st.quick_bf16) {
        fprintf(stderr, "[cake-test] FAILED: %llu inputs where bf16(cake_silu_for_bf16) differs "
                        "from bf16(cake_silu)\n", st.quick_bf16);
        failed = 1;
    }
    if (st.silu_over_bound) {
        fprintf(stderr, "[cake-test] FAILED: %llu inputs with cake_silu more than 2 ulp off\n",
                st.silu_over_bound);
        failed = 1;
    }
    if (st.grad_over_bound) {
        fprintf(stderr, "[cake-test] FAILED: %llu inputs with cake_silu_grad more than 2 ulp off\n",
                st.grad_over_bound);
        failed = 1;
    }
    if (st.not_finite) {
        fprintf(stderr, "[cake-test] FAILED: %llu finite inputs with a NaN or infinite result\n",
                st.not_finite);
        failed = 1;
    }
    for (int b = 0; b < 2; b++) {
        cudaFree(d_silu[b]);
        cudaFree(d_grad[b]);
        cudaFreeHost(h_silu[b]);
        cudaFreeHost(h_grad[b]);
        cudaFree(d_quick[b]);
        cudaFreeHost(h_quick[b]);
        cudaEventDestroy(done[b]);
    }
    cudaFree(d_st);
    cudaStreamDestroy(stream);
    free(slices);
    free(th);
    printf("[cake-test] %s\n", failed ? "FAILED" : "passed");
    return failed;
}
