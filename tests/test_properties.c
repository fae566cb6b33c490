/* Properties of SPEC 3 that must hold bitwise: thread counts, ISA paths, multi vs single calls,
 * partition invariance of y and dx, NaN/inf propagation (canonical NaN), empty ranks, C = 8,
 * mixed C in one call, fragments of 1 and 2 rows; each over the four variants (plain, bias, SiLU,
 * bias + SiLU), dbias included. And a forward large enough for non-temporal stores. */
#include "test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

static int compare_outs(const char *label, const tu_rank_out *a, const tu_rank_out *b) {
    return tu_compare_outs(label, a, b);
}

/* A random problem in `variant` (tu_variant_name) with values of profile `prof`. */
static void random_problem_of(tu_rng *r, tu_problem *pb, int64_t **cu, int64_t max_seqs,
                              int64_t max_len, int n, int64_t max_c, int variant, tu_profile prof) {
    int64_t C[TU_MAX_TENSORS], ns = tu_random_cu(r, max_seqs, max_len, cu);
    tu_random_channels(r, n, max_c, C);
    tu_problem_init(pb, r, prof, *cu, ns, n, C);
    tu_problem_set_params(pb, r, prof, tu_variant_bias(variant), tu_variant_activation(variant));
}

static void random_problem(tu_rng *r, tu_problem *pb, int64_t **cu, int64_t max_seqs,
                           int64_t max_len, int n, int64_t max_c, int variant) {
    random_problem_of(r, pb, cu, max_seqs, max_len, n, max_c, variant, TU_MODERATE);
}

/* Trial t of a test whose partition kind is t % 4: a variant that visits every (kind, variant)
 * pair in 16 trials. */
static int variant_of_trial(int trial) {
    return (trial + trial / TU_KIND_COUNT) % TU_VARIANTS;
}

/* The same inputs under several option sets give the same bits, on every rank of a partition and
 * through the single-rank entry points. opts[0] is the baseline. */
static void check_options_agree(tu_rng *r, const cake_cpu_options *opts, int nopts, int trials,
                                const char *what) {
    for (int trial = 0; trial < trials; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_partition tp;
        random_problem(r, &pb, &cu, 8, trial % 2 ? 900 : 60, (int)tu_range(r, 1, 3), 64,
                       variant_of_trial(trial));
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(r, 1, 4);
        tu_set_ctx("%s trial %d (%s): %s P=%d, T=%" PRId64, what, trial,
                   tu_variant_name[tu_problem_variant(&pb)], tu_kind_name[kind], P, pb.T);
        TU_OK(tu_partition_make(&tp, r, kind, P, cu, pb.num_seqs, tu_range(r, 1, 600)));
        tu_ref ref;
        tu_ref_compute(&ref, &pb);
        int64_t *iota = tu_malloc((size_t)pb.T * sizeof *iota);
        for (int64_t t = 0; t < pb.T; t++)
            iota[t] = t;
        for (int k = -1; k < P; k++) { /* -1: single-rank entry points */
            tu_rank_out base, o;
            TU_OK(k < 0 ? tu_run_single(&pb, &opts[0], &base)
                        : tu_run_rank(&pb, &tp, k, &opts[0], 0, &base));
            TU_CHECK(tu_check_rank("baseline vs reference", &pb, &ref, k < 0 ? iota : tp.l2g[k],
                                   &base, 0) == 0,
                     "rank %d: baseline differs from the reference", k);
            for (int j = 1; j < nopts; j++) {
                char label[96];
                snprintf(label, sizeof label, "rank %d, threads %d isa %d vs threads %d isa %d", k,
                         opts[j].num_threads, (int)opts[j].isa, opts[0].num_threads,
                         (int)opts[0].isa);
                TU_OK(k < 0 ? tu_run_single(&pb, &opts[j], &o)
                            : tu_run_rank(&pb, &tp, k, &opts[j], 0, &o));
                TU_CHECK(compare_outs(label, &o, &base) == 0, "results differ");
                tu_rank_out_free(&o);
            }
            tu_rank_out_free(&base);
        }
        free(iota);
        tu_ref_free(&ref);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

static void test_thread_counts(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 401);
    const cake_cpu_options opts[] = {{1, CAKE_CPU_ISA_AUTO},
                                     {2, CAKE_CPU_ISA_AUTO},
                                     {7, CAKE_CPU_ISA_AUTO},
                                     {0, CAKE_CPU_ISA_AUTO}};
    check_options_agree(&r, opts, 4, 16, "thread counts");
}

static void test_isa_paths(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 402);
    cake_cpu_options opts[CAKE_CPU_ISA_COUNT + 1];
    int n = 0;
    TU_CHECK(cake_cpu_isa_supported(CAKE_CPU_ISA_GENERIC) == 1, "generic path unsupported");
    TU_CHECK(cake_cpu_isa_supported(CAKE_CPU_ISA_AUTO) == 1, "auto path unsupported");
    opts[n++] = (cake_cpu_options){1, CAKE_CPU_ISA_GENERIC};
    for (int isa = 0; isa < CAKE_CPU_ISA_COUNT; isa++) {
        const char *name = cake_cpu_isa_name((cake_cpu_isa)isa);
        TU_CHECK(name != NULL && *name, "isa %d has no name", isa);
        if (cake_cpu_isa_supported((cake_cpu_isa)isa)) {
            print_message("isa %s: supported\n", name);
            opts[n++] = (cake_cpu_options){isa % 2 ? 3 : 1, (cake_cpu_isa)isa};
        } else {
            /* a valid request this machine cannot serve */
            print_message("isa %s: not supported here\n", name);
            const int64_t cu[] = {0, 4}, ch[] = {8};
            cake_bf16 x[32] = {0}, y[32];
            const cake_bf16 *xs[] = {x};
            float w[32] = {0};
            const float *ws[] = {w};
            cake_bf16 *ys[] = {y};
            cake_cpu_options o = {1, (cake_cpu_isa)isa};
            cake_status st = cake_cpu_forward_single_rank(cu, 1, 1, ch, xs, ws, NULL, ys, &o);
            TU_CHECK(st == CAKE_ERROR_UNSUPPORTED, "unsupported isa %s: status %s", name,
                     cake_status_string(st));
        }
    }
    check_options_agree(&r, opts, n, 16, "isa paths");
}

/* Every ISA path against the generic one, bitwise, on values of every profile (TU_TINY: many
 * subnormal outputs, which the AVX-512 BF16 conversion flushes and that path must round by
 * hand) and widths of one to six 16-pair vectors plus tails. */
static void test_isa_paths_profiles(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 410);
    const tu_profile profiles[] = {TU_MODERATE, TU_WIDE, TU_TINY};
    for (int trial = 0; trial < 24; trial++) {
        int64_t *cu;
        tu_problem pb;
        random_problem_of(&r, &pb, &cu, 6, trial % 2 ? 300 : 40, (int)tu_range(&r, 1, 3), 200,
                          trial % TU_VARIANTS, profiles[trial / TU_VARIANTS % 3]);
        tu_set_ctx("isa profiles trial %d (%s): profile %d, T=%" PRId64, trial,
                   tu_variant_name[tu_problem_variant(&pb)], trial / TU_VARIANTS % 3, pb.T);
        tu_rank_out base;
        const cake_cpu_options generic = {1, CAKE_CPU_ISA_GENERIC};
        TU_OK(tu_run_single(&pb, &generic, &base));
        for (int isa = CAKE_CPU_ISA_AVX2; isa < CAKE_CPU_ISA_COUNT; isa++) {
            if (!cake_cpu_isa_supported((cake_cpu_isa)isa))
                continue;
            const cake_cpu_options opt = {1 + trial % 2, (cake_cpu_isa)isa};
            tu_rank_out o;
            TU_OK(tu_run_single(&pb, &opt, &o));
            TU_CHECK(compare_outs(cake_cpu_isa_name((cake_cpu_isa)isa), &o, &base) == 0,
                     "ISA paths differ");
            tu_rank_out_free(&o);
        }
        tu_rank_out_free(&base);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* A problem that is tensor i of pb alone. */
static tu_problem one_tensor(const tu_problem *pb, int i) {
    tu_problem q = *pb;
    q.n = 1;
    q.C[0] = pb->C[i];
    q.x[0] = pb->x[i];
    q.dy[0] = pb->dy[i];
    q.w[0] = pb->w[i];
    q.bias[0] = pb->bias[i];
    return q;
}

static void test_multi_equals_single(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 403);
    for (int trial = 0; trial < 24; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_partition tp;
        random_problem(&r, &pb, &cu, 8, trial % 3 ? 80 : 700, (int)tu_range(&r, 2, 4), 72,
                       variant_of_trial(trial));
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 5);
        tu_set_ctx("multi vs single trial %d (%s): %s P=%d, T=%" PRId64 ", %d tensors", trial,
                   tu_variant_name[tu_problem_variant(&pb)], tu_kind_name[kind], P, pb.T, pb.n);
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, pb.num_seqs, tu_range(&r, 1, 50)));
        for (int k = 0; k < P; k++) {
            tu_rank_out multi, single;
            TU_OK(tu_run_rank(&pb, &tp, k, NULL, 0, &multi));
            TU_OK(tu_run_rank(&pb, &tp, k, NULL, 1, &single));
            TU_CHECK(compare_outs("multi vs one-by-one calls", &multi, &single) == 0, "differ");
            tu_rank_out_free(&multi);
            tu_rank_out_free(&single);
        }
        /* the single-rank entry points: one multi call vs one call per tensor */
        tu_rank_out multi;
        TU_OK(tu_run_single(&pb, NULL, &multi));
        for (int i = 0; i < pb.n; i++) {
            tu_problem q = one_tensor(&pb, i);
            tu_rank_out single;
            TU_OK(tu_run_single(&q, NULL, &single));
            int bad = tu_diff_bf16("single-rank y", single.y[0], multi.y[i], pb.T, pb.C[i]) +
                      tu_diff_bf16("single-rank dx", single.dx[0], multi.dx[i], pb.T, pb.C[i]) +
                      tu_diff_f32("single-rank dw", single.dw[0], multi.dw[i], pb.C[i], 4);
            if (pb.with_bias)
                bad += tu_diff_f32("single-rank dbias", single.dbias[0], multi.dbias[i], 1,
                                   pb.C[i]);
            TU_CHECK(bad == 0, "tensor %d differs", i);
            tu_rank_out_free(&single);
        }
        tu_rank_out_free(&multi);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* y and dx of every partition equal the P = 1 result; dw and dbias of a one-rank partition with
 * its rows in global order equal the single-rank ones (same rows, same order). */
static void test_partition_invariance(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 404);
    const int Ps[] = {1, 2, 3, 5, 8};
    for (int trial = 0; trial < 16; trial++) {
        int64_t *cu;
        tu_problem pb;
        random_problem(&r, &pb, &cu, 10, trial % 2 ? 300 : 40, (int)tu_range(&r, 1, 2), 40,
                       (trial / 2) % TU_VARIANTS);
        const char *vname = tu_variant_name[tu_problem_variant(&pb)];
        tu_rank_out whole;
        tu_set_ctx("partition invariance trial %d (%s): T=%" PRId64, trial, vname, pb.T);
        TU_OK(tu_run_single(&pb, NULL, &whole));
        for (int kind = 0; kind < TU_KIND_COUNT; kind++)
            for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++) {
                tu_partition tp;
                tu_set_ctx("partition invariance trial %d (%s): %s P=%d, T=%" PRId64, trial, vname,
                           tu_kind_name[kind], Ps[pi], pb.T);
                TU_OK(tu_partition_make(&tp, &r, (tu_kind)kind, Ps[pi], cu, pb.num_seqs,
                                        tu_range(&r, 1, 12)));
                for (int k = 0; k < tp.P; k++) {
                    tu_rank_out o;
                    TU_OK(tu_run_rank(&pb, &tp, k, NULL, 0, &o));
                    for (int i = 0; i < pb.n; i++) {
                        int64_t C = pb.C[i], S = o.S;
                        cake_bf16 *want = tu_malloc((size_t)(S * C) * sizeof *want);
                        tu_gather(whole.y[i], C, tp.l2g[k], S, want);
                        TU_CHECK(tu_diff_bf16("y vs P=1", o.y[i], want, S, C) == 0, "rank %d", k);
                        tu_gather(whole.dx[i], C, tp.l2g[k], S, want);
                        TU_CHECK(tu_diff_bf16("dx vs P=1", o.dx[i], want, S, C) == 0, "rank %d", k);
                        if (kind != TU_RANGES && tp.P == 1) {
                            TU_CHECK(tu_diff_f32("dw vs P=1", o.dw[i], whole.dw[i], C, 4) == 0,
                                     "one-rank partition dw");
                            if (pb.with_bias)
                                TU_CHECK(tu_diff_f32("dbias vs P=1", o.dbias[i], whole.dbias[i],
                                                     1, C) == 0,
                                         "one-rank partition dbias");
                        }
                        free(want);
                    }
                    tu_rank_out_free(&o);
                }
                tu_partition_free(&tp);
            }
        tu_rank_out_free(&whole);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* Compare every rank of a partition (and the single-rank entry points) with the reference. */
static void check_against_reference(const tu_problem *pb, tu_partition *tp) {
    tu_ref ref;
    tu_ref_compute(&ref, pb);
    int64_t *l2g = tu_malloc((size_t)pb->T * sizeof *l2g);
    for (int64_t t = 0; t < pb->T; t++)
        l2g[t] = t;
    tu_rank_out o;
    TU_OK(tu_run_single(pb, NULL, &o));
    TU_CHECK(tu_check_rank("single rank", pb, &ref, l2g, &o, 0) == 0, "mismatch");
    tu_rank_out_free(&o);
    for (int k = 0; tp && k < tp->P; k++) {
        char label[64];
        snprintf(label, sizeof label, "rank %d of %d", k, tp->P);
        TU_OK(tu_run_rank(pb, tp, k, NULL, 0, &o));
        TU_CHECK(tu_check_rank(label, pb, &ref, tp->l2g[k], &o, 0) == 0, "mismatch");
        tu_rank_out_free(&o);
    }
    free(l2g);
    tu_ref_free(&ref);
}

/* Fragments of 1 and 2 rows: history and future come from several ranks back and ahead. */
static void test_tiny_fragments(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 405);
    for (int trial = 0; trial < 150; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_partition tp;
        random_problem(&r, &pb, &cu, 6, 30, (int)tu_range(&r, 1, 2), 32, trial % TU_VARIANTS);
        int P = (int)tu_range(&r, 2, 6);
        tu_set_ctx("tiny fragments trial %d (%s): P=%d, T=%" PRId64, trial,
                   tu_variant_name[trial % TU_VARIANTS], P, pb.T);
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, P, cu, pb.num_seqs, 1 + (trial / 4) % 3));
        check_against_reference(&pb, &tp);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

static void test_c8(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 406);
    for (int trial = 0; trial < 30; trial++) {
        int64_t *cu, C[1] = {8};
        tu_problem pb;
        tu_partition tp;
        int64_t ns = tu_random_cu(&r, 10, 300, &cu);
        tu_problem_init(&pb, &r, TU_MODERATE, cu, ns, 1, C);
        tu_problem_set_params(&pb, &r, TU_MODERATE, tu_variant_bias(variant_of_trial(trial)),
                              tu_variant_activation(variant_of_trial(trial)));
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        tu_set_ctx("C = 8 trial %d (%s): %s, T=%" PRId64, trial,
                   tu_variant_name[variant_of_trial(trial)], tu_kind_name[kind], pb.T);
        TU_OK(tu_partition_make(&tp, &r, kind, (int)tu_range(&r, 1, 4), cu, ns, tu_range(&r, 1, 9)));
        check_against_reference(&pb, &tp);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

static void test_mixed_channels(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 407);
    const int64_t C[] = {8, 64, 24, 40, 16};
    for (int trial = 0; trial < 16; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_partition tp;
        int64_t ns = tu_random_cu(&r, 10, 200, &cu);
        tu_problem_init(&pb, &r, TU_MODERATE, cu, ns, 5, C);
        tu_problem_set_params(&pb, &r, TU_MODERATE, tu_variant_bias(variant_of_trial(trial)),
                              tu_variant_activation(variant_of_trial(trial)));
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        tu_set_ctx("mixed C trial %d (%s): %s, T=%" PRId64, trial,
                   tu_variant_name[variant_of_trial(trial)], tu_kind_name[kind], pb.T);
        TU_OK(tu_partition_make(&tp, &r, kind, (int)tu_range(&r, 1, 4), cu, ns, tu_range(&r, 1, 9)));
        check_against_reference(&pb, &tp);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* ---- NaN and infinity ------------------------------------------------------------------------ */

enum { FIN = 'f', NAN_ = 'N', PINF = '+', NINF = '-' };

static int class_of(float v) {
    return v != v ? NAN_ : isinf(v) ? (v > 0 ? PINF : NINF) : FIN;
}

static void expect_class(const char *what, int64_t row, int64_t col, float v, int want) {
    TU_CHECK(class_of(v) == want, "%s row %" PRId64 " col %" PRId64 ": %g is class '%c', want '%c'",
             what, row, col, (double)v, class_of(v), want);
}

/* Every NaN the library writes is the canonical NaN (SPEC 3): 0x7FC0 in y and dx, 0x7FC00000 in
 * dw and dbias. */
static void expect_canonical(const tu_rank_out *o) {
    for (int i = 0; i < o->n; i++) {
        TU_CHECK(tu_check_canonical_bf16("y", o->y[i], o->S, o->C[i]) == 0, "y[%d]", i);
        TU_CHECK(tu_check_canonical_bf16("dx", o->dx[i], o->S, o->C[i]) == 0, "dx[%d]", i);
        TU_CHECK(tu_check_canonical_f32("dw", o->dw[i], o->C[i], 4) == 0, "dw[%d]", i);
        if (o->dbias[i])
            TU_CHECK(tu_check_canonical_f32("dbias", o->dbias[i], 1, o->C[i]) == 0, "dbias[%d]",
                     i);
    }
}

/* Two sequences [0, 8) and [8, 16), C = 8, x = dy = 1 except for the NaN/inf planted below; the
 * expected classes follow from IEEE arithmetic (see each channel). */
static void test_nan_inf_hand(void **state) {
    (void)state;
    tu_set_ctx("NaN/inf by hand");
    enum { T = 16, C = 8 };
    const int64_t cu[] = {0, 8, 16};
    const cake_bf16 QNAN = 0x7fc1, SNAN_NEG = 0xff81, PINF16 = 0x7f80, NINF16 = 0xff80;
    cake_bf16 x[T * C], dy[T * C];
    float w[C * 4];
    for (int i = 0; i < T * C; i++)
        x[i] = dy[i] = 0x3f80;
    for (int i = 0; i < C * 4; i++)
        w[i] = 1.0f;
    /* ch 0: NaN in x row 2, all weights 0: y rows 2-5 read it, 0 * NaN = NaN */
    x[2 * C + 0] = SNAN_NEG;
    for (int k = 0; k < 4; k++)
        w[0 * 4 + k] = 0.0f;
    /* ch 1: +inf in x row 2, weights 1: y rows 2-5 are +inf */
    x[2 * C + 1] = PINF16;
    /* ch 2: +inf in x row 3, w = {-1, 2, -0.5, 0}: row 3 has inf * 0 = NaN, rows 4, 5, 6 get the
     * sign of w[2], w[1], w[0] */
    x[3 * C + 2] = PINF16;
    const float w2[4] = {-1.0f, 2.0f, -0.5f, 0.0f};
    memcpy(&w[2 * 4], w2, sizeof w2);
    /* ch 3: +inf at row 1, -inf at row 2: rows reading both are inf - inf = NaN */
    x[1 * C + 3] = PINF16;
    x[2 * C + 3] = NINF16;
    /* ch 4: NaN in the last row of sequence 0 does not reach sequence 1 */
    x[7 * C + 4] = QNAN;
    /* ch 5: NaN in dy row 4: dx rows 1-4 and every dw tap */
    dy[4 * C + 5] = QNAN;
    /* ch 6: +inf in x row 5, dy = 1: dw taps 1-3 read it (from rows 7, 6, 5), tap 0 would read it
     * from row 8, which is in sequence 1 and sees +0.0 instead */
    x[5 * C + 6] = PINF16;
    /* ch 7: -inf in dy row 10, w = {1, -2, 0, 3}: dx row 10 = 3 * -inf, row 9 = 0 * -inf = NaN,
     * row 8 = -2 * -inf = +inf, row 7 (sequence 0) finite; dw tap 0 = -inf * (+0.0 padding) = NaN,
     * taps 1-3 -inf */
    dy[10 * C + 7] = NINF16;
    const float w7[4] = {1.0f, -2.0f, 0.0f, 3.0f};
    memcpy(&w[7 * 4], w7, sizeof w7);

    static const char ycls[8][T + 1] = {
        "ffNNNNffffffffff", "ff++++ffffffffff", "fffN-+-fffffffff", "f+NNN-ffffffffff",
        "fffffffNffffffff", "ffffffffffffffff", "fffff+++ffffffff", "ffffffffffffffff",
    };
    static const char dxcls[8][T + 1] = {
        "ffffffffffffffff", "ffffffffffffffff", "ffffffffffffffff", "ffffffffffffffff",
        "ffffffffffffffff", "fNNNNfffffffffff", "ffffffffffffffff", "ffffffff+N-fffff",
    };
    static const char dwcls[8][5] = {"NNNN", "++++", "????", "????", "????", "NNNN", "f+++", "N---"};

    tu_problem pb = {.cu = cu, .num_seqs = 2, .T = T, .n = 1, .C = {C}, .x = {x}, .dy = {dy},
                     .w = {w}};
    tu_rank_out o;
    TU_OK(tu_run_single(&pb, NULL, &o));
    for (int c = 0; c < C; c++) {
        for (int t = 0; t < T; t++) {
            expect_class("y", t, c, tu_bf16_to_f32(o.y[0][t * C + c]), ycls[c][t]);
            expect_class("dx", t, c, tu_bf16_to_f32(o.dx[0][t * C + c]), dxcls[c][t]);
        }
        for (int k = 0; k < 4; k++)
            if (dwcls[c][k] != '?')
                expect_class("dw", c, k, o.dw[0][c * 4 + k], dwcls[c][k]);
    }
    expect_canonical(&o);
    tu_rank_out_free(&o);

    /* the same through a partition of 1-2 row fragments, and everything against the reference */
    tu_rng r;
    tu_rng_init(&r, 408);
    for (int trial = 0; trial < 6; trial++) {
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, cu, 2, 2));
        check_against_reference(&pb, &tp);
        tu_partition_free(&tp);
    }
}

/* NaN (quiet and signalling, either sign, several payloads) and infinities planted at random in
 * x, dy, w and the bias, in every variant: every result bitwise equal to the reference (NaN as
 * the canonical NaN), on every rank and on every ISA path (C up to 24 or 72 channels: the
 * 16-pair vectors of the hand-written paths and their tails). */
static void test_nan_inf_random(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 409);
    const cake_bf16 specials[] = {0x7fc0, 0xffc0, 0x7f81, 0xff85, 0x7fff, 0x7f80, 0xff80};
    const uint32_t special32[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u};
    for (int trial = 0; trial < 64; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_partition tp;
        random_problem(&r, &pb, &cu, 8, 60, (int)tu_range(&r, 1, 2), trial % 2 ? 24 : 72,
                       variant_of_trial(trial));
        for (int i = 0; i < pb.n; i++) {
            for (int64_t e = 0; e < pb.T * pb.C[i]; e++) {
                if (tu_range(&r, 0, 99) == 0)
                    pb.x[i][e] = specials[tu_range(&r, 0, 6)];
                if (tu_range(&r, 0, 99) == 0)
                    pb.dy[i][e] = specials[tu_range(&r, 0, 6)];
            }
            if (trial % 4 == 0) /* a non-finite weight */
                memcpy(&pb.w[i][tu_range(&r, 0, pb.C[i] * 4 - 1)], &special32[trial / 4 % 5], 4);
            if (pb.with_bias && trial % 3 == 0) /* a non-finite bias */
                memcpy(&pb.bias[i][tu_range(&r, 0, pb.C[i] - 1)], &special32[trial % 5], 4);
        }
        int P = (int)tu_range(&r, 1, 4);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        tu_set_ctx("NaN/inf random trial %d (%s): %s P=%d, T=%" PRId64, trial,
                   tu_variant_name[tu_problem_variant(&pb)], tu_kind_name[kind], P, pb.T);
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, pb.num_seqs, tu_range(&r, 1, 6)));
        check_against_reference(&pb, &tp);
        for (int k = 0; k < P; k++) {
            tu_rank_out base;
            const cake_cpu_options generic = {1, CAKE_CPU_ISA_GENERIC};
            TU_OK(tu_run_rank(&pb, &tp, k, &generic, 0, &base));
            expect_canonical(&base);
            for (int isa = CAKE_CPU_ISA_AVX2; isa < CAKE_CPU_ISA_COUNT; isa++) {
                if (!cake_cpu_isa_supported((cake_cpu_isa)isa))
                    continue;
                const cake_cpu_options opt = {1 + k % 2, (cake_cpu_isa)isa};
                tu_rank_out o;
                char label[64];
                snprintf(label, sizeof label, "rank %d: %s vs generic", k,
                         cake_cpu_isa_name((cake_cpu_isa)isa));
                TU_OK(tu_run_rank(&pb, &tp, k, &opt, 0, &o));
                TU_CHECK(compare_outs(label, &o, &base) == 0, "ISA paths differ");
                tu_rank_out_free(&o);
            }
            tu_rank_out_free(&base);
        }
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* ---- empty ranks ----------------------------------------------------------------------------- */

/* S_local = 0 and T = 0 in every variant: dw and dbias are written as +0.0, nothing else is. */
static void test_empty_rank(void **state) {
    (void)state;
    const int64_t cu[] = {0, 10, 20}, b[] = {0, 10, 10, 20}, ch[] = {8, 16};
    float w0[32], w1[64], dw0[32], dw1[64], b0[8], b1[16], db0[8], db1[16];
    for (int i = 0; i < 64; i++) {
        if (i < 32)
            w0[i] = 1.0f + (float)i;
        w1[i] = -2.0f + (float)i;
        if (i < 8)
            b0[i] = 0.25f * (float)i;
        if (i < 16)
            b1[i] = -0.5f * (float)i;
    }
    cake_partition *p = NULL;
    cake_plan *plan = NULL;
    TU_OK(cake_partition_create_boundaries(cu, 2, 3, b, &p));
    TU_OK(cake_plan_create(p, 1, &plan));
    assert_int_equal(cake_plan_local_rows(plan), 0);
    assert_int_equal(cake_plan_num_fragments(plan), 0);
    assert_int_equal(cake_plan_pool_rows(plan), 0);

    const float *ws[] = {w0, w1}, *bs[] = {b0, b1};
    float *dws[] = {dw0, dw1}, *dbs[] = {db0, db1};
    const cake_bf16 *none[] = {NULL, NULL};
    cake_bf16 *nout[] = {NULL, NULL};
    float zeros[64] = {0};
    for (int v = 0; v < TU_VARIANTS; v++) {
        tu_set_ctx("S_local = 0, %s", tu_variant_name[v]);
        const cake_conv_params prm = {tu_variant_activation(v), tu_variant_bias(v) ? bs : NULL,
                                      tu_variant_bias(v) ? dbs : NULL};
        memset(dw0, 0x5a, sizeof dw0);
        memset(dw1, 0x5a, sizeof dw1);
        memset(db0, 0x5a, sizeof db0);
        memset(db1, 0x5a, sizeof db1);
        TU_OK(cake_cpu_forward(plan, 2, ch, none, ws, &prm, none, nout, NULL));
        TU_OK(cake_cpu_backward(plan, 2, ch, none, ws, &prm, none, none, none, nout, dws, NULL));
        TU_CHECK(memcmp(dw0, zeros, sizeof dw0) == 0 && memcmp(dw1, zeros, sizeof dw1) == 0,
                 "empty rank: dw is not +0.0");
        if (tu_variant_bias(v))
            TU_CHECK(memcmp(db0, zeros, sizeof db0) == 0 && memcmp(db1, zeros, sizeof db1) == 0,
                     "empty rank: dbias is not +0.0");

        /* non-NULL row pointers are fine too, and nothing is written through them */
        cake_bf16 in[4] = {0}, out0[4], out1[4], sentinel[4] = {0x5a5a, 0x5a5a, 0x5a5a, 0x5a5a};
        memcpy(out0, sentinel, sizeof out0);
        memcpy(out1, sentinel, sizeof out1);
        const cake_bf16 *some[] = {in, in};
        cake_bf16 *sout[] = {out0, out1};
        TU_OK(cake_cpu_forward(plan, 2, ch, some, ws, &prm, some, sout, NULL));
        TU_CHECK(memcmp(out0, sentinel, sizeof out0) == 0 &&
                     memcmp(out1, sentinel, sizeof out1) == 0,
                 "empty rank wrote through y");

        /* T = 0 on one process: only empty sequences, or none */
        const int64_t cu_empty[] = {0, 0, 0};
        for (int ns = 0; ns <= 2; ns += 2) {
            tu_set_ctx("T = 0, %d sequences, %s", ns, tu_variant_name[v]);
            memset(dw0, 0x5a, sizeof dw0);
            memset(dw1, 0x5a, sizeof dw1);
            memset(db0, 0x5a, sizeof db0);
            memset(db1, 0x5a, sizeof db1);
            TU_OK(cake_cpu_forward_single_rank(cu_empty, ns, 2, ch, none, ws, &prm, nout, NULL));
            TU_OK(cake_cpu_backward_single_rank(cu_empty, ns, 2, ch, none, ws, &prm, none, nout,
                                                dws, NULL));
            TU_CHECK(memcmp(dw0, zeros, sizeof dw0) == 0 && memcmp(dw1, zeros, sizeof dw1) == 0,
                     "T = 0: dw is not +0.0");
            if (tu_variant_bias(v))
                TU_CHECK(memcmp(db0, zeros, sizeof db0) == 0 &&
                             memcmp(db1, zeros, sizeof db1) == 0,
                         "T = 0: dbias is not +0.0");
        }
    }
    cake_plan_destroy(plan);
    cake_partition_destroy(p);
}

/* The inputs of the streamed calls: a batch large enough that y or dx goes by non-temporal
 * stores (CAKE_CPU_STREAM_BYTES, 32 MiB; on the AVX-512 paths, wherever a whole aligned
 * 64-byte line is written): a sequence of one row, a row count that leaves a short last step and a band
 * of fewer than 256 rows, NaN and infinities among x (and dy). */
enum { STREAMED_S = 4227, STREAMED_C = 4096 }; /* y, dx: 34.6 MB */
static const int64_t k_streamed_cu[] = {0, 1, 1500, STREAMED_S};

static void streamed_rows(tu_rng *r, cake_bf16 *v, size_t n) {
    tu_fill_bf16(r, TU_MODERATE, v, (int64_t)n);
    const size_t C = STREAMED_C;
    v[5] = 0x7fc1;                  /* a NaN with a payload */
    v[7 * C + 9] = 0x7f80;          /* +inf */
    v[100 * C + 3] = 0xff80;        /* -inf */
    v[2000 * C + 64] = 0xffc5;      /* a negative NaN */
    v[2000 * C + 65] = 0x7fc0;
}

/* Runs `call` on every ISA path this processor has, with the output 64-byte aligned (streamed)
 * and 32 bytes past a line (ordinary stores only). */
typedef void (*streamed_call)(void *ctx, cake_bf16 *out, const cake_cpu_options *opt);
static void for_isas_and_offsets(const char *what, cake_bf16 *buf, streamed_call call, void *ctx) {
    for (int offset = 0; offset <= 16; offset += 16) /* elements: 0 or 32 bytes */
        for (int isa = CAKE_CPU_ISA_GENERIC; isa < CAKE_CPU_ISA_COUNT; isa++) {
            if (!cake_cpu_isa_supported((cake_cpu_isa)isa)) continue;
            tu_set_ctx("%s, output %d bytes past a line, isa %s", what, offset * 2,
                       cake_cpu_isa_name((cake_cpu_isa)isa));
            const cake_cpu_options opt = {2, (cake_cpu_isa)isa};
            call(ctx, buf + offset, &opt);
        }
}

typedef struct streamed_case {
    const cake_bf16 *x, *dy, *ref;      /* ref: y or dx */
    const float *w, *bias, *ref_dw, *ref_dbias;
    size_t n;
} streamed_case;

static void streamed_forward_call(void *ctx, cake_bf16 *y, const cake_cpu_options *opt) {
    const streamed_case *k = ctx;
    const int64_t channels[] = {STREAMED_C};
    const cake_bf16 *xs[] = {k->x};
    const float *ws[] = {k->w}, *biases[] = {k->bias};
    cake_bf16 *const ys[] = {y};
    const cake_conv_params cp = {CAKE_ACTIVATION_NONE, k->bias ? biases : NULL, NULL};
    memset(y, 0xab, k->n * sizeof *y);
    TU_OK(cake_cpu_forward_single_rank(k_streamed_cu, 3, 1, channels, xs, ws, &cp, ys, opt));
    TU_CHECK(memcmp(y, k->ref, k->n * sizeof *y) == 0, "y differs from the reference");
}

static void streamed_backward_call(void *ctx, cake_bf16 *dx, const cake_cpu_options *opt) {
    const streamed_case *k = ctx;
    const int64_t channels[] = {STREAMED_C};
    const cake_bf16 *xs[] = {k->x}, *dys[] = {k->dy};
    const float *ws[] = {k->w}, *biases[] = {k->bias};
    float dw[4 * STREAMED_C], dbias[STREAMED_C];
    float *dws[] = {dw}, *dbiases[] = {dbias};
    cake_bf16 *const dxs[] = {dx};
    const cake_conv_params cp = {CAKE_ACTIVATION_NONE, k->bias ? biases : NULL,
                                 k->bias ? dbiases : NULL};
    memset(dx, 0xab, k->n * sizeof *dx);
    TU_OK(cake_cpu_backward_single_rank(k_streamed_cu, 3, 1, channels, xs, ws, &cp, dys, dxs, dws,
                                        opt));
    TU_CHECK(memcmp(dx, k->ref, k->n * sizeof *dx) == 0, "dx differs from the reference");
    TU_CHECK(memcmp(dw, k->ref_dw, sizeof dw) == 0, "dw differs from the reference");
    if (k->bias)
        TU_CHECK(memcmp(dbias, k->ref_dbias, sizeof dbias) == 0, "dbias differs from the reference");
}

/* A forward and a backward call whose y or dx goes by non-temporal stores: y, dx, dw and dbias
 * bitwise equal to the reference on every ISA path, plain and with a bias, the output aligned
 * (streamed) or not (ordinary stores). */
static void test_streamed_calls(void **state) {
    (void)state;
    const int64_t S = STREAMED_S, C = STREAMED_C;
    const size_t n = (size_t)S * C;
    tu_rng r;
    tu_rng_init(&r, 911);
    cake_bf16 *x = tu_malloc(n * sizeof *x), *dy = tu_malloc(n * sizeof *dy);
    cake_bf16 *ref = tu_malloc(n * sizeof *ref);
    cake_bf16 *buf = aligned_alloc(64, n * sizeof *buf + 64);
    TU_CHECK(buf != NULL, "out of memory");
    float *w = tu_malloc(4 * C * sizeof *w), *bias = tu_malloc(C * sizeof *bias);
    float *ref_dw = tu_malloc(4 * C * sizeof *ref_dw), *ref_dbias = tu_malloc(C * sizeof *ref_dbias);
    int64_t *l2g = tu_malloc((size_t)S * sizeof *l2g);
    for (int64_t t = 0; t < S; t++) l2g[t] = t;
    streamed_rows(&r, x, n);
    streamed_rows(&r, dy, n);
    tu_fill_weights(&r, TU_MODERATE, w, 4 * C);
    tu_fill_weights(&r, TU_MODERATE, bias, C);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const ref_params rp = {with_bias ? bias : NULL, REF_ACT_NONE};
        streamed_case k = {x, dy, ref, w, with_bias ? bias : NULL, ref_dw, ref_dbias, n};
        ref_forward_p(k_streamed_cu, 3, C, x, w, &rp, ref);
        for_isas_and_offsets(with_bias ? "streamed forward, bias" : "streamed forward, plain", buf,
                             streamed_forward_call, &k);
        ref_backward_dx_p(k_streamed_cu, 3, C, x, w, &rp, dy, ref);
        ref_grads_p(k_streamed_cu, 3, C, x, w, &rp, dy, l2g, S, ref_dw,
                    with_bias ? ref_dbias : NULL);
        for_isas_and_offsets(with_bias ? "streamed backward, bias" : "streamed backward, plain",
                             buf, streamed_backward_call, &k);
    }
    free(x);
    free(dy);
    free(ref);
    free(buf);
    free(w);
    free(bias);
    free(ref_dw);
    free(ref_dbias);
    free(l2g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_counts),   cmocka_unit_test(test_isa_paths),
        cmocka_unit_test(test_isa_paths_profiles),
        cmocka_unit_test(test_multi_equals_single), cmocka_unit_test(test_partition_invariance),
        cmocka_unit_test(test_tiny_fragments),  cmocka_unit_test(test_c8),
        cmocka_unit_test(test_mixed_channels),  cmocka_unit_test(test_nan_inf_hand),
        cmocka_unit_test(test_nan_inf_random),  cmocka_unit_test(test_empty_rank),
        cmocka_unit_test(test_streamed_calls),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
