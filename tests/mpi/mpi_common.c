/* Shared pieces of the multi-rank tests (see mpi_common.h). */
#include "mpi_common.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mc_rank, mc_size;
uint64_t mc_seed;

static const char *g_program = "";
static long g_failures;

/* ---- run and failure accounting --------------------------------------------------------- */

void mc_init(int *argc, char ***argv, const char *program)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &mc_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mc_size);
    g_program = program;
    /* Rank 0 reads (and prints) the seed once; every rank then uses exactly its value. */
    if (mc_rank == 0)
        mc_seed = tu_seed();
    MPI_Bcast(&mc_seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    mc_case("%s: start", program);
}

int mc_finish(void)
{
    long total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (mc_rank == 0) {
        if (total)
            printf("[cake-mpi] %s, %d ranks: %ld failed checks (seed 0x%016" PRIx64 ")\n",
                   g_program, mc_size, total, mc_seed);
        else
            printf("[cake-mpi] %s, %d ranks: all checks passed\n", g_program, mc_size);
        fflush(stdout);
    }
    MPI_Finalize();
    return total ? 1 : 0;
}

void mc_case(const char *fmt, ...)
{
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tu_set_ctx("%s, rank %d of %d: %s", g_program, mc_rank, mc_size, buf);
}

void mc_fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tu_report("%s", buf);
    g_failures++;
}

void mc_count(int bad)
{
    g_failures += bad;
}

int mc_ok(cake_status st, const char *call)
{
    if (st == CAKE_SUCCESS)
        return 1;
    mc_fail("%s -> %s: %s", call, cake_status_string(st), cake_last_error());
    return 0;
}

int mc_all(int ok)
{
    int all = 0;
    ok = ok != 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

/* ---- inputs ------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t z) /* splitmix64 finaliser */
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t hash4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = mix(seed ^ UINT64_C(0x9e3779b97f4a7c15));
    h = mix(h ^ a);
    h = mix(h ^ b);
    return mix(h ^ c);
}

cake_bf16 mc_value(uint64_t seed, int tensor, int which, int64_t g, int64_t c)
{
    uint64_t h = hash4(seed, (uint64_t)tensor * 2 + (uint64_t)which, (uint64_t)g, (uint64_t)c);
    uint16_t sign = (uint16_t)((h >> 8) & 1) << 15;
    unsigned u = (unsigned)(h % 100);
    if (u < 4)
        return sign; /* +0.0 or -0.0 */
    if (u < 7)
        return (cake_bf16)(sign | (uint16_t)(1 + (h >> 16) % 0x7f)); /* subnormal */
    uint16_t exp = (uint16_t)(127 - 20 + (h >> 24) % 41);
    return (cake_bf16)(sign | (uint16_t)(exp << 7) | (uint16_t)((h >> 40) & 0x7f));
}

float mc_weight(uint64_t seed, int tensor, int64_t c, int k)
{
    uint64_t h = hash4(seed ^ UINT64_C(0x5745494748545321), (uint64_t)tensor, (uint64_t)c,
                       (uint64_t)k);
    uint32_t sign = (uint32_t)((h >> 8) & 1) << 31, bits;
    if (h % 100 < 3)
        bits = sign;
    else
        bits = sign | ((uint32_t)(127 - 8 + (h >> 16) % 12) << 23) |
               (uint32_t)((h >> 32) & 0x7fffff);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void mc_fill_rows(uint64_t seed, int tensor, int which, int64_t C, const int64_t *l2g, int64_t S,
                  cake_bf16 *out)
{
    for (int64_t t = 0; t < S; t++) {
        int64_t g = l2g ? l2g[t] : t;
        for (int64_t c = 0; c < C; c++)
            out[t * C + c] = mc_value(seed, tensor, which, g, c);
    }
}

/* ---- trials ------------------------------------------------------------------------------- */

const char *const mc_part_name[MC_PART_COUNT] = {
    "contiguous", "boundaries", "zigzag", "ranges", "round-robin", "empty-ranks", "seq-aligned"};
static const char *const seqs_name[MC_SEQS_COUNT] = {"random", "one spanning", "tiny", "T < P"};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t make_cu(tu_rng *r, mc_seqs shape, int P, int64_t max_T, int64_t **cu)
{
    int64_t n, *c;
    switch (shape) {
    case MC_SEQS_ONE: { /* one sequence over P .. max_T rows, sometimes between empty ones */
        int64_t T = tu_range(r, P, max_T > P ? max_T : P);
        int pad = (int)tu_range(r, 0, 1);
        n = 1 + 2 * pad;
        c = tu_malloc((size_t)(n + 1) * sizeof *c);
        c[0] = 0;
        for (int64_t i = 1; i <= n; i++)
            c[i] = (pad && i == 1) ? 0 : T;
        break;
    }
    case MC_SEQS_TINY: {
        n = tu_range(r, 1, min64(400, max_T / 2 + 1));
        c = tu_malloc((size_t)(n + 1) * sizeof *c);
        c[0] = 0;
        for (int64_t i = 0; i < n; i++)
            c[i + 1] = c[i] + tu_range(r, 0, 3);
        break;
    }
    case MC_SEQS_FEW_ROWS: { /* T < P: some ranks must be empty under every partition */
        int64_t T = tu_range(r, 0, P - 1);
        n = tu_range(r, 1, 3);
        c = tu_malloc((size_t)(n + 1) * sizeof *c);
        c[0] = 0;
        for (int64_t i = 1; i < n; i++)
            c[i] = tu_range(r, c[i - 1], T);
        c[n] = T;
        break;
    }
    default: {
        int64_t max_seqs = tu_range(r, 1, 24);
        int64_t max_len = 1 + 3 * max_T / max_seqs;
        n = tu_random_cu(r, max_seqs, tu_range(r, 1, max_len), &c);
        for (int64_t i = 0; i <= n; i++) /* keep T <= max_T */
            c[i] = min64(c[i], max_T);
        break;
    }
    }
    *cu = c;
    return n;
}

/* A TU_RANGES description handed to tu_partition_explicit. */
typedef struct desc {
    int64_t *counts;
    cake_range *ranges;
    int64_t nr;
} desc;

static void desc_init(desc *d, int P, int64_t cap)
{
    d->counts = tu_malloc((size_t)P * sizeof *d->counts);
    memset(d->counts, 0, (size_t)P * sizeof *d->counts);
    d->ranges = tu_malloc((size_t)(cap > 0 ? cap : 1) * sizeof *d->ranges);
    d->nr = 0;
}

static void desc_add(desc *d, int rank, int64_t start, int64_t end)
{
    d->ranges[d->nr++] = (cake_range){start, end};
    d->counts[rank]++;
}

static void desc_free(desc *d)
{
    free(d->counts);
    free(d->ranges);
}

/* Rank k holds [b[k], b[k+1]); an empty rank gets no range or one empty range. */
static void desc_contiguous(desc *d, tu_rng *r, int P, const int64_t *b)
{
    desc_init(d, P, P);
    for (int k = 0; k < P; k++)
        if (b[k + 1] > b[k] || tu_range(r, 0, 1))
            desc_add(d, k, b[k], b[k + 1]);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static cake_status make_partition(mc_trial *t, tu_rng *r, int P, char *detail, size_t size)
{
    int64_t T = t->T;
    detail[0] = '\0';
    switch (t->part) {
    case MC_CONTIGUOUS:
        return tu_partition_make(&t->tp, r, TU_CONTIGUOUS, P, t->cu, t->num_seqs, 1);
    case MC_BOUNDARIES:
        return tu_partition_make(&t->tp, r, TU_BOUNDARIES, P, t->cu, t->num_seqs, 1);
    case MC_ZIGZAG:
        return tu_partition_make(&t->tp, r, TU_ZIGZAG, P, t->cu, t->num_seqs, 1);
    case MC_RANGES: {
        static const int64_t chunks[] = {1, 2, 3, 4, 16, 256};
        int64_t max_chunk = chunks[tu_range(r, 0, 5)];
        snprintf(detail, size, " (chunks of 1..%" PRId64 ")", max_chunk);
        return tu_partition_make(&t->tp, r, TU_RANGES, P, t->cu, t->num_seqs, max_chunk);
    }
    default:
        break;
    }
    desc d;
    if (t->part == MC_ROUND_ROBIN) { /* chunk j of `len` rows goes to rank j % P */
        int64_t len = tu_range(r, 1, 2);
        snprintf(detail, size, " (chunks of %" PRId64 ")", len);
        desc_init(&d, P, T / len + 1);
        for (int k = 0; k < P; k++)
            for (int64_t s = k * len; s < T; s += (int64_t)P * len)
                desc_add(&d, k, s, min64(s + len, T));
    } else {
        int64_t *b = tu_malloc((size_t)(P + 1) * sizeof *b);
        b[0] = 0;
        b[P] = T;
        if (t->part == MC_EMPTY_RANKS) { /* cuts only after active ranks; >= 1 rank active */
            int *active = tu_malloc((size_t)P * sizeof *active), any = 0, count = 0;
            for (int k = 0; k < P; k++)
                any |= active[k] = (int)tu_range(r, 0, 1);
            if (!any)
                active[tu_range(r, 0, P - 1)] = 1;
            for (int k = 0; k < P; k++)
                count += active[k];
            snprintf(detail, size, " (%d of %d ranks hold rows)", count, P);
            int64_t *cuts = tu_malloc((size_t)(count + 1) * sizeof *cuts);
            for (int i = 0; i < count; i++)
                cuts[i] = tu_range(r, 0, T);
            qsort(cuts, (size_t)count, sizeof *cuts, cmp_i64);
            cuts[0] = 0;
            /* Active rank number i holds [cuts[i], cuts[i+1]), the last one up to T. */
            int i = 0;
            for (int k = 0; k < P; k++) {
                b[k] = i < count ? cuts[i] : T;
                i += active[k];
            }
            free(active);
            free(cuts);
        } else { /* MC_SEQ_ALIGNED: every cut at some cu_seqlens entry */
            for (int k = 1; k < P; k++)
                b[k] = t->cu[tu_range(r, 0, t->num_seqs)];
            qsort(b + 1, (size_t)(P - 1), sizeof *b, cmp_i64);
        }
        desc_contiguous(&d, r, P, b);
        free(b);
    }
    cake_status st = tu_partition_explicit(&t->tp, t->cu, t->num_seqs, P, d.counts, d.ranges);
    t->tp.kind = TU_RANGES;
    desc_free(&d);
    return st;
}

int mc_trial_make(mc_trial *t, uint64_t stream, int index, int P, int part, int64_t max_T,
                  int64_t max_c)
{
    memset(t, 0, sizeof *t);
    tu_rng r = {mc_seed ^ (stream * UINT64_C(0xd1342543de82ef95)) ^
                ((uint64_t)index * UINT64_C(0x2545f4914f6cdd1d)) ^ ((uint64_t)P << 56)};
    (void)tu_next(&r);
    t->seed = tu_next(&r);
    t->part = part >= 0 ? (mc_part)part : (mc_part)(index % MC_PART_COUNT);
    /* Mostly small batches (cheap, many edge cases), now and then up to max_T rows. */
    if (tu_range(&r, 0, 2) != 0)
        max_T = min64(max_T, 200);
    int64_t u = tu_range(&r, 0, 99);
    mc_seqs shape = u < 50   ? MC_SEQS_RANDOM
                    : u < 70 ? MC_SEQS_ONE
                    : u < 85 ? MC_SEQS_TINY
                             : MC_SEQS_FEW_ROWS;
    t->num_seqs = make_cu(&r, shape, P, max_T, &t->cu);
    t->T = t->cu[t->num_seqs];
    t->n = (int)tu_range(&r, 1, 4);
    tu_random_channels(&r, t->n, max_c, t->C);
    if (tu_range(&r, 0, 2) == 0)
        t->C[0] = 8;
    /* Keep the whole problem small: every rank builds the global reference. */
    for (int i = 0; i < t->n; i++)
        while (t->C[i] > 8 && t->T * t->C[i] > 200000)
            t->C[i] = (t->C[i] / 16) * 8;
    char detail[96];
    cake_status st = make_partition(t, &r, P, detail, sizeof detail);
    int len = snprintf(t->desc, sizeof t->desc,
                       "trial %d: %s%s partition; sequences: %s, %" PRId64 " of them, T = %" PRId64
                       "; n = %d, C =",
                       index, mc_part_name[t->part], detail, seqs_name[shape], t->num_seqs, t->T,
                       t->n);
    for (int i = 0; i < t->n && len > 0 && (size_t)len < sizeof t->desc; i++)
        len += snprintf(t->desc + len, sizeof t->desc - (size_t)len, " %" PRId64, t->C[i]);
    mc_case("%s", t->desc);
    const char *verbose = getenv("CAKE_MPI_VERBOSE");
    if (verbose && *verbose == '1' && mc_rank == 0)
        printf("[cake-mpi] %s\n", t->desc);
    if (st != CAKE_SUCCESS) {
        mc_fail("the library refused the partition: %s", cake_last_error());
        free(t->cu);
        t->cu = NULL;
        return -1;
    }
    return 0;
}

void mc_trial_free(mc_trial *t)
{
    if (t->cu)
        tu_partition_free(&t->tp);
    free(t->cu);
    memset(t, 0, sizeof *t);
}

void mc_trial_problem(const mc_trial *t, tu_problem *pb)
{
    memset(pb, 0, sizeof *pb);
    pb->cu = t->cu;
    pb->num_seqs = t->num_seqs;
    pb->T = t->T;
    pb->n = t->n;
    for (int i = 0; i < t->n; i++) {
        int64_t C = t->C[i];
        pb->C[i] = C;
        pb->x[i] = tu_malloc((size_t)(t->T * C) * sizeof(cake_bf16));
        pb->dy[i] = tu_malloc((size_t)(t->T * C) * sizeof(cake_bf16));
        pb->w[i] = tu_malloc((size_t)(4 * C) * sizeof(float));
        mc_fill_rows(t->seed, i, MC_X, C, NULL, t->T, pb->x[i]);
        mc_fill_rows(t->seed, i, MC_DY, C, NULL, t->T, pb->dy[i]);
        for (int64_t c = 0; c < C; c++)
            for (int k = 0; k < 4; k++)
                pb->w[i][4 * c + k] = mc_weight(t->seed, i, c, k);
    }
}

/* ---- one rank's buffers ------------------------------------------------------------------- */

#define SENTINEL_BF16 ((cake_bf16)0x5a5a) /* ~1.5e16: far beyond any output of these inputs */
#define SENTINEL_BYTE 0x5a

void mc_local_init(mc_local *L, const mc_trial *t, int rank, int64_t pool)
{
    memset(L, 0, sizeof *L);
    L->n = t->n;
    L->S = t->tp.local_rows[rank];
    L->pool = pool;
    for (int i = 0; i < t->n; i++) {
        int64_t C = t->C[i], e = L->S * C;
        L->C[i] = C;
        if (L->S > 0) {
            L->x[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
            L->dy[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
            L->y[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
            L->dx[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
            mc_fill_rows(t->seed, i, MC_X, C, t->tp.l2g[rank], L->S, L->x[i]);
            mc_fill_rows(t->seed, i, MC_DY, C, t->tp.l2g[rank], L->S, L->dy[i]);
        }
        if (pool > 0)
            L->hist[i] = tu_malloc((size_t)(pool * C) * sizeof(cake_bf16));
        L->w[i] = tu_malloc((size_t)(4 * C) * sizeof(float));
        L->dw[i] = tu_malloc((size_t)(4 * C) * sizeof(float));
        for (int64_t c = 0; c < C; c++)
            for (int k = 0; k < 4; k++)
                L->w[i][4 * c + k] = mc_weight(t->seed, i, c, k);
    }
    mc_local_poison(L);
}

static void fill16(cake_bf16 *a, int64_t n)
{
    for (int64_t k = 0; a && k < n; k++)
        a[k] = SENTINEL_BF16;
}

static int is16(const cake_bf16 *a, int64_t n)
{
    for (int64_t k = 0; a && k < n; k++)
        if (a[k] != SENTINEL_BF16)
            return 0;
    return 1;
}

void mc_local_poison(mc_local *L)
{
    for (int i = 0; i < L->n; i++) {
        fill16(L->y[i], L->S * L->C[i]);
        fill16(L->dx[i], L->S * L->C[i]);
        fill16(L->hist[i], L->pool * L->C[i]);
        memset(L->dw[i], SENTINEL_BYTE, (size_t)(4 * L->C[i]) * sizeof(float));
    }
}

int mc_local_untouched(const mc_local *L)
{
    for (int i = 0; i < L->n; i++) {
        if (!is16(L->y[i], L->S * L->C[i]) || !is16(L->dx[i], L->S * L->C[i]) ||
            !is16(L->hist[i], L->pool * L->C[i]))
            return 0;
        const unsigned char *b = (const unsigned char *)L->dw[i];
        for (size_t k = 0; k < (size_t)(4 * L->C[i]) * sizeof(float); k++)
            if (b[k] != SENTINEL_BYTE)
                return 0;
    }
    return 1;
}

void mc_local_free(mc_local *L)
{
    for (int i = 0; i < L->n; i++) {
        free(L->x[i]);
        free(L->dy[i]);
        free(L->w[i]);
        free(L->y[i]);
        free(L->dx[i]);
        free(L->hist[i]);
        free(L->dw[i]);
    }
    memset(L, 0, sizeof *L);
}

int mc_local_diff(const char *label, const mc_local *got, const mc_local *want, int with_hist,
                  int with_backward)
{
    int bad = 0;
    char what[160];
    for (int i = 0; i < got->n; i++) {
        int64_t C = got->C[i];
        snprintf(what, sizeof what, "%s: y[%d] (C = %" PRId64 ")", label, i, C);
        bad += tu_diff_bf16(what, got->y[i], want->y[i], got->S, C);
        if (with_hist) {
            snprintf(what, sizeof what, "%s: history[%d] (C = %" PRId64 ")", label, i, C);
            bad += tu_diff_bf16(what, got->hist[i], want->hist[i], got->pool, C);
        }
        if (with_backward) {
            snprintf(what, sizeof what, "%s: dx[%d] (C = %" PRId64 ")", label, i, C);
            bad += tu_diff_bf16(what, got->dx[i], want->dx[i], got->S, C);
            snprintf(what, sizeof what, "%s: dw[%d] (C = %" PRId64 ")", label, i, C);
            bad += tu_diff_f32(what, got->dw[i], want->dw[i], C, 4);
        }
    }
    return bad;
}

tu_rank_out mc_local_as_out(const mc_local *L)
{
    tu_rank_out o;
    memset(&o, 0, sizeof o);
    o.n = L->n;
    o.S = L->S;
    for (int i = 0; i < L->n; i++) {
        o.C[i] = L->C[i];
        o.y[i] = L->y[i];
        o.dx[i] = L->dx[i];
        o.dw[i] = L->dw[i];
    }
    return o;
}
