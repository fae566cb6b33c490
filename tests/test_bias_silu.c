/* Bias, SiLU and canonical NaN on the CPU (SPEC 3): every variant (no bias / bias x none / SiLU)
 * bitwise against the independent reference on every rank of partitions of every shape, values
 * worked by hand for the bias and the dbias tree, what a bias without activation may and may not
 * change, the parameter forms (NULL, zero struct, a forward given dbias), channel counts past the
 * CPU's channel strips, run-to-run repeats, and NaN in several operands at once (x, w, bias and
 * dy in the same rows) giving exactly the canonical NaN on every ISA path and thread count,
 * infinities kept. The activation's own error bound is tests/test_activation.c's; here y is held
 * to the reference's ref_silu bit for bit. */
#include "test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activation.h" /* cake_silu_quick_, to pick biases it would round wrongly */
#include "bf16.h"       /* cake_f32_to_bf16, to compare the two roundings */
#include "reference.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int64_t *iota_rows(int64_t T) {
    int64_t *l2g = tu_malloc((size_t)T * sizeof *l2g);
    for (int64_t t = 0; t < T; t++)
        l2g[t] = t;
    return l2g;
}

/* Every rank of tp against the reference, the single-rank entry points against it too, and the
 * single-rank run against each rank's rows (y, dx: partition invariance; everything, dw and dbias
 * too, for a rank that holds the whole batch in order). Returns the number of mismatching
 * arrays. */
static int check_all(const tu_problem *pb, const tu_partition *tp, const cake_cpu_options *opt) {
    int bad = 0;
    tu_ref ref;
    tu_ref_compute(&ref, pb);
    int64_t *l2g = iota_rows(pb->T);
    tu_rank_out whole;
    TU_OK(tu_run_single(pb, opt, &whole));
    bad += tu_check_rank("single rank", pb, &ref, l2g, &whole, 0);
    for (int k = 0; tp && k < tp->P; k++) {
        tu_rank_out o;
        char label[80];
        snprintf(label, sizeof label, "rank %d of %d (S_local %" PRId64 ")", k, tp->P,
                 tp->local_rows[k]);
        TU_OK(tu_run_rank(pb, tp, k, opt, 0, &o));
        bad += tu_check_rank(label, pb, &ref, tp->l2g[k], &o, 0);
        for (int i = 0; i < pb->n; i++) { /* y and dx: the rows of the P = 1 run */
            const int64_t C = pb->C[i], S = o.S;
            cake_bf16 *want = tu_malloc((size_t)(S * C) * sizeof *want);
            tu_gather(whole.y[i], C, tp->l2g[k], S, want);
            bad += tu_diff_bf16("y vs the single-rank run", o.y[i], want, S, C);
            tu_gather(whole.dx[i], C, tp->l2g[k], S, want);
            bad += tu_diff_bf16("dx vs the single-rank run", o.dx[i], want, S, C);
            free(want);
        }
        int whole_batch = o.S == pb->T; /* the rank holds every row in global order: P = 1 */
        for (int64_t t = 0; whole_batch && t < o.S; t++)
            whole_batch = tp->l2g[k][t] == t;
        if (whole_batch)
            bad += tu_compare_outs("a rank of the whole batch vs the single-rank run", &o, &whole);
        tu_rank_out_free(&o);
    }
    tu_rank_out_free(&whole);
    free(l2g);
    tu_ref_free(&ref);
    return bad;
}

/* ---- hand-worked values ---------------------------------------------------------------------- */

/* One sequence x = 1..5, w = {8, 4, 2, 1}: acc = {1, 4, 11, 26, 41} exactly (test_conv_reference's
 * hand taps). With a bias y = bf16(acc + bias[c]) (one fp32 add, then one rounding); without an
 * activation dx and dw are those of the plain op and dbias[c] = sum dy = 15. Channels: 0.5
 * (exact), -41 (row 4 gives +0.0), -0.0 (acc unchanged), 2^-8 (1 + 2^-8 is exact in fp32 and
 * ties to even in bf16: 1.0), 2^-12 (kept by the fp32 add, lost in the bf16 rounding), -100,
 * 1e30 (y = bf16(1e30)), and NaN (every y of the channel 0x7FC0; dbias is a sum of dy and stays
 * finite). */
static void test_hand_bias(void **state) {
    (void)state;
    tu_set_ctx("hand bias");
    enum { T = 5, C = 8 };
    const int64_t cu[] = {0, T}, ch[] = {C};
    const float acc[T] = {1, 4, 11, 26, 41};
    const float bias[C] = {0.5f, -41.0f, -0.0f, 0x1p-8f, 0x1p-12f, -100.0f, 1e30f, NAN};
    cake_bf16 x[T * C], y[T * C], ry[T * C], dx[T * C], pdx[T * C];
    float w[C * 4], dw[C * 4], pdw[C * 4], db[C];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            x[t * C + c] = ref_f32_to_bf16((float)(t + 1));
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 4; k++)
            w[c * 4 + k] = (float)(8 >> k);
    const cake_bf16 *xs[] = {x};
    const float *ws[] = {w}, *bs[] = {bias};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx}, *pdxs[] = {pdx};
    float *dws[] = {dw}, *pdws[] = {pdw}, *dbs[] = {db};
    const cake_conv_params prm = {CAKE_ACTIVATION_NONE, bs, dbs};
    TU_OK(cake_cpu_forward_single_rank(cu, 1, 1, ch, xs, ws, &prm, ys, NULL));
    TU_OK(cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, &prm, xs, dxs, dws, NULL));
    TU_OK(cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, NULL, xs, pdxs, pdws, NULL));
    const ref_params rp = {bias, REF_ACT_NONE};
    ref_forward_p(cu, 1, C, x, w, &rp, ry);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            const float sum = acc[t] + bias[c]; /* one fp32 add */
            const cake_bf16 want = ref_f32_to_bf16(sum);
            TU_CHECK(ry[t * C + c] == want, "reference y row %d col %d: 0x%04x, want 0x%04x", t,
                     c, ry[t * C + c], want);
            TU_CHECK(y[t * C + c] == want, "y row %d col %d: 0x%04x, want 0x%04x", t, c,
                     y[t * C + c], want);
        }
    /* the hand values themselves */
    TU_CHECK(y[0 * C + 0] == 0x3fc0 && y[4 * C + 1] == 0x0000 && y[3 * C + 2] == 0x41d0 &&
                 y[0 * C + 3] == 0x3f80 && y[3 * C + 4] == 0x41d0 && y[0 * C + 7] == 0x7fc0,
             "hand values: 0x%04x 0x%04x 0x%04x 0x%04x 0x%04x 0x%04x", y[0], y[4 * C + 1],
             y[3 * C + 2], y[3], y[3 * C + 4], y[7]);
    TU_CHECK(tu_diff_bf16("dx with bias vs plain", dx, pdx, T, C) == 0, "bias changed dx");
    TU_CHECK(tu_diff_f32("dw with bias vs plain", dw, pdw, C, 4) == 0, "bias changed dw");
    for (int c = 0; c < C; c++)
        TU_CHECK(db[c] == 15.0f, "dbias[%d] = %g, want 15 (sum of dy)", c, (double)db[c]);
}

/* dbias over 4 blocks, without an activation (g = dy): dy = 1 at local row 0, 2^-24 at rows 1, 2,
 * 256, 512 and 768, else 0. Block 0 in increasing rows: (1 + 2^-24) + 2^-24 = 1 (ties to even);
 * the tree: (p0 + p1) + (p2 + p3) = (1 + 2^-24) + 2^-23 = 1 + 2^-23 (0x3f800001). A
 * left-to-right sum gives 1 (0x3f800000); block 0 summed backwards gives 0x3f800003. */
static void test_hand_dbias_tree(void **state) {
    (void)state;
    enum { T = 1000, C = 8 };
    const int64_t cu[] = {0, T}, ch[] = {C};
    cake_bf16 *x = tu_malloc(T * C * sizeof *x), *dy = tu_malloc(T * C * sizeof *dy);
    cake_bf16 *dx = tu_malloc(T * C * sizeof *dx);
    int64_t *l2g = iota_rows(T);
    float w[C * 4], dw[C * 4], bias[C], db[C], rdw[C * 4], rdb[C];
    for (int64_t i = 0; i < T * C; i++) {
        const int64_t t = i / C;
        x[i] = 0x3f80;
        dy[i] = t == 0 ? 0x3f80
                : (t == 1 || t == 2 || t == 256 || t == 512 || t == 768) ? 0x3380 /* 2^-24 */
                                                                         : 0;
    }
    for (int i = 0; i < C * 4; i++)
        w[i] = 0.5f;
    for (int c = 0; c < C; c++)
        bias[c] = 0.25f * (float)(c - 3);
    const cake_bf16 *xs[] = {x}, *dys[] = {dy};
    const float *ws[] = {w}, *bs[] = {bias};
    cake_bf16 *dxs[] = {dx};
    float *dws[] = {dw}, *dbs[] = {db};
    for (int v = 1; v < TU_VARIANTS; v += 2) { /* bias, bias + SiLU */
        tu_set_ctx("hand dbias tree, %s", tu_variant_name[v]);
        const cake_conv_params prm = {tu_variant_activation(v), bs, dbs};
        const ref_params rp = {bias, tu_variant_activation(v) ? REF_ACT_SILU : REF_ACT_NONE};
        memset(db, 0x5a, sizeof db);
        TU_OK(cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, &prm, dys, dxs, dws, NULL));
        ref_grads_p(cu, 1, C, x, w, &rp, dy, l2g, T, rdw, rdb);
        TU_CHECK(tu_diff_f32("dbias vs reference", db, rdb, 1, C) == 0, "dbias");
        TU_CHECK(tu_diff_f32("dw vs reference", dw, rdw, C, 4) == 0, "dw");
        if (v == 1)
            for (int c = 0; c < C; c++) {
                uint32_t got, ref;
                memcpy(&got, &db[c], 4);
                memcpy(&ref, &rdb[c], 4);
                TU_CHECK(ref == 0x3f800001u, "reference dbias[%d] = 0x%08x, want 0x3f800001", c,
                         (unsigned)ref);
                TU_CHECK(got == 0x3f800001u, "dbias[%d] = 0x%08x, want 0x3f800001", c,
                         (unsigned)got);
            }
    }
    free(x);
    free(dy);
    free(dx);
    free(l2g);
}

/* ---- what a bias may change ------------------------------------------------------------------ */

/* Without an activation g = dy, so a bias changes y only: dx and dw equal the plain op's bitwise,
 * and dbias depends on dy and the rank's rows alone (the same for two different biases and other
 * weights). With SiLU the bias moves a, hence g: dbias and dw follow the reference. */
static void test_bias_changes_y_only(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 601);
    for (int trial = 0; trial < 24; trial++) {
        int64_t *cu, C[TU_MAX_TENSORS];
        const int64_t ns = tu_random_cu(&r, 8, trial % 3 ? 80 : 700, &cu);
        const int n = (int)tu_range(&r, 1, 3);
        tu_random_channels(&r, n, 48, C);
        tu_problem plain, biased, other;
        tu_problem_init(&plain, &r, TU_MODERATE, cu, ns, n, C);
        biased = plain; /* same x, dy, w; a bias of its own */
        for (int i = 0; i < n; i++)
            biased.bias[i] = NULL;
        tu_problem_set_params(&biased, &r, TU_MODERATE, 1, CAKE_ACTIVATION_NONE);
        other = biased; /* another bias and other weights */
        for (int i = 0; i < n; i++) {
            other.bias[i] = tu_malloc((size_t)C[i] * sizeof(float));
            other.w[i] = tu_malloc((size_t)C[i] * 4 * sizeof(float));
            tu_fill_weights(&r, TU_WIDE, other.bias[i], C[i]);
            tu_fill_weights(&r, TU_MODERATE, other.w[i], C[i] * 4);
        }
        tu_partition tp;
        const tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        tu_set_ctx("bias changes y only, trial %d: %s, T=%" PRId64, trial, tu_kind_name[kind],
                   plain.T);
        const int P = (int)tu_range(&r, 1, 5);
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, ns, tu_range(&r, 1, 9)));
        for (int k = 0; k < tp.P; k++) {
            tu_rank_out a, b, c;
            TU_OK(tu_run_rank(&plain, &tp, k, NULL, 0, &a));
            TU_OK(tu_run_rank(&biased, &tp, k, NULL, 0, &b));
            TU_OK(tu_run_rank(&other, &tp, k, NULL, 0, &c));
            for (int i = 0; i < n; i++) {
                TU_CHECK(tu_diff_bf16("dx, bias vs none", b.dx[i], a.dx[i], b.S, C[i]) == 0,
                         "rank %d tensor %d", k, i);
                TU_CHECK(tu_diff_f32("dw, bias vs none", b.dw[i], a.dw[i], C[i], 4) == 0,
                         "rank %d tensor %d", k, i);
                TU_CHECK(tu_diff_f32("dbias, other bias and weights", c.dbias[i], b.dbias[i], 1,
                                     C[i]) == 0,
                         "rank %d tensor %d", k, i);
            }
            tu_rank_out_free(&a);
            tu_rank_out_free(&b);
            tu_rank_out_free(&c);
        }
        TU_CHECK(check_all(&biased, &tp, NULL) == 0, "bias vs reference");
        tu_partition_free(&tp);
        for (int i = 0; i < n; i++) {
            free(biased.bias[i]);
            free(other.bias[i]);
            free(other.w[i]);
        }
        tu_problem_free(&plain);
        free(cu);
    }
}

/* ---- parameter forms ------------------------------------------------------------------------- */

/* params NULL, a zero-initialised struct and {NONE, NULL, NULL} are the same op; a forward given
 * dbias outputs writes nothing there; one struct serves forward and backward. */
static void test_param_forms(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 602);
    int64_t *cu, C[2];
    const int64_t ns = tu_random_cu(&r, 6, 300, &cu);
    tu_random_channels(&r, 2, 40, C);
    tu_problem pb;
    tu_problem_init(&pb, &r, TU_MODERATE, cu, ns, 2, C);
    tu_problem_set_params(&pb, &r, TU_MODERATE, 1, CAKE_ACTIVATION_SILU);
    tu_set_ctx("parameter forms: T=%" PRId64, pb.T);
    const int64_t T = pb.T;
    const cake_bf16 *x[2] = {pb.x[0], pb.x[1]}, *dy[2] = {pb.dy[0], pb.dy[1]};
    const float *w[2] = {pb.w[0], pb.w[1]}, *b[2] = {pb.bias[0], pb.bias[1]};
    cake_bf16 *y[3][2], *dx[3][2];
    float *dw[3][2], *db[2];
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < 2; i++) {
            y[f][i] = tu_malloc((size_t)(T * C[i]) * 2 + 2);
            dx[f][i] = tu_malloc((size_t)(T * C[i]) * 2 + 2);
            dw[f][i] = tu_malloc((size_t)C[i] * 16);
        }
    for (int i = 0; i < 2; i++) {
        db[i] = tu_malloc((size_t)C[i] * 4);
        memset(db[i], 0x5a, (size_t)C[i] * 4);
    }
    const cake_conv_params zero = {0}, none = {CAKE_ACTIVATION_NONE, NULL, NULL};
    const cake_conv_params *forms[3] = {NULL, &zero, &none};
    for (int f = 0; f < 3; f++) {
        TU_OK(cake_cpu_forward_single_rank(cu, ns, 2, C, x, w, forms[f], y[f], NULL));
        TU_OK(cake_cpu_backward_single_rank(cu, ns, 2, C, x, w, forms[f], dy, dx[f], dw[f], NULL));
    }
    for (int f = 1; f < 3; f++)
        for (int i = 0; i < 2; i++) {
            TU_CHECK(tu_diff_bf16("y", y[f][i], y[0][i], T, C[i]) == 0, "form %d", f);
            TU_CHECK(tu_diff_bf16("dx", dx[f][i], dx[0][i], T, C[i]) == 0, "form %d", f);
            TU_CHECK(tu_diff_f32("dw", dw[f][i], dw[0][i], C[i], 4) == 0, "form %d", f);
        }
    /* a forward ignores dbias: the sentinel stays */
    const cake_conv_params full = {CAKE_ACTIVATION_SILU, b, db};
    TU_OK(cake_cpu_forward_single_rank(cu, ns, 2, C, x, w, &full, y[1], NULL));
    for (int i = 0; i < 2; i++)
        for (int64_t c = 0; c < C[i]; c++) {
            uint32_t u;
            memcpy(&u, &db[i][c], 4);
            TU_CHECK(u == 0x5a5a5a5au, "the forward wrote dbias[%d][%" PRId64 "]", i, c);
        }
    /* the same struct for the backward, against the problem's run */
    TU_OK(cake_cpu_backward_single_rank(cu, ns, 2, C, x, w, &full, dy, dx[1], dw[1], NULL));
    tu_rank_out o;
    TU_OK(tu_run_single(&pb, NULL, &o));
    for (int i = 0; i < 2; i++) {
        TU_CHECK(tu_diff_bf16("y", y[1][i], o.y[i], T, C[i]) == 0, "one struct, tensor %d", i);
        TU_CHECK(tu_diff_bf16("dx", dx[1][i], o.dx[i], T, C[i]) == 0, "one struct, tensor %d", i);
        TU_CHECK(tu_diff_f32("dw", dw[1][i], o.dw[i], C[i], 4) == 0, "one struct, tensor %d", i);
        TU_CHECK(tu_diff_f32("dbias", db[i], o.dbias[i], 1, C[i]) == 0, "one struct, tensor %d",
                 i);
    }
    tu_rank_out_free(&o);
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < 2; i++) {
            free(y[f][i]);
            free(dx[f][i]);
            free(dw[f][i]);
        }
    free(db[0]);
    free(db[1]);
    tu_problem_free(&pb);
    free(cu);
}

/* ---- every variant on every partition shape -------------------------------------------------- */

typedef enum shape {
    SH_CONTIGUOUS, /* P = 1, 3, 8 */
    SH_BOUNDARIES, /* random cuts: some ranks empty */
    SH_ZIGZAG,
    SH_TINY,       /* explicit ranges of 1-3 rows, shuffled: short fragments everywhere */
    SH_RANGES,     /* ranges of up to 40 rows */
    SH_EMPTY,      /* ranks 0 and 2 of 4 hold nothing */
    SH_ONE_ROW,    /* T = 1 over 3 ranks */
    SH_NO_ROWS,    /* T = 0: only empty sequences */
    SH_SPANNING,   /* one sequence dealt out one row at a time to 8 ranks */
    SH_C8,         /* C = 8 only */
    SH_MIXED_C,    /* five tensors, C = 8, 64, 24, 40, 16 */
    SH_COUNT
} shape;
static const char *const shape_name[SH_COUNT] = {
    "contiguous", "boundaries", "zigzag", "1-3 row ranges", "ranges", "empty ranks",
    "one row",    "no rows",    "one sequence over 8 ranks, 1-row chunks", "C = 8", "mixed C"};

static void make_shape(tu_rng *r, shape sh, int trial, int variant, int64_t **cu, tu_problem *pb,
                       tu_partition *tp) {
    int64_t ns, C[TU_MAX_TENSORS];
    int n = (int)tu_range(r, 1, 3), P = (int)tu_range(r, 2, 6);
    tu_random_channels(r, TU_MAX_TENSORS, 64, C);
    switch (sh) {
    case SH_ONE_ROW:
        ns = 3;
        *cu = tu_malloc(4 * sizeof **cu);
        (*cu)[0] = (*cu)[1] = 0;
        (*cu)[2] = (*cu)[3] = 1;
        P = 3;
        break;
    case SH_NO_ROWS:
        ns = 3;
        *cu = tu_malloc(4 * sizeof **cu);
        memset(*cu, 0, 4 * sizeof **cu);
        P = 2;
        break;
    case SH_SPANNING:
        ns = 1;
        *cu = tu_malloc(2 * sizeof **cu);
        (*cu)[0] = 0;
        (*cu)[1] = tu_range(r, 8, 60);
        P = 8;
        break;
    default:
        ns = tu_random_cu(r, 10, trial % 2 ? 200 : 30, cu);
        break;
    }
    if (sh == SH_C8)
        C[0] = C[1] = C[2] = 8;
    if (sh == SH_MIXED_C) {
        static const int64_t mixed[] = {8, 64, 24, 40, 16};
        n = 5;
        memcpy(C, mixed, sizeof mixed);
    }
    const tu_profile prof = trial % 3 == 0 ? TU_NARROW : trial % 3 == 1 ? TU_MODERATE : TU_WIDE;
    tu_problem_init(pb, r, prof, *cu, ns, n, C);
    tu_problem_set_params(pb, r, prof, tu_variant_bias(variant), tu_variant_activation(variant));
    const int64_t T = pb->T;
    switch (sh) {
    case SH_CONTIGUOUS: {
        static const int Ps[] = {1, 3, 8};
        TU_OK(tu_partition_make(tp, r, TU_CONTIGUOUS, Ps[trial % 3], *cu, ns, 1));
        break;
    }
    case SH_BOUNDARIES:
        TU_OK(tu_partition_make(tp, r, TU_BOUNDARIES, P, *cu, ns, 1));
        break;
    case SH_ZIGZAG:
        TU_OK(tu_partition_make(tp, r, TU_ZIGZAG, P, *cu, ns, 1));
        break;
    case SH_TINY:
    case SH_C8:
        TU_OK(tu_partition_make(tp, r, TU_RANGES, P, *cu, ns, 3));
        break;
    case SH_EMPTY: {
        const int64_t cut = tu_range(r, 0, T), counts[] = {0, 1, 1, 1};
        const cake_range ranges[] = {{0, cut}, {cut, cut}, {cut, T}};
        TU_OK(tu_partition_explicit(tp, *cu, ns, 4, counts, ranges));
        break;
    }
    case SH_SPANNING: {
        int64_t counts[8] = {0};
        cake_range ranges[64];
        int64_t nr = 0;
        for (int k = 0; k < 8; k++)
            for (int64_t g = k; g < T; g += 8) {
                ranges[nr++] = (cake_range){g, g + 1};
                counts[k]++;
            }
        TU_OK(tu_partition_explicit(tp, *cu, ns, 8, counts, ranges));
        break;
    }
    default:
        TU_OK(tu_partition_make(tp, r, TU_RANGES, P, *cu, ns, 40));
        break;
    }
}

static void test_variant_matrix(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 603);
    for (int v = 0; v < TU_VARIANTS; v++)
        for (int sh = 0; sh < SH_COUNT; sh++)
            for (int trial = 0; trial < 3; trial++) {
                int64_t *cu;
                tu_problem pb;
                tu_partition tp;
                make_shape(&r, (shape)sh, trial, v, &cu, &pb, &tp);
                tu_set_ctx("variant matrix: %s, %s, trial %d: P=%d, T=%" PRId64 ", %" PRId64
                           " seqs, %d tensors",
                           tu_variant_name[v], shape_name[sh], trial, tp.P, pb.T, pb.num_seqs,
                           pb.n);
                /* thread counts 1, 2, 7 in turn */
                const cake_cpu_options opt = {trial == 0 ? 1 : trial == 1 ? 2 : 7,
                                              CAKE_CPU_ISA_AUTO};
                TU_CHECK(check_all(&pb, &tp, &opt) == 0, "mismatch (see above)");
                tu_partition_free(&tp);
                tu_problem_free(&pb);
                free(cu);
            }
}

/* Channel counts past the CPU's 4096-channel strips (one tensor split into two and three strips,
 * beside a narrow one): the bias rows, the dbias column and dw of every strip, in every variant,
 * on every rank, single and multi-threaded. */
static void test_wide_channels(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 606);
    for (int v = 0; v < TU_VARIANTS; v++) {
        const int64_t cu[] = {0, 2, 2, 17, 18, 30 + 5 * v}, C[3] = {4104, 8, 8200};
        tu_problem pb;
        tu_problem_init(&pb, &r, TU_NARROW, cu, 5, 3, C);
        tu_problem_set_params(&pb, &r, TU_NARROW, tu_variant_bias(v), tu_variant_activation(v));
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 2, cu, 5, 3));
        const int threads = v % 2 ? 7 : 1;
        tu_set_ctx("wide channels (%s): C = 4104, 8, 8200, T=%" PRId64 ", %d threads",
                   tu_variant_name[v], pb.T, threads);
        const cake_cpu_options opt = {threads, CAKE_CPU_ISA_AUTO};
        TU_CHECK(check_all(&pb, &tp, &opt) == 0, "mismatch (see above)");
        tu_partition_free(&tp);
        tu_problem_free(&pb);
    }
}

/* The SiLU forward's quick sequence and its fall-back (docs/NUMERICS.md 9.8): zero weights make
 * a = bias[c] exactly on every row, and most biases are values where the quick value q rounds to
 * another bf16 than silu(a) does (found by asking both), so a y that kept q fails; the others are
 * |a| > 64, infinities and ordinary values, mixed within every 16 channels, so the fall-back
 * runs for many elements of a chunk beside ones that do not need it. Everything against the
 * reference, on every rank, at 1 and 7 threads. */
static void test_silu_quick_fallback(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 909);
    const int64_t cu[] = {0, 5, 6, 29, 41}, C[2] = {72, 8};
    tu_problem pb;
    tu_problem_init(&pb, &r, TU_NARROW, cu, 4, 2, C);
    tu_problem_set_params(&pb, &r, TU_NARROW, 1, CAKE_ACTIVATION_SILU);
    static const float wide[] = {64.5f, -64.5f, 100.0f, -100.0f, 0x1p+100f, -0x1p+100f, INFINITY,
                                 -INFINITY, 64.0f, -64.0f};
    uint32_t u = 0x3f000000u + (uint32_t)(tu_next(&r) & 0xfffffu); /* from about 0.5 up */
    int misrounded = 0;
    for (int64_t c = 0; c < C[0]; c++) {
        for (int k = 0; k < 4; k++) pb.w[0][c * 4 + k] = 0.0f;
        float b;
        if (c % 8 == 7) { /* one in 8: an ordinary value (the quick sequence decides most) */
            b = (float)(c - 36) * 0.37f;
        } else if (c % 8 == 6) {
            b = wide[(c / 8) % (int)(sizeof wide / sizeof wide[0])];
        } else { /* the next value above the last one where q and silu round apart */
            uint32_t ok;
            float f;
            do {
                u++;
                memcpy(&f, &u, sizeof f);
                f = c % 2 ? -f : f;
            } while (cake_f32_to_bf16(cake_silu_quick_(f, &ok)) == cake_f32_to_bf16(cake_silu(f)));
            TU_CHECK(!ok, "the quick sequence decided a = %a wrongly", (double)f);
            b = f;
            misrounded++;
            u += (uint32_t)(tu_next(&r) & 0xffffu);
        }
        pb.bias[0][c] = b;
    }
    TU_CHECK(misrounded > 0, "no bias found");
    tu_partition tp;
    TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, cu, 4, 2));
    for (int threads = 1; threads <= 7; threads += 6) {
        tu_set_ctx("SiLU quick fall-back: %d biases q rounds wrongly, of %" PRId64 ", %d threads",
                   misrounded, C[0], threads);
        const cake_cpu_options opt = {threads, CAKE_CPU_ISA_AUTO};
        TU_CHECK(check_all(&pb, &tp, &opt) == 0, "mismatch (see above)");
    }
    tu_partition_free(&tp);
    tu_problem_free(&pb);
}

/* The SiLU backward's silu' by the unscaled sequence only where every a of a chunk allows it
 * (|a| <= 44): weights (0, 0, 0, 1) make a = x(t) (+ the bias) exactly; ordinary x everywhere,
 * spikes of |a| > 88 in a few rows of most channels (there cake_silu_grad_unscaled gives NaN or
 * another value, checked here: g taken from it would change dw, dbias and dx), none in the
 * first 128 channels (a whole chunk, at chunk sizes up to CAKE_CPU_SILU_CHUNK = 64 pairs), and
 * |a| of exactly 44 and of the bf16 just below it (43.75) beside them.
 * So some chunks of a step run the whole sequence and others the shorter one, and the spikes
 * move between them from step to step. Against the reference on every rank, at 1 and 7
 * threads. */
static void test_silu_grad_chunks(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 910);
    static const float spikes[] = {96.0f, -96.0f, 104.0f, -104.0f, 120.0f, -120.0f};
    static const float edges[] = {44.0f, -44.0f, 43.75f, -43.75f};
    const int64_t cu[] = {0, 7, 7, 150, 151, 400}, C[2] = {328, 8};
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        tu_problem pb;
        tu_problem_init(&pb, &r, TU_NARROW, cu, 5, 2, C);
        tu_problem_set_params(&pb, &r, TU_NARROW, with_bias, CAKE_ACTIVATION_SILU);
        int64_t spiked = 0;
        for (int i = 0; i < 2; i++) {
            for (int64_t c = 0; c < C[i]; c++) {
                const float w[4] = {0.0f, 0.0f, 0.0f, 1.0f};
                memcpy(&pb.w[i][c * 4], w, sizeof w);
                if (with_bias) pb.bias[i][c] = 0.25f * (float)(c % 3 - 1);
            }
            const int64_t first = i == 0 ? 128 : 0, odds = i == 0 ? 64 : 16;
            for (int64_t t = 0; t < pb.T; t++)
                for (int64_t c = 0; c < C[i]; c++) {
                    cake_bf16 *x = &pb.x[i][t * C[i] + c];
                    const int64_t roll = tu_range(&r, 0, 2 * odds - 1);
                    if (roll == 0 && c >= first) {
                        const float a = spikes[tu_range(&r, 0, 5)];
                        const float b = with_bias ? pb.bias[i][c] : 0.0f;
                        TU_CHECK(f32_bits(cake_silu_grad_unscaled(a + b)) !=
                                     f32_bits(cake_silu_grad(a + b)),
                                 "a spike the unscaled sequence gets right: %a", (double)(a + b));
                        *x = cake_f32_to_bf16(a);
                        spiked++;
                    } else if (roll == 1) {
                        *x = cake_f32_to_bf16(edges[tu_range(&r, 0, 3)]);
                    }
                }
        }
        TU_CHECK(spiked > 20, "only %" PRId64 " spikes", spiked);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, cu, 5, 40));
        for (int threads = 1; threads <= 7; threads += 6) {
            tu_set_ctx("silu' by chunks: %s, %" PRId64 " spikes, %d threads",
                       with_bias ? "bias + SiLU" : "SiLU", spiked, threads);
            const cake_cpu_options opt = {threads, CAKE_CPU_ISA_AUTO};
            TU_CHECK(check_all(&pb, &tp, &opt) == 0, "mismatch (see above)");
        }
        tu_partition_free(&tp);
        tu_problem_free(&pb);
    }
}

/* ---- run to run, threads and ISA paths ------------------------------------------------------- */

/* The same call repeated (new buffers each time) and under every thread count and ISA path gives
 * the same y, dx, dw and dbias, on blocks enough for the dw tree to be split across threads. */
static void test_repeat_threads_isas(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 604);
    cake_cpu_options opts[16];
    int nopts = 0;
    for (int isa = CAKE_CPU_ISA_GENERIC; isa < CAKE_CPU_ISA_COUNT; isa++)
        if (cake_cpu_isa_supported((cake_cpu_isa)isa)) {
            static const int threads[] = {1, 2, 7};
            for (int j = 0; j < 3; j++)
                opts[nopts++] = (cake_cpu_options){threads[j], (cake_cpu_isa)isa};
        }
    for (int v = 0; v < TU_VARIANTS; v++) {
        /* 5 to 9 dw blocks: 7 threads split rank 0's tree into several chunks */
        const int64_t T = 1300 + 331 * v, cu[] = {0, 2, 2, T / 2, T / 2 + 1, T};
        int64_t C[2] = {8 * (v + 1), 24};
        tu_problem pb;
        tu_problem_init(&pb, &r, TU_NARROW, cu, 5, 2, C);
        tu_problem_set_params(&pb, &r, TU_NARROW, tu_variant_bias(v), tu_variant_activation(v));
        const int64_t counts[] = {2, 1};
        const cake_range ranges[] = {{T / 3, T}, {0, 5}, {5, T / 3}};
        tu_partition tp;
        TU_OK(tu_partition_explicit(&tp, cu, 5, 2, counts, ranges));
        for (int k = 0; k < 2; k++) {
            tu_rank_out base;
            tu_set_ctx("repeat / threads / ISA: %s, rank %d, T=%" PRId64, tu_variant_name[v], k,
                       T);
            TU_OK(tu_run_rank(&pb, &tp, k, &opts[0], 0, &base));
            for (int j = 0; j < nopts; j++) { /* the baseline options once more, then the rest */
                const cake_cpu_options *o = &opts[j];
                tu_rank_out again;
                char label[96];
                snprintf(label, sizeof label, "run %d (%s, %d threads) vs run 0 (%s, 1 thread)", j,
                         cake_cpu_isa_name(o->isa), o->num_threads,
                         cake_cpu_isa_name(opts[0].isa));
                TU_OK(tu_run_rank(&pb, &tp, k, o, 0, &again));
                TU_CHECK(tu_compare_outs(label, &again, &base) == 0, "differ");
                tu_rank_out_free(&again);
            }
            tu_rank_out_free(&base);
        }
        TU_CHECK(check_all(&pb, &tp, NULL) == 0, "vs reference");
        tu_partition_free(&tp);
        tu_problem_free(&pb);
    }
}

/* ---- NaN in several operands at once --------------------------------------------------------- */

static int count_nan16(const cake_bf16 *a, int64_t n) {
    int count = 0;
    for (int64_t i = 0; i < n; i++)
        count += tu_bf16_isnan(a[i]);
    return count;
}

static int count_inf16(const cake_bf16 *a, int64_t n) {
    int count = 0;
    for (int64_t i = 0; i < n; i++)
        count += (a[i] & 0x7fff) == 0x7f80;
    return count;
}

/* NaNs of different signs and payloads (quiet and signalling) in x, w, the bias and dy, in the
 * same rows and channels (pairs of neighbouring channels too: the kernels pair channels), next
 * to infinities: every output NaN is exactly 0x7FC0 (y, dx) or 0x7FC00000 (dw, dbias), on every
 * ISA path and thread count, through the single-rank calls and a partition of short fragments;
 * everything else bitwise the reference's (infinities kept). */
static void test_nan_several_operands(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 605);
    static const cake_bf16 nan16[] = {0x7fc1, 0xffc0, 0x7f81, 0xff85, 0x7fff, 0xffa0};
    static const uint32_t nan32[] = {0x7fc00001u, 0xffc00000u, 0x7f800001u, 0xff812345u,
                                     0x7fffffffu};
    cake_cpu_options opts[4];
    int nopts = 0;
    for (int isa = CAKE_CPU_ISA_GENERIC; isa < CAKE_CPU_ISA_COUNT; isa++)
        if (cake_cpu_isa_supported((cake_cpu_isa)isa)) {
            static const int threads[] = {1, 2, 7};
            opts[nopts] = (cake_cpu_options){threads[nopts % 3], (cake_cpu_isa)isa};
            nopts++;
        }
    for (int trial = 0; trial < 16; trial++) {
        const int v = trial % TU_VARIANTS;
        const int64_t cu[] = {0, 9, 9, 40, 41, 300 + 37 * trial}, C[2] = {16, 8};
        tu_problem pb;
        tu_problem_init(&pb, &r, TU_NARROW, cu, 5, 2, C);
        tu_problem_set_params(&pb, &r, TU_NARROW, tu_variant_bias(v), tu_variant_activation(v));
        for (int i = 0; i < 2; i++) {
            /* rows with NaN in x and dy at once, several channels, adjacent pairs included */
            for (int q = 0; q < 6; q++) {
                const int64_t g = tu_range(&r, 0, pb.T - 1), c = 2 * tu_range(&r, 0, C[i] / 2 - 1);
                for (int64_t d = 0; d < 2; d++) {
                    pb.x[i][g * C[i] + c + d] = nan16[tu_range(&r, 0, 5)];
                    pb.dy[i][g * C[i] + c + d] = nan16[tu_range(&r, 0, 5)];
                    if (g + 1 < pb.T) /* and the next row: NaN from x and from dy meet */
                        pb.x[i][(g + 1) * C[i] + c + d] = nan16[tu_range(&r, 0, 5)];
                }
                /* an infinity of either sign nearby */
                const int64_t gi = tu_range(&r, 0, pb.T - 1), ci = tu_range(&r, 0, C[i] - 1);
                (trial % 2 ? pb.x : pb.dy)[i][gi * C[i] + ci] = q % 2 ? 0x7f80 : 0xff80;
            }
            /* NaN weights on two taps of channels 2 and 3, one with another payload */
            memcpy(&pb.w[i][2 * 4 + 1], &nan32[trial % 5], 4);
            memcpy(&pb.w[i][3 * 4 + 3], &nan32[(trial + 2) % 5], 4);
            if (pb.with_bias) { /* NaN bias on channels 3 and 4, where x and w may be NaN too */
                memcpy(&pb.bias[i][3], &nan32[(trial + 1) % 5], 4);
                memcpy(&pb.bias[i][4], &nan32[(trial + 3) % 5], 4);
                pb.bias[i][5] = trial % 2 ? INFINITY : -INFINITY;
            }
        }
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, cu, 5, 1 + trial % 3));
        tu_ref ref;
        tu_ref_compute(&ref, &pb);
        int64_t *l2g = iota_rows(pb.T);
        for (int j = 0; j < nopts; j++) {
            tu_set_ctx("several NaN operands, trial %d (%s), %s, %d threads", trial,
                       tu_variant_name[v], cake_cpu_isa_name(opts[j].isa), opts[j].num_threads);
            tu_rank_out o;
            TU_OK(tu_run_single(&pb, &opts[j], &o));
            TU_CHECK(tu_check_rank("single rank", &pb, &ref, l2g, &o, 0) == 0, "vs reference");
            int nans = 0, infs = 0;
            for (int i = 0; i < 2; i++) {
                TU_CHECK(tu_check_canonical_bf16("y", o.y[i], o.S, C[i]) == 0, "y[%d]", i);
                TU_CHECK(tu_check_canonical_bf16("dx", o.dx[i], o.S, C[i]) == 0, "dx[%d]", i);
                TU_CHECK(tu_check_canonical_f32("dw", o.dw[i], C[i], 4) == 0, "dw[%d]", i);
                if (o.dbias[i])
                    TU_CHECK(tu_check_canonical_f32("dbias", o.dbias[i], 1, C[i]) == 0,
                             "dbias[%d]", i);
                nans += count_nan16(o.y[i], o.S * C[i]) + count_nan16(o.dx[i], o.S * C[i]);
                infs += count_inf16(o.y[i], o.S * C[i]) + count_inf16(o.dx[i], o.S * C[i]);
            }
            /* the case must really hold NaN outputs, and (plain op) infinities */
            TU_CHECK(nans > 100, "only %d NaN outputs", nans);
            TU_CHECK(v != 0 || infs > 0, "no infinite output in the plain op");
            tu_rank_out_free(&o);
            for (int k = 0; k < tp.P; k++) {
                char label[64];
                snprintf(label, sizeof label, "rank %d of %d", k, tp.P);
                TU_OK(tu_run_rank(&pb, &tp, k, &opts[j], 0, &o));
                TU_CHECK(tu_check_rank(label, &pb, &ref, tp.l2g[k], &o, 0) == 0, "vs reference");
                tu_rank_out_free(&o);
            }
        }
        free(l2g);
        tu_ref_free(&ref);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_bias),
        cmocka_unit_test(test_hand_dbias_tree),
        cmocka_unit_test(test_bias_changes_y_only),
        cmocka_unit_test(test_param_forms),
        cmocka_unit_test(test_variant_matrix),
        cmocka_unit_test(test_wide_channels),
        cmocka_unit_test(test_silu_quick_fallback),
        cmocka_unit_test(test_silu_grad_chunks),
        cmocka_unit_test(test_repeat_threads_isas),
        cmocka_unit_test(test_nan_several_operands),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
