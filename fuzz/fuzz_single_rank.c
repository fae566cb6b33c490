/* Harness: the op itself on small valid inputs (T <= 64, C in {8, 16, 24}, n <= 3, 1-3 threads,
 * every supported ISA, params NULL or SiLU and a bias in any combination), bit for bit against
 * the test reference (tests/reference.h, with bias and SiLU): first through the single-rank
 * calls, then on every rank of a random partition with pools taken from global data. Values
 * include NaN, infinities, subnormals and raw bit patterns from the input; NaN outputs must be
 * the canonical NaN (SPEC 3), compared bit for bit. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_layout.h"
#include "fuzz_util.h"
#include "reference.h"

enum { MAX_T = 64, MAX_N = 3, MAX_SEQS = 8 };

typedef struct problem {
    int64_t cu[MAX_SEQS + 1], num_seqs, T;
    int n;
    int64_t C[MAX_N];
    cake_bf16 *x[MAX_N], *dy[MAX_N];
    float *w[MAX_N];
    /* params: NULL (with_params 0), or SiLU or none with a bias or none */
    int with_params, silu, with_bias;
    float *bias[MAX_N];
    cake_bf16 *y[MAX_N], *dx[MAX_N]; /* the reference's, global */
} problem;

static ref_params ref_params_of(const problem *pb, int i) {
    const ref_params p = {pb->with_params && pb->with_bias ? pb->bias[i] : NULL,
                          pb->with_params && pb->silu ? REF_ACT_SILU : REF_ACT_NONE};
    return p;
}

/* The library's params for tensors [first, ...), with `dbias` the outputs (may be NULL). */
static cake_conv_params params_of(const problem *pb, int first, float *const *dbias) {
    const cake_conv_params p = {pb->silu ? CAKE_ACTIVATION_SILU : CAKE_ACTIVATION_NONE,
                                pb->with_bias ? (const float *const *)pb->bias + first : NULL,
                                pb->with_bias ? dbias : NULL};
    return p;
}

static cake_bf16 value(fz_reader *r, int profile, uint64_t stream, uint64_t k) {
    if (profile == 2 && fz_left(r)) return fz_u16(r); /* raw bits: any pattern at all */
    return fz_bf16(stream, k, profile == 1);
}

static float weight(fz_reader *r, int profile, uint64_t stream, uint64_t k) {
    if (profile == 2 && fz_left(r)) {
        const uint32_t bits = fz_u32(r);
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    return fz_weight(stream, k, profile == 1);
}

/* Shapes and choices from `r`, raw values (profile 2) from `values`. */
static void problem_init(fz_reader *r, fz_reader *values, problem *pb) {
    const uint64_t seed = fz_u64(r);
    pb->num_seqs = fz_u8(r) % (MAX_SEQS + 1);
    pb->cu[0] = 0;
    for (int64_t s = 1; s <= pb->num_seqs; s++) {
        const int64_t len = fz_u8(r) % 17;
        pb->cu[s] = pb->cu[s - 1] + (pb->cu[s - 1] + len <= MAX_T ? len : 0);
    }
    pb->T = pb->cu[pb->num_seqs];
    pb->n = 1 + fz_u8(r) % MAX_N;
    const int profile = fz_u8(r) % 3;
    const uint8_t pp = fz_u8(r); /* 0 (an exhausted input): params NULL */
    pb->with_params = pp % 4 != 0;
    pb->silu = pb->with_params && ((pp >> 2) & 1);
    pb->with_bias = pb->with_params && ((pp >> 3) & 1);
    for (int i = 0; i < pb->n; i++) {
        const int64_t C = pb->C[i] = 8 * (1 + fz_u8(r) % 3), TC = pb->T * C;
        pb->x[i] = fz_malloc(sizeof(cake_bf16) * (size_t)TC);
        pb->dy[i] = fz_malloc(sizeof(cake_bf16) * (size_t)TC);
        pb->w[i] = fz_malloc(sizeof(float) * (size_t)(4 * C));
        for (int64_t k = 0; k < 4 * C; k++) pb->w[i][k] = weight(values, profile, seed + 3 * i, (uint64_t)k);
        for (int64_t k = 0; k < TC; k++) {
            pb->x[i][k] = value(values, profile, seed + 3 * i + 1, (uint64_t)k);
            pb->dy[i][k] = value(values, profile, seed + 3 * i + 2, (uint64_t)k);
        }
        pb->bias[i] = fz_malloc(sizeof(float) * (size_t)C);
        for (int64_t k = 0; k < C; k++)
            pb->bias[i][k] = weight(values, profile, seed + 3 * i + 3 * MAX_N, (uint64_t)k);
        pb->y[i] = fz_malloc(sizeof(cake_bf16) * (size_t)TC);
        pb->dx[i] = fz_malloc(sizeof(cake_bf16) * (size_t)TC);
        const ref_params rp = ref_params_of(pb, i);
        ref_forward_p(pb->cu, pb->num_seqs, C, pb->x[i], pb->w[i], &rp, pb->y[i]);
        ref_backward_dx_p(pb->cu, pb->num_seqs, C, pb->x[i], pb->w[i], &rp, pb->dy[i],
                          pb->dx[i]);
    }
}

static void problem_free(problem *pb) {
    for (int i = 0; i < pb->n; i++) {
        free(pb->x[i]);
        free(pb->dy[i]);
        free(pb->w[i]);
        free(pb->bias[i]);
        free(pb->y[i]);
        free(pb->dx[i]);
    }
}

static cake_cpu_options random_options(fz_reader *r) {
    cake_cpu_isa isas[CAKE_CPU_ISA_COUNT];
    const int count = fz_supported_isas(isas);
    const uint8_t b = fz_u8(r);
    return (cake_cpu_options){1 + b % 3, isas[(b >> 2) % count]};
}

/* One rank's outputs (rows l2g[0..S)) against the reference. */
static void check_rank(const char *what, const problem *pb, int i, const int64_t *l2g, int64_t S,
                       const cake_bf16 *y, const cake_bf16 *dx, const float *dw,
                       const float *dbias) {
    const int64_t C = pb->C[i];
    int64_t at = -1;
    for (int64_t t = 0; t < S; t++) {
        const int64_t g = l2g[t];
        FZ_CHECK(!y || fz_same_bf16(y + t * C, pb->y[i] + g * C, C, &at),
                 "%s: y[%d] row %" PRId64 " (global %" PRId64 ") channel %" PRId64 ": %#x, want %#x",
                 what, i, t, g, at, y[t * C + at], pb->y[i][g * C + at]);
        FZ_CHECK(!dx || fz_same_bf16(dx + t * C, pb->dx[i] + g * C, C, &at),
                 "%s: dx[%d] row %" PRId64 " (global %" PRId64 ") channel %" PRId64 ": %#x, want %#x",
                 what, i, t, g, at, dx[t * C + at], pb->dx[i][g * C + at]);
    }
    if (!dw) return;
    float want[4 * 24], want_dbias[24];
    const ref_params rp = ref_params_of(pb, i);
    ref_grads_p(pb->cu, pb->num_seqs, C, pb->x[i], pb->w[i], &rp, pb->dy[i], l2g, S, want,
                dbias ? want_dbias : NULL);
    FZ_CHECK(fz_same_f32(dw, want, 4 * C, &at), "%s: dw[%d] element %" PRId64 " differs", what, i, at);
    FZ_CHECK(!dbias || fz_same_f32(dbias, want_dbias, C, &at),
             "%s: dbias[%d] element %" PRId64 " differs", what, i, at);
}

/* The single-rank calls, all tensors in one call or one by one. */
static void run_single_rank(fz_reader *r, const problem *pb) {
    const cake_cpu_options opt = random_options(r);
    const int one_by_one = fz_u8(r) & 1;
    cake_bf16 *y[MAX_N], *dx[MAX_N];
    float *dw[MAX_N], *dbias[MAX_N];
    for (int i = 0; i < pb->n; i++) {
        y[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(pb->T * pb->C[i]));
        dx[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(pb->T * pb->C[i]));
        dw[i] = fz_malloc(sizeof(float) * (size_t)(4 * pb->C[i]));
        dbias[i] = fz_malloc(sizeof(float) * (size_t)pb->C[i]);
    }
    const cake_bf16 *const *x = (const cake_bf16 *const *)pb->x;
    const cake_bf16 *const *dy = (const cake_bf16 *const *)pb->dy;
    const float *const *w = (const float *const *)pb->w;
    for (int i = 0; i < (one_by_one ? pb->n : 1); i++) {
        const int n = one_by_one ? 1 : pb->n;
        const cake_conv_params p = params_of(pb, i, dbias + i);
        const cake_conv_params *pp = pb->with_params ? &p : NULL;
        FZ_CHECK(cake_cpu_forward_single_rank(pb->cu, pb->num_seqs, n, pb->C + i, x + i, w + i,
                                              pp, y + i, &opt) == CAKE_SUCCESS,
                 "single-rank forward: %s", cake_last_error());
        FZ_CHECK(cake_cpu_backward_single_rank(pb->cu, pb->num_seqs, n, pb->C + i, x + i, w + i,
                                               pp, dy + i, dx + i, dw + i, &opt) == CAKE_SUCCESS,
                 "single-rank backward: %s", cake_last_error());
    }
    int64_t *l2g = fz_malloc(sizeof(int64_t) * (size_t)pb->T);
    for (int64_t g = 0; g < pb->T; g++) l2g[g] = g;
    fz_count("cake_cpu_{forward,backward}_single_rank: valid, %s, %s%s%s",
             cake_cpu_isa_name(opt.isa), one_by_one ? "one tensor per call" : "all tensors in one call",
             pb->silu ? ", SiLU" : "", pb->with_bias ? ", bias" : "");
    for (int i = 0; i < pb->n; i++) {
        check_rank("single rank", pb, i, l2g, pb->T, y[i], dx[i], dw[i],
                   pb->with_bias ? dbias[i] : NULL);
        free(y[i]);
        free(dx[i]);
        free(dw[i]);
        free(dbias[i]);
    }
    free(l2g);
}

/* A valid random partition of [0, T) and the library's copy of it. */
static int random_partition(fz_reader *r, const problem *pb, fz_layout *l, cake_partition **part) {
    const int P = 1 + fz_u8(r) % 4, kind = fz_u8(r) % 4;
    const int64_t T = pb->T;
    if (kind == 0) {
        fz_layout_contiguous(l, pb->cu, pb->num_seqs, P);
        FZ_CHECK(cake_partition_create_contiguous(pb->cu, pb->num_seqs, P, part) == CAKE_SUCCESS,
                 "contiguous: %s", cake_last_error());
        return kind;
    }
    if (kind == 1) {
        fz_layout_zigzag(l, pb->cu, pb->num_seqs, P);
        FZ_CHECK(cake_partition_create_zigzag(pb->cu, pb->num_seqs, P, part) == CAKE_SUCCESS,
                 "zigzag: %s", cake_last_error());
        return kind;
    }
    /* boundaries (one range per rank, in order) or ranges (K pieces, owners and order random) */
    const int64_t K = kind == 2 ? P : P + fz_u8(r) % (2 * P + 1);
    int64_t cuts[3 * 4 + 2], counts[4] = {0};
    cake_range pieces[3 * 4 + 1], ranges[3 * 4 + 1];
    int owner[3 * 4 + 1];
    cuts[0] = 0;
    for (int64_t k = 1; k < K; k++) cuts[k] = cuts[k - 1] + fz_range(r, 0, T - cuts[k - 1]);
    cuts[K] = T;
    for (int64_t k = 0; k < K; k++) {
        pieces[k] = (cake_range){cuts[k], cuts[k + 1]};
        owner[k] = kind == 2 ? (int)k : fz_u8(r) % P;
        counts[owner[k]]++;
    }
    int64_t next = 0;
    for (int q = 0; q < P; q++) { /* rank q's pieces, rotated by a random amount */
        const int64_t first = next, rot = counts[q] ? fz_u8(r) % counts[q] : 0;
        int64_t m = 0;
        for (int64_t k = 0; k < K; k++)
            if (owner[k] == q) ranges[first + (m++ + rot) % counts[q]] = pieces[k];
        next += counts[q];
    }
    FZ_CHECK(fz_layout_ranges(l, pb->cu, pb->num_seqs, P, counts, ranges), "harness: bad layout");
    if (kind == 2) {
        int64_t b[5];
        for (int q = 0; q <= P; q++) b[q] = cuts[q];
        FZ_CHECK(cake_partition_create_boundaries(pb->cu, pb->num_seqs, P, b, part) == CAKE_SUCCESS,
                 "boundaries: %s", cake_last_error());
    } else {
        FZ_CHECK(cake_partition_create_ranges(pb->cu, pb->num_seqs, P, counts, ranges, part) ==
                     CAKE_SUCCESS, "ranges: %s", cake_last_error());
    }
    return kind;
}

/* Every rank: local rows gathered, pools from global data, the CPU kernels, the reference. */
static void run_partition(fz_reader *r, const problem *pb) {
    fz_layout l;
    cake_partition *part;
    const int kind = random_partition(r, pb, &l, &part);
    static const char *const kinds[] = {"contiguous", "zigzag", "boundaries", "ranges"};
    fz_count("cake_cpu_{forward,backward} on every rank: valid, %s, P %d", kinds[kind], l.P);
    for (int q = 0; q < l.P; q++) {
        cake_plan *plan;
        FZ_CHECK(cake_plan_create(part, q, &plan) == CAKE_SUCCESS, "plan: %s", cake_last_error());
        fz_check_plan(&l, plan, q);
        int64_t nf;
        cake_fragment *frags = fz_fragments(&l, q, &nf);
        int64_t *l2g = fz_l2g(&l, q);
        const int64_t S = l.local_rows[q], pool = CAKE_HALO_ROWS * nf;
        const cake_cpu_options opt = random_options(r);
        cake_bf16 *x[MAX_N], *dy[MAX_N], *hist[MAX_N], *fut[MAX_N], *y[MAX_N], *dx[MAX_N];
        float *dw[MAX_N], *dbias[MAX_N];
        const int64_t future_rows = pb->silu ? 2 * pool : pool; /* with SiLU: x after dy */
        for (int i = 0; i < pb->n; i++) {
            const int64_t C = pb->C[i];
            x[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(S * C));
            dy[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(S * C));
            for (int64_t t = 0; t < S; t++) {
                memcpy(x[i] + t * C, pb->x[i] + l2g[t] * C, sizeof(cake_bf16) * (size_t)C);
                memcpy(dy[i] + t * C, pb->dy[i] + l2g[t] * C, sizeof(cake_bf16) * (size_t)C);
            }
            hist[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(pool * C));
            fut[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(future_rows * C));
            fz_pools(frags, nf, C, pb->x[i], pb->dy[i], hist[i], fut[i]);
            if (pb->silu) fz_pools(frags, nf, C, NULL, pb->x[i], NULL, fut[i] + pool * C);
            y[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(S * C));
            dx[i] = fz_malloc(sizeof(cake_bf16) * (size_t)(S * C));
            dw[i] = fz_malloc(sizeof(float) * (size_t)(4 * C));
            dbias[i] = fz_malloc(sizeof(float) * (size_t)C);
        }
        typedef const cake_bf16 *const *in;
        const cake_conv_params p = params_of(pb, 0, dbias);
        const cake_conv_params *pp = pb->with_params ? &p : NULL;
        FZ_CHECK(cake_cpu_forward(plan, pb->n, pb->C, (in)x, (const float *const *)pb->w, pp,
                                  (in)hist, y, &opt) == CAKE_SUCCESS, "forward: %s",
                 cake_last_error());
        FZ_CHECK(cake_cpu_backward(plan, pb->n, pb->C, (in)x, (const float *const *)pb->w, pp,
                                   (in)hist, (in)dy, (in)fut, dx, dw, &opt) == CAKE_SUCCESS,
                 "backward: %s", cake_last_error());
        for (int i = 0; i < pb->n; i++) {
            check_rank("partition rank", pb, i, l2g, S, y[i], dx[i], dw[i],
                       pb->with_bias ? dbias[i] : NULL);
            cake_bf16 *bufs[] = {x[i], dy[i], hist[i], fut[i], y[i], dx[i]};
            for (int b = 0; b < 6; b++) free(bufs[b]);
            free(dw[i]);
            free(dbias[i]);
        }
        free(frags);
        free(l2g);
        cake_plan_destroy(plan);
    }
    cake_partition_destroy(part);
    fz_layout_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The first 48 bytes choose shapes, options and partitions; the rest are raw values, so
     * that mutating a value never shifts the choices. */
    const size_t head_size = size < 48 ? size : 48;
    fz_reader head = {data, head_size, 0}, values = {data + head_size, size - head_size, 0};
    problem pb = {0};
    problem_init(&head, &values, &pb);
    run_single_rank(&head, &pb);
    run_partition(&head, &pb);
    problem_free(&pb);
    return 0;
}
