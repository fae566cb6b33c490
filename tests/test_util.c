/* Shared test helpers (see test_util.h). Nothing here reads the library's sources: partitions are
 * described from SPEC section 2 and only handed to the library's constructors. */
#include "test_util.h"

#include "reference.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failure reports ----------------------------------------------------------------------- */

static char g_ctx[512];

uint64_t tu_seed(void) {
    static int have;
    static uint64_t seed;
    if (!have) {
        const char *s = getenv("CAKE_TEST_SEED");
        seed = (s && *s) ? (uint64_t)strtoull(s, NULL, 0) : UINT64_C(0x63616b6574657374);
        have = 1;
        printf("[cake-test] seed 0x%016" PRIx64 " (set CAKE_TEST_SEED to change)\n", seed);
    }
    return seed;
}

void tu_set_ctx(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_ctx, sizeof g_ctx, fmt, ap);
    va_end(ap);
}

void tu_report(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "[cake-test] FAILED with CAKE_TEST_SEED=0x%016" PRIx64 " in: %s\n  ", tu_seed(),
            g_ctx);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static int diff_bf16(const char *what, const cake_bf16 *got, const cake_bf16 *want, int64_t rows,
                     int64_t cols) {
    int64_t n = rows * cols, bad = 0, first = -1;
    if (n == 0 || memcmp(got, want, (size_t)n * sizeof *got) == 0)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ == 0)
            first = i;
    tu_report("%s: %" PRId64 " of %" PRId64 " bf16 values differ; first at row %" PRId64
              " col %" PRId64 ": got 0x%04x want 0x%04x",
              what, bad, n, first / cols, first % cols, got[first], want[first]);
    return 1;
}

static int diff_f32(const char *what, const float *got, const float *want, int64_t rows,
                    int64_t cols) {
    int64_t n = rows * cols, bad = 0, first = -1;
    if (n == 0 || memcmp(got, want, (size_t)n * sizeof *got) == 0)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0 && bad++ == 0)
            first = i;
    uint32_t ug, uw;
    memcpy(&ug, &got[first], 4);
    memcpy(&uw, &want[first], 4);
    tu_report("%s: %" PRId64 " of %" PRId64 " fp32 values differ; first at row %" PRId64
              " col %" PRId64 ": got 0x%08" PRIx32 " (%.9g) want 0x%08" PRIx32 " (%.9g)",
              what, bad, n, first / cols, first % cols, ug, (double)got[first], uw,
              (double)want[first]);
    return 1;
}

int tu_diff_bf16(const char *what, const cake_bf16 *got, const cake_bf16 *want, int64_t rows,
                 int64_t cols) {
    return diff_bf16(what, got, want, rows, cols);
}

int tu_diff_f32(const char *what, const float *got, const float *want, int64_t rows, int64_t cols) {
    return diff_f32(what, got, want, rows, cols);
}

int tu_check_canonical_bf16(const char *what, const cake_bf16 *a, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; i++)
        if (tu_bf16_isnan(a[i]) && a[i] != REF_BF16_NAN) {
            tu_report("%s: row %" PRId64 " col %" PRId64 " holds NaN 0x%04x, not the canonical "
                      "0x%04x",
                      what, i / cols, i % cols, a[i], REF_BF16_NAN);
            return 1;
        }
    return 0;
}

int tu_check_canonical_f32(const char *what, const float *a, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; i++) {
        uint32_t u;
        memcpy(&u, &a[i], 4);
        if ((u & 0x7fffffffu) > 0x7f800000u && u != REF_F32_NAN) {
            tu_report("%s: row %" PRId64 " col %" PRId64 " holds NaN 0x%08" PRIx32
                      ", not the canonical 0x%08x",
                      what, i / cols, i % cols, u, REF_F32_NAN);
            return 1;
        }
    }
    return 0;
}

/* ---- RNG and random values ------------------------------------------------------------------ */

uint64_t tu_next(tu_rng *r) { /* splitmix64 */
    uint64_t z = (r->state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void tu_rng_init(tu_rng *r, uint64_t stream) {
    r->state = tu_seed() ^ (stream * UINT64_C(0xd1342543de82ef95));
    (void)tu_next(r);
}

int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(tu_next(r) % span);
}

float tu_bf16_to_f32(cake_bf16 b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int tu_bf16_isnan(cake_bf16 b) {
    return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0;
}

/* A bf16 with biased exponent in [emin, emax] (1..254) or, with the given odds in percent, a
 * signed zero or a subnormal. */
static cake_bf16 bf16_pick(tu_rng *r, int zero_pct, int sub_pct, int emin, int emax) {
    int u = (int)tu_range(r, 0, 99);
    uint16_t sign = (uint16_t)(tu_next(r) & 1) << 15;
    if (u < zero_pct)
        return sign;
    if (u < zero_pct + sub_pct)
        return (cake_bf16)(sign | (uint16_t)tu_range(r, 1, 0x7f));
    return (cake_bf16)(sign | (uint16_t)(tu_range(r, emin, emax) << 7) |
                       (uint16_t)tu_range(r, 0, 0x7f));
}

cake_bf16 tu_bf16(tu_rng *r, tu_profile p) {
    switch (p) {
    case TU_WIDE:
        return bf16_pick(r, 4, 6, 1, 127 + 40);
    case TU_TINY:
        return bf16_pick(r, 4, 36, 1, 12);
    case TU_NARROW:
        return bf16_pick(r, 4, 1, 127 - 6, 127 + 4);
    default:
        return bf16_pick(r, 4, 3, 127 - 12, 127 + 12);
    }
}

static float f32_pick(tu_rng *r, int zero_pct, int sub_pct, int emin, int emax) {
    int u = (int)tu_range(r, 0, 99);
    uint32_t sign = (uint32_t)(tu_next(r) & 1) << 31, bits;
    uint32_t mant = (uint32_t)tu_range(r, 0, 0x7fffff);
    if (u < zero_pct)
        bits = sign;
    else if (u < zero_pct + sub_pct)
        bits = sign | (mant ? mant : 1);
    else
        bits = sign | ((uint32_t)tu_range(r, emin, emax) << 23) | mant;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float tu_weight(tu_rng *r, tu_profile p) {
    switch (p) {
    case TU_WIDE:
        return f32_pick(r, 3, 5, 127 - 40, 127 + 40);
    case TU_TINY:
        return f32_pick(r, 3, 0, 127 - 8, 127);
    case TU_NARROW:
        return f32_pick(r, 3, 0, 127 - 4, 127 + 1);
    default:
        return f32_pick(r, 3, 2, 127 - 8, 127 + 3);
    }
}

void tu_fill_bf16(tu_rng *r, tu_profile p, cake_bf16 *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        a[i] = tu_bf16(r, p);
}

void tu_fill_weights(tu_rng *r, tu_profile p, float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        a[i] = tu_weight(r, p);
}

/* ---- sequences and problems ----------------------------------------------------------------- */

void *tu_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "[cake-test] out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

int64_t tu_random_cu(tu_rng *r, int64_t max_seqs, int64_t max_len, int64_t **cu) {
    int64_t n = tu_range(r, 1, max_seqs);
    int64_t *c = tu_malloc((size_t)(n + 1) * sizeof *c);
    c[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = tu_range(r, 0, 99), len;
        if (u < 15)
            len = 0;
        else if (u < 30)
            len = 1;
        else if (u < 40)
            len = 2;
        else if (u < 45)
            len = 3;
        else
            len = tu_range(r, 1, max_len);
        c[i + 1] = c[i] + len;
    }
    *cu = c;
    return n;
}

int64_t *tu_seq_of_rows(const int64_t *cu, int64_t num_seqs) {
    int64_t *s = tu_malloc((size_t)cu[num_seqs] * sizeof *s);
    for (int64_t q = 0; q < num_seqs; q++)
        for (int64_t g = cu[q]; g < cu[q + 1]; g++)
            s[g] = q;
    return s;
}

void tu_random_channels(tu_rng *r, int n, int64_t max_c, int64_t *C) {
    for (int i = 0; i < n; i++)
        C[i] = 8 * tu_range(r, 1, max_c / 8);
}

void tu_problem_init(tu_problem *pb, tu_rng *r, tu_profile p, const int64_t *cu, int64_t num_seqs,
                     int n, const int64_t *C) {
    memset(pb, 0, sizeof *pb);
    pb->cu = cu;
    pb->num_seqs = num_seqs;
    pb->T = cu[num_seqs];
    pb->n = n;
    for (int i = 0; i < n; i++) {
        int64_t e = pb->T * C[i];
        pb->C[i] = C[i];
        pb->x[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
        pb->dy[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
        pb->w[i] = tu_malloc((size_t)C[i] * 4 * sizeof(float));
        tu_fill_bf16(r, p, pb->x[i], e);
        tu_fill_bf16(r, p, pb->dy[i], e);
        tu_fill_weights(r, p, pb->w[i], C[i] * 4);
    }
}

void tu_problem_set_params(tu_problem *pb, tu_rng *r, tu_profile p, int with_bias,
                           cake_activation activation) {
    for (int i = 0; i < pb->n; i++) {
        free(pb->bias[i]);
        pb->bias[i] = NULL;
        if (with_bias) {
            pb->bias[i] = tu_malloc((size_t)pb->C[i] * sizeof(float));
            tu_fill_weights(r, p, pb->bias[i], pb->C[i]);
        }
    }
    pb->with_bias = with_bias != 0;
    pb->activation = activation;
}

void tu_problem_free(tu_problem *pb) {
    for (int i = 0; i < pb->n; i++) {
        free(pb->x[i]);
        free(pb->dy[i]);
        free(pb->w[i]);
        free(pb->bias[i]);
    }
    memset(pb, 0, sizeof *pb);
}

const char *const tu_variant_name[TU_VARIANTS] = {"plain", "bias", "silu", "bias+silu"};

int tu_variant_bias(int variant) {
    return variant & 1;
}

cake_activation tu_variant_activation(int variant) {
    return variant & 2 ? CAKE_ACTIVATION_SILU : CAKE_ACTIVATION_NONE;
}

int tu_problem_variant(const tu_problem *pb) {
    return (pb->with_bias ? 1 : 0) | (pb->activation == CAKE_ACTIVATION_SILU ? 2 : 0);
}

const cake_conv_params *tu_params_of(tu_params *st, const tu_problem *pb, int first, int count,
                                     float *const *dbias) {
    memset(st, 0, sizeof *st);
    st->params.activation = pb->activation;
    if (pb->with_bias) {
        for (int i = 0; i < count; i++) {
            st->bias[i] = pb->bias[first + i];
            st->dbias[i] = dbias ? dbias[first + i] : NULL;
        }
        st->params.bias = st->bias;
        st->params.dbias = dbias ? st->dbias : NULL;
    }
    return &st->params;
}

void tu_ref_params(const tu_problem *pb, int i, ref_params *out) {
    out->bias = pb->with_bias ? pb->bias[i] : NULL;
    out->activation = pb->activation == CAKE_ACTIVATION_SILU ? REF_ACT_SILU : REF_ACT_NONE;
}

/* ---- partitions ------------------------------------------------------------------------------ */

const char *const tu_kind_name[TU_KIND_COUNT] = {"contiguous", "boundaries", "zigzag", "ranges"};

static void sort_i64(int64_t *a, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && a[j - 1] > a[j]; j--) {
            int64_t t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

/* Random chunks of 1..max_chunk rows with random owners; each rank's list keeps global order or
 * is shuffled, and sometimes gets an empty range. */
static void describe_ranges(tu_partition *tp, tu_rng *r, int64_t max_chunk) {
    int P = tp->P;
    int64_t T = tp->T, cap = T + 2 * (int64_t)P + 1, nr = 0;
    cake_range *chunk = tu_malloc((size_t)cap * sizeof *chunk);
    int *owner = tu_malloc((size_t)cap * sizeof *owner);
    int64_t nc = 0;
    for (int64_t pos = 0; pos < T; nc++) {
        int64_t len = tu_range(r, 1, max_chunk);
        if (len > T - pos)
            len = T - pos;
        chunk[nc] = (cake_range){pos, pos + len};
        owner[nc] = (int)tu_range(r, 0, P - 1);
        pos += len;
    }
    tp->ranges = tu_malloc((size_t)cap * sizeof *tp->ranges);
    for (int k = 0; k < P; k++) {
        int64_t begin = nr;
        for (int64_t c = 0; c < nc; c++)
            if (owner[c] == k)
                tp->ranges[nr++] = chunk[c];
        if (T > 0 && tu_range(r, 0, 3) == 0) { /* an empty range somewhere inside [0, T) */
            int64_t s = tu_range(r, 0, T - 1);
            tp->ranges[nr++] = (cake_range){s, s};
        }
        if (tu_range(r, 0, 1)) /* Fisher-Yates on this rank's list */
            for (int64_t i = nr - 1; i > begin; i--) {
                int64_t j = tu_range(r, begin, i);
                cake_range t = tp->ranges[i];
                tp->ranges[i] = tp->ranges[j];
                tp->ranges[j] = t;
            }
        tp->counts[k] = nr - begin;
    }
    free(chunk);
    free(owner);
}

/* From tp's description (kind, P, T, counts, ranges, boundaries): first, local_rows, l2g, then
 * the library partition from the matching constructor. */
static cake_status finish_partition(tu_partition *tp, const int64_t *cu, int64_t num_seqs) {
    int P = tp->P;
    int64_t T = tp->T;
    tu_kind kind = tp->kind;
    tp->first[0] = 0;
    for (int k = 0; k < P; k++)
        tp->first[k + 1] = tp->first[k] + tp->counts[k];
    tp->local_rows = tu_malloc((size_t)P * sizeof *tp->local_rows);
    tp->l2g = tu_malloc((size_t)P * sizeof *tp->l2g);
    for (int k = 0; k < P; k++) {
        int64_t S = 0;
        for (int64_t q = tp->first[k]; q < tp->first[k + 1]; q++)
            S += tp->ranges[q].end - tp->ranges[q].start;
        tp->local_rows[k] = S;
        tp->l2g[k] = tu_malloc((size_t)S * sizeof **tp->l2g);
        S = 0;
        for (int64_t q = tp->first[k]; q < tp->first[k + 1]; q++)
            for (int64_t g = tp->ranges[q].start; g < tp->ranges[q].end; g++)
                tp->l2g[k][S++] = g;
    }
    cake_status st;
    switch (kind) {
    case TU_CONTIGUOUS:
        st = cake_partition_create_contiguous(cu, num_seqs, P, &tp->lib);
        break;
    case TU_BOUNDARIES:
        st = cake_partition_create_boundaries(cu, num_seqs, P, tp->boundaries, &tp->lib);
        break;
    case TU_ZIGZAG:
        st = cake_partition_create_zigzag(cu, num_seqs, P, &tp->lib);
        break;
    default:
        st = cake_partition_create_ranges(cu, num_seqs, P, tp->counts, tp->ranges, &tp->lib);
        break;
    }
    if (st != CAKE_SUCCESS) {
        tu_report("creating a %s partition (P=%d, T=%" PRId64 ") failed: %s", tu_kind_name[kind], P,
                  T, cake_last_error());
        tp->lib = NULL;
        tu_partition_free(tp);
    }
    return st;
}

cake_status tu_partition_make(tu_partition *tp, tu_rng *r, tu_kind kind, int P, const int64_t *cu,
                              int64_t num_seqs, int64_t max_chunk) {
    memset(tp, 0, sizeof *tp);
    tp->kind = kind;
    tp->P = P;
    tp->T = cu[num_seqs];
    int64_t T = tp->T;
    tp->counts = tu_malloc((size_t)P * sizeof *tp->counts);
    tp->first = tu_malloc((size_t)(P + 1) * sizeof *tp->first);
    switch (kind) {
    case TU_CONTIGUOUS: /* rank k: T / P rows, the first T % P ranks one more */
    case TU_BOUNDARIES: {
        int64_t *b = tu_malloc((size_t)(P + 1) * sizeof *b);
        b[0] = 0;
        b[P] = T;
        for (int k = 1; k < P; k++)
            b[k] = kind == TU_CONTIGUOUS ? b[k - 1] + T / P + (k - 1 < T % P) : tu_range(r, 0, T);
        sort_i64(b + 1, P - 1);
        tp->ranges = tu_malloc((size_t)P * sizeof *tp->ranges);
        for (int k = 0; k < P; k++) {
            tp->counts[k] = 1;
            tp->ranges[k] = (cake_range){b[k], b[k + 1]};
        }
        tp->boundaries = b;
        break;
    }
    case TU_ZIGZAG: { /* 2P chunks, the first T % 2P one row longer; rank k: chunks k, 2P-1-k */
        int64_t *cs = tu_malloc((size_t)(2 * P + 1) * sizeof *cs);
        cs[0] = 0;
        for (int c = 0; c < 2 * P; c++)
            cs[c + 1] = cs[c] + T / (2 * P) + (c < T % (2 * P));
        tp->ranges = tu_malloc((size_t)(2 * P) * sizeof *tp->ranges);
        for (int k = 0; k < P; k++) {
            tp->counts[k] = 2;
            tp->ranges[2 * k] = (cake_range){cs[k], cs[k + 1]};
            tp->ranges[2 * k + 1] = (cake_range){cs[2 * P - 1 - k], cs[2 * P - k]};
        }
        free(cs);
        break;
    }
    default:
        describe_ranges(tp, r, max_chunk);
        break;
    }
    return finish_partition(tp, cu, num_seqs);
}

cake_status tu_partition_explicit(tu_partition *tp, const int64_t *cu, int64_t num_seqs, int P,
                                  const int64_t *counts, const cake_range *ranges) {
    memset(tp, 0, sizeof *tp);
    tp->kind = TU_RANGES;
    tp->P = P;
    tp->T = cu[num_seqs];
    tp->counts = tu_malloc((size_t)P * sizeof *tp->counts);
    tp->first = tu_malloc((size_t)(P + 1) * sizeof *tp->first);
    int64_t nr = 0;
    for (int k = 0; k < P; k++)
        nr += tp->counts[k] = counts[k];
    tp->ranges = tu_malloc((size_t)nr * sizeof *tp->ranges);
    memcpy(tp->ranges, ranges, (size_t)nr * sizeof *ranges);
    return finish_partition(tp, cu, num_seqs);
}

void tu_partition_free(tu_partition *tp) {
    if (tp->l2g)
        for (int k = 0; k < tp->P; k++)
            free(tp->l2g[k]);
    free(tp->l2g);
    free(tp->local_rows);
    free(tp->counts);
    free(tp->first);
    free(tp->ranges);
    free(tp->boundaries);
    cake_partition_destroy(tp->lib);
    memset(tp, 0, sizeof *tp);
}

/* ---- per-rank runs --------------------------------------------------------------------------- */

void tu_gather(const cake_bf16 *global, int64_t C, const int64_t *l2g, int64_t S, cake_bf16 *out) {
    for (int64_t t = 0; t < S; t++)
        memcpy(out + t * C, global + l2g[t] * C, (size_t)C * sizeof *out);
}

int64_t tu_future_rows(int64_t pool_rows, cake_activation activation) {
    return activation == CAKE_ACTIVATION_NONE ? pool_rows : 2 * pool_rows;
}

cake_status tu_build_pools(const cake_plan *plan, const int64_t *cu, int64_t num_seqs,
                           const int64_t *seq_of, int64_t C, const cake_bf16 *x,
                           const cake_bf16 *dy, cake_bf16 *history, cake_bf16 *future) {
    return tu_build_pools_act(plan, cu, num_seqs, seq_of, C, x, dy, CAKE_ACTIVATION_NONE, history,
                              future);
}

cake_status tu_build_pools_act(const cake_plan *plan, const int64_t *cu, int64_t num_seqs,
                               const int64_t *seq_of, int64_t C, const cake_bf16 *x,
                               const cake_bf16 *dy, cake_activation activation,
                               cake_bf16 *history, cake_bf16 *future) {
    int64_t T = cu[num_seqs], nf = cake_plan_num_fragments(plan), rows = cake_plan_pool_rows(plan);
    if (rows < 3 * nf) {
        tu_report("pool_rows %" PRId64 " < 3 * num_fragments %" PRId64, rows, 3 * nf);
        return CAKE_ERROR_INTERNAL;
    }
    const int with_x = activation != CAKE_ACTIVATION_NONE;
    cake_bf16 *future_x = future && with_x ? future + rows * C : NULL; /* the x half */
    size_t bytes = (size_t)(rows * C) * sizeof(cake_bf16);
    if (history)
        memset(history, 0, bytes);
    if (future)
        memset(future, 0, with_x ? 2 * bytes : bytes);
    for (int64_t f = 0; f < nf; f++) {
        cake_fragment fr;
        cake_status st = cake_plan_fragment(plan, f, &fr);
        if (st != CAKE_SUCCESS)
            return st;
        if (fr.global_start < 0 || fr.length < 1 || fr.global_start + fr.length > T) {
            tu_report("fragment %" PRId64 " out of range", f);
            return CAKE_ERROR_INTERNAL;
        }
        int64_t q = seq_of[fr.global_start], s0 = cu[q], s1 = cu[q + 1];
        for (int64_t j = 0; j < CAKE_HALO_ROWS; j++) {
            int64_t hg = fr.global_start - CAKE_HALO_ROWS + j;
            int64_t fg = fr.global_start + fr.length + j;
            if (history && hg >= s0)
                memcpy(history + (3 * f + j) * C, x + hg * C, (size_t)C * sizeof *x);
            if (future && fg < s1)
                memcpy(future + (3 * f + j) * C, dy + fg * C, (size_t)C * sizeof *dy);
            if (future_x && fg < s1)
                memcpy(future_x + (3 * f + j) * C, x + fg * C, (size_t)C * sizeof *x);
        }
    }
    return CAKE_SUCCESS;
}

static const cake_bf16 OUT_SENTINEL = 0x5a5a; /* finite, never a plausible result */

static void alloc_outputs(tu_rank_out *o, const tu_problem *pb, int64_t S) {
    memset(o, 0, sizeof *o);
    o->n = pb->n;
    o->S = S;
    for (int i = 0; i < pb->n; i++) {
        int64_t e = S * pb->C[i];
        o->C[i] = pb->C[i];
        if (S > 0) {
            o->y[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
            o->dx[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
            for (int64_t k = 0; k < e; k++)
                o->y[i][k] = o->dx[i][k] = OUT_SENTINEL;
        }
        o->dw[i] = tu_malloc((size_t)pb->C[i] * 4 * sizeof(float));
        memset(o->dw[i], 0x5a, (size_t)pb->C[i] * 4 * sizeof(float));
        if (pb->with_bias) {
            o->dbias[i] = tu_malloc((size_t)pb->C[i] * sizeof(float));
            memset(o->dbias[i], 0x5a, (size_t)pb->C[i] * sizeof(float));
        }
    }
}

void tu_rank_out_free(tu_rank_out *o) {
    for (int i = 0; i < o->n; i++) {
        free(o->y[i]);
        free(o->dx[i]);
        free(o->dw[i]);
        free(o->dbias[i]);
    }
    memset(o, 0, sizeof *o);
}

cake_status tu_run_rank(const tu_problem *pb, const tu_partition *tp, int rank,
                        const cake_cpu_options *opt, int one_by_one, tu_rank_out *out) {
    int64_t S = tp->local_rows[rank];
    alloc_outputs(out, pb, S);
    cake_plan *plan = NULL;
    cake_status st = cake_plan_create(tp->lib, rank, &plan);
    if (st != CAKE_SUCCESS) {
        tu_report("cake_plan_create(rank %d): %s", rank, cake_last_error());
        return st;
    }
    if (cake_plan_local_rows(plan) != S) {
        tu_report("plan local rows %" PRId64 " != %" PRId64, cake_plan_local_rows(plan), S);
        cake_plan_destroy(plan);
        return CAKE_ERROR_INTERNAL;
    }
    int64_t pool = cake_plan_pool_rows(plan), *seq_of = tu_seq_of_rows(pb->cu, pb->num_seqs);
    int64_t fut_rows = tu_future_rows(pool, pb->activation);
    const cake_bf16 *x[TU_MAX_TENSORS] = {0}, *dy[TU_MAX_TENSORS] = {0};
    const cake_bf16 *hist[TU_MAX_TENSORS] = {0}, *fut[TU_MAX_TENSORS] = {0};
    const float *w[TU_MAX_TENSORS];
    for (int i = 0; i < pb->n && st == CAKE_SUCCESS; i++) {
        int64_t C = pb->C[i];
        w[i] = pb->w[i];
        if (S > 0) {
            cake_bf16 *xl = tu_malloc((size_t)(S * C) * sizeof *xl);
            cake_bf16 *dyl = tu_malloc((size_t)(S * C) * sizeof *dyl);
            tu_gather(pb->x[i], C, tp->l2g[rank], S, xl);
            tu_gather(pb->dy[i], C, tp->l2g[rank], S, dyl);
            x[i] = xl;
            dy[i] = dyl;
        }
        if (pool > 0) {
            cake_bf16 *h = tu_malloc((size_t)(pool * C) * sizeof *h);
            cake_bf16 *f = tu_malloc((size_t)(fut_rows * C) * sizeof *f);
            st = tu_build_pools_act(plan, pb->cu, pb->num_seqs, seq_of, C, pb->x[i], pb->dy[i],
                                    pb->activation, h, f);
            hist[i] = h;
            fut[i] = f;
        }
    }
    for (int i = 0; i < pb->n && st == CAKE_SUCCESS; i += one_by_one ? 1 : pb->n) {
        int k = one_by_one ? 1 : pb->n;
        tu_params fp, bp;
        /* one by one, the forward gets parameters without dbias; the multi call passes the
         * backward's struct to both (a forward ignores dbias) */
        const cake_conv_params *fwd = tu_params_of(&fp, pb, i, k, one_by_one ? NULL : out->dbias);
        const cake_conv_params *bwd = tu_params_of(&bp, pb, i, k, out->dbias);
        st = cake_cpu_forward(plan, k, pb->C + i, x + i, w + i, fwd, hist + i, out->y + i, opt);
        if (st == CAKE_SUCCESS)
            st = cake_cpu_backward(plan, k, pb->C + i, x + i, w + i, bwd, hist + i, dy + i,
                                   fut + i, out->dx + i, out->dw + i, opt);
        if (st != CAKE_SUCCESS)
            tu_report("rank %d: forward/backward failed: %s", rank, cake_last_error());
    }
    for (int i = 0; i < pb->n; i++) {
        free((void *)x[i]);
        free((void *)dy[i]);
        free((void *)hist[i]);
        free((void *)fut[i]);
    }
    free(seq_of);
    cake_plan_destroy(plan);
    return st;
}

cake_status tu_run_single(const tu_problem *pb, const cake_cpu_options *opt, tu_rank_out *out) {
    alloc_outputs(out, pb, pb->T);
    const cake_bf16 *x[TU_MAX_TENSORS], *dy[TU_MAX_TENSORS];
    const float *w[TU_MAX_TENSORS];
    for (int i = 0; i < pb->n; i++) {
        x[i] = pb->T ? pb->x[i] : NULL;
        dy[i] = pb->T ? pb->dy[i] : NULL;
        w[i] = pb->w[i];
    }
    tu_params fp, bp;
    const cake_conv_params *fwd = tu_params_of(&fp, pb, 0, pb->n, NULL);
    const cake_conv_params *bwd = tu_params_of(&bp, pb, 0, pb->n, out->dbias);
    cake_status st =
        cake_cpu_forward_single_rank(pb->cu, pb->num_seqs, pb->n, pb->C, x, w, fwd, out->y, opt);
    if (st == CAKE_SUCCESS)
        st = cake_cpu_backward_single_rank(pb->cu, pb->num_seqs, pb->n, pb->C, x, w, bwd, dy,
                                           out->dx, out->dw, opt);
    if (st != CAKE_SUCCESS)
        tu_report("single-rank forward/backward failed: %s", cake_last_error());
    return st;
}

/* ---- messages -------------------------------------------------------------------------------- */

static int ident_char(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

int tu_msg_names(const char *msg, const char *name) {
    size_t n = strlen(name);
    for (const char *p = strstr(msg, name); p; p = strstr(p + 1, name)) {
        int before_ok = p == msg || !ident_char(p[-1]);
        int after_ok = !ident_char(name[n - 1]) || !ident_char(p[n]);
        if (before_ok && after_ok)
            return 1;
    }
    return 0;
}

int tu_msg_has_number(const char *msg, int64_t v) {
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, v);
    size_t n = strlen(num);
    for (const char *p = strstr(msg, num); p; p = strstr(p + 1, num)) {
        int before_ok = p == msg || (!isdigit((unsigned char)p[-1]) && (v < 0 || p[-1] != '-'));
        if (before_ok && !isdigit((unsigned char)p[n]))
            return 1;
    }
    return 0;
}

int tu_msg_has_null(const char *msg) {
    return strstr(msg, "NULL") != NULL || strstr(msg, "null") != NULL;
}

void tu_expect_invalid(cake_status st, const char *call, const char *name, int what,
                       int64_t value) {
    const char *msg = cake_last_error();
    TU_CHECK(st == CAKE_ERROR_INVALID_ARGUMENT, "%s: status %s, want invalid argument; message \"%s\"",
             call, cake_status_string(st), msg ? msg : "(NULL)");
    TU_CHECK(msg != NULL && tu_msg_names(msg, name), "%s: message \"%s\" does not name %s", call,
             msg ? msg : "(NULL)", name);
    if (what == TU_VALUE)
        TU_CHECK(tu_msg_has_number(msg, value), "%s: message \"%s\" does not give the value %" PRId64,
                 call, msg, value);
    if (what == TU_NULL)
        TU_CHECK(tu_msg_has_null(msg), "%s: message \"%s\" does not say NULL", call, msg);
}

/* ---- reference comparisons ------------------------------------------------------------------- */

void tu_ref_compute(tu_ref *ref, const tu_problem *pb) {
    memset(ref, 0, sizeof *ref);
    ref->n = pb->n;
    for (int i = 0; i < pb->n; i++) {
        size_t bytes = (size_t)(pb->T * pb->C[i]) * sizeof(cake_bf16);
        ref_params rp;
        tu_ref_params(pb, i, &rp);
        ref->y[i] = tu_malloc(bytes);
        ref->dx[i] = tu_malloc(bytes);
        ref->g[i] = tu_malloc((size_t)(pb->T * pb->C[i]) * sizeof(float));
        ref_forward_p(pb->cu, pb->num_seqs, pb->C[i], pb->x[i], pb->w[i], &rp, ref->y[i]);
        ref_grad_input(pb->cu, pb->num_seqs, pb->C[i], pb->x[i], pb->w[i], &rp, pb->dy[i],
                       ref->g[i]);
        ref_dx_from_g(pb->cu, pb->num_seqs, pb->C[i], pb->w[i], ref->g[i], ref->dx[i]);
    }
}

void tu_ref_compute_rows(tu_ref *ref, const tu_problem *pb, const int64_t *l2g, int64_t S) {
    memset(ref, 0, sizeof *ref);
    ref->n = pb->n;
    for (int i = 0; i < pb->n; i++) {
        const int64_t e = pb->T * pb->C[i];
        ref_params rp;
        tu_ref_params(pb, i, &rp);
        ref->y[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
        ref->dx[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
        ref->g[i] = tu_malloc((size_t)e * sizeof(float));
        memset(ref->y[i], 0, (size_t)e * sizeof(cake_bf16));
        memset(ref->dx[i], 0, (size_t)e * sizeof(cake_bf16));
        for (int64_t k = 0; k < e; k++)
            ref->g[i][k] = NAN;
        ref_rows_p(pb->cu, pb->num_seqs, pb->C[i], pb->x[i], pb->w[i], &rp, pb->dy[i], l2g, S,
                   ref->y[i], ref->dx[i], ref->g[i]);
    }
}

void tu_ref_free(tu_ref *ref) {
    for (int i = 0; i < ref->n; i++) {
        free(ref->y[i]);
        free(ref->dx[i]);
        free(ref->g[i]);
    }
    memset(ref, 0, sizeof *ref);
}

int tu_check_rank(const char *label, const tu_problem *pb, const tu_ref *ref, const int64_t *l2g,
                  const tu_rank_out *o, int flags) {
    int bad = 0;
    char what[160];
    if (flags != 0) {
        tu_report("%s: tu_check_rank flags %d: only 0 (bitwise) exists", label, flags);
        return 1;
    }
    for (int i = 0; i < pb->n; i++) {
        int64_t C = pb->C[i], S = o->S;
        cake_bf16 *want = tu_malloc((size_t)(S * C) * sizeof *want);
        float *wdw = tu_malloc((size_t)C * 4 * sizeof *wdw);
        float *wdb = tu_malloc((size_t)C * sizeof *wdb);
        const char *v = tu_variant_name[tu_problem_variant(pb)];
        if (S > 0) {
            tu_gather(ref->y[i], C, l2g, S, want);
            snprintf(what, sizeof what, "%s: y[%d] (%s, C=%" PRId64 ", local rows)", label, i, v,
                     C);
            bad += diff_bf16(what, o->y[i], want, S, C);
            tu_gather(ref->dx[i], C, l2g, S, want);
            snprintf(what, sizeof what, "%s: dx[%d] (%s, C=%" PRId64 ", local rows)", label, i, v,
                     C);
            bad += diff_bf16(what, o->dx[i], want, S, C);
        }
        ref_grads_from_g(pb->cu, pb->num_seqs, C, pb->x[i], ref->g[i], l2g, S, wdw,
                         pb->with_bias ? wdb : NULL);
        snprintf(what, sizeof what, "%s: dw[%d] (%s, C=%" PRId64 ", rows: channels, cols: taps)",
                 label, i, v, C);
        bad += diff_f32(what, o->dw[i], wdw, C, 4);
        if (pb->with_bias) {
            snprintf(what, sizeof what, "%s: dbias[%d] (%s, C=%" PRId64 ")", label, i, v, C);
            if (!o->dbias[i]) {
                tu_report("%s: no dbias output", what);
                bad++;
            } else {
                bad += diff_f32(what, o->dbias[i], wdb, 1, C);
            }
        }
        free(want);
        free(wdw);
        free(wdb);
    }
    return bad;
}

int tu_compare_outs(const char *label, const tu_rank_out *a, const tu_rank_out *b) {
    int bad = 0;
    char what[160];
    for (int i = 0; i < a->n; i++) {
        snprintf(what, sizeof what, "%s: y[%d]", label, i);
        bad += diff_bf16(what, a->y[i], b->y[i], a->S, a->C[i]);
        snprintf(what, sizeof what, "%s: dx[%d]", label, i);
        bad += diff_bf16(what, a->dx[i], b->dx[i], a->S, a->C[i]);
        snprintf(what, sizeof what, "%s: dw[%d]", label, i);
        bad += diff_f32(what, a->dw[i], b->dw[i], a->C[i], 4);
        if (!a->dbias[i] != !b->dbias[i]) {
            tu_report("%s: dbias[%d] present in one run only", label, i);
            bad++;
        } else if (a->dbias[i]) {
            snprintf(what, sizeof what, "%s: dbias[%d]", label, i);
            bad += diff_f32(what, a->dbias[i], b->dbias[i], 1, a->C[i]);
        }
    }
    return bad;
}
