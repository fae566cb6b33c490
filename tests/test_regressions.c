/* Regressions, one test per bug, named after it (docs/RELIABILITY.md).
 *
 * Found by the fuzzers (fuzz/): each test replays one reproducer,
 * fuzz/corpus/<harness>/regression-<name>, as the plain API calls it decodes to (run a
 * reproducer with FUZZ_VERBOSE=1 to see them), so both the normal and the sanitizer build catch
 * the bug coming back: signed overflow shows only under UBSan, the memory errors everywhere.
 *
 * Found by a hostile probe (issue 11), those one process can show: a failed exchange wrote the
 * forward's history; a recompute handle filled through another partition of the same T was
 * accepted; environment values were parsed silently. The multi-rank ones (check mode and the
 * partition, refused calls, MPI error messages) are in tests/mpi/test_mpi_regressions.c. */
#include "test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0xa5

/* LeakSanitizer's switch, where the sanitizers are linked in (weak: NULL elsewhere). A context
 * broken by a failed exchange deliberately keeps its message buffers at destroy (cake.h). */
void __lsan_disable(void) __attribute__((weak));
void __lsan_enable(void) __attribute__((weak));
static void leaks_ignored(int on) {
    if (on && __lsan_disable) __lsan_disable();
    if (!on && __lsan_enable) __lsan_enable();
}

static int untouched(const void *buffer, size_t bytes) {
    const unsigned char *b = buffer;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != SENTINEL) return 0;
    return 1;
}

/* Every fragment's future rows, on every rank: inside the sequence or -1, computed without
 * forming e + j past INT64_MAX. */
static void check_future_rows(const cake_partition *part) {
    for (int rank = 0; rank < cake_partition_num_ranks(part); rank++) {
        cake_plan *plan = NULL;
        TU_OK(cake_plan_create(part, rank, &plan));
        for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
            cake_fragment fr;
            TU_OK(cake_plan_fragment(plan, f, &fr));
            const int64_t e = fr.global_start + fr.length;
            for (int j = 0; j < CAKE_HALO_ROWS; j++) {
                const int64_t want = j < fr.seq_end - e ? e + j : -1;
                TU_CHECK(fr.future[j].global_row == want,
                         "rank %d fragment %" PRId64 " future[%d]: global row %" PRId64
                         ", want %" PRId64, rank, f, j, fr.future[j].global_row, want);
            }
        }
        cake_plan_destroy(plan);
    }
}

/* fuzz_partition/regression-plan-future-row-overflow: a fragment ending at T = INT64_MAX made
 * cake_plan_create form end + 1 and end + 2 (signed overflow). */
static void test_plan_future_rows_near_int64_max(void **state) {
    (void)state;
    tu_set_ctx("plan future rows at T near INT64_MAX");
    const int64_t cu[] = {0, 0, 0, 0, INT64_MAX - 7, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
                          INT64_MAX};
    cake_partition *part = NULL;
    TU_OK(cake_partition_create_zigzag(cu, 9, 7, &part)); /* the fuzzer's input */
    check_future_rows(part);
    cake_partition_destroy(part);
    for (int64_t back = 3; back >= 0; back--) { /* one sequence of T = INT64_MAX - 3 .. INT64_MAX */
        const int64_t one[] = {0, INT64_MAX - back};
        TU_OK(cake_partition_create_contiguous(one, 1, 1, &part));
        check_future_rows(part);
        cake_partition_destroy(part);
    }
}

/* fuzz_partition/regression-ranges-local-rows-overflow: overlapping ranges near INT64_MAX made
 * the row count of a rank overflow before the overlap was reported. */
static void test_ranges_row_count_overflow(void **state) {
    (void)state;
    tu_set_ctx("overlapping ranges near INT64_MAX");
    const int64_t cu[] = {0, 6, 9, 12, INT64_MAX - 7, INT64_MAX - 6, INT64_MAX - 4, INT64_MAX - 4,
                          INT64_MAX - 4, INT64_MAX - 2};
    const int64_t counts[] = {3};
    const cake_range ranges[] = {{0, INT64_MAX - 8},
                                 {7277816997830721533, 7277816997830721533},
                                 {0, 7277816997830721533}};
    cake_partition *sentinel = (cake_partition *)&counts, *part = sentinel;
    tu_expect_invalid(cake_partition_create_ranges(cu, 9, 1, counts, ranges, &part),
                      "cake_partition_create_ranges", "ranges", TU_NO_VALUE, 0);
    TU_CHECK(part == sentinel, "*out written on failure");
    const int64_t whole[] = {0, INT64_MAX}, two[] = {2};
    const cake_range twice[] = {{0, INT64_MAX}, {0, INT64_MAX}};
    tu_expect_invalid(cake_partition_create_ranges(whole, 1, 1, two, twice, &part),
                      "cake_partition_create_ranges", "ranges", TU_NO_VALUE, 0);
    TU_CHECK(part == sentinel, "*out written on failure");
}

/* fuzz_args/regression-weight-bytes-overflow: with no rows the channel check let any multiple of
 * 8 through, and the aliasing check then computed channels * 16 bytes of w (signed overflow). */
static void test_weight_bytes_overflow(void **state) {
    (void)state;
    tu_set_ctx("weight bytes overflow with no rows");
    const int64_t cu[] = {0}, C = INT64_MAX & ~(int64_t)7;
    float *w = tu_malloc(128);
    memset(w, 0, 128);
    cake_bf16 *rows[1] = {NULL};
    const float *ws[] = {w};
    float *dws[] = {w}; /* dw is w: a bad call whatever the channel count */
    const cake_cpu_options opt = {1, CAKE_CPU_ISA_AUTO};
    cake_status st = cake_cpu_backward_single_rank(cu, 0, 1, &C, (const cake_bf16 *const *)rows,
                                                   ws, NULL, (const cake_bf16 *const *)rows, rows,
                                                       dws,
                                                   &opt);
    TU_CHECK(st == CAKE_ERROR_INVALID_ARGUMENT &&
                 (tu_msg_names(cake_last_error(), "channels[0]") ||
                  tu_msg_names(cake_last_error(), "dw[0]")),
             "got %s: %s", cake_status_string(st), cake_last_error());
    for (int k = 0; k < 32; k++) TU_CHECK(w[k] == 0.0f, "w[%d] written", k);

    /* An empty rank and a channel count whose w would not fit in memory: no overflow, and
     * either nothing to do or a message about the channel count. */
    const int64_t two_seqs[] = {0, 4, 5}, C60 = (int64_t)1 << 60;
    cake_partition *part;
    cake_plan *plan;
    TU_OK(cake_partition_create_contiguous(two_seqs, 2, 8, &part));
    TU_OK(cake_plan_create(part, 7, &plan)); /* 5 rows over 8 ranks: rank 7 has none */
    cake_bf16 *ys[] = {NULL};
    st = cake_cpu_forward(plan, 1, &C60, (const cake_bf16 *const *)rows, ws, NULL,
                          (const cake_bf16 *const *)rows, ys, &opt);
    TU_CHECK(st == CAKE_SUCCESS || (st == CAKE_ERROR_INVALID_ARGUMENT &&
                                    tu_msg_names(cake_last_error(), "channels[0]")),
             "got %s: %s", cake_status_string(st), cake_last_error());
    cake_plan_destroy(plan);
    cake_partition_destroy(part);
    free(w);
}

/* fuzz_args/regression-single-rank-pool-overflow: the single-rank calls sized their halo pools
 * from a channel count whose rows overflow (pools * C wrapped, then the fill ran past a 2-byte
 * block). The call must fail on the channel count and write nothing. */
static void test_single_rank_pool_overflow(void **state) {
    (void)state;
    tu_set_ctx("single-rank pools with overflowing channels");
    const int64_t cu[] = {0, 5, 5, 11}, C = (int64_t)1 << 62;
    const size_t bytes = 11 * 8 * sizeof(cake_bf16);
    cake_bf16 *x = tu_malloc(bytes), *y = tu_malloc(bytes), *dx = tu_malloc(bytes);
    float *w = tu_malloc(32 * sizeof(float)), *dw = tu_malloc(32 * sizeof(float));
    memset(x, 0, bytes);
    memset(w, 0, 32 * sizeof(float));
    memset(y, SENTINEL, bytes);
    memset(dx, SENTINEL, bytes);
    memset(dw, SENTINEL, 32 * sizeof(float));
    const cake_bf16 *xs[] = {x};
    const float *ws[] = {w};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx};
    float *dws[] = {dw};
    tu_expect_invalid(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys, NULL),
                      "cake_cpu_forward_single_rank", "channels[0]", TU_NO_VALUE, 0);
    tu_expect_invalid(cake_cpu_backward_single_rank(cu, 3, 1, &C, xs, ws, NULL, xs, dxs, dws, NULL),
                      "cake_cpu_backward_single_rank", "channels[0]", TU_NO_VALUE, 0);
    TU_CHECK(untouched(y, bytes) && untouched(dx, bytes) && untouched(dw, 32 * sizeof(float)),
             "an output was written on failure");
    free(x);
    free(y);
    free(dx);
    free(w);
    free(dw);
}

/* fuzz_args/regression-single-rank-allocates-before-checks: with x NULL and 2^32 channels (11
 * rows: a valid count) the single-rank call allocated 48 GiB of pools before checking x, and
 * reported CAKE_ERROR_OUT_OF_MEMORY (or ASan aborted) instead of naming x. */
static void test_single_rank_checks_before_allocating(void **state) {
    (void)state;
    tu_set_ctx("single-rank argument checks before pool allocation");
    const int64_t cu[] = {0, 5, 5, 11}, C = (int64_t)1 << 32;
    float w[32] = {0};
    const cake_bf16 *xs[] = {NULL};
    const float *ws[] = {w};
    cake_bf16 y[8];
    cake_bf16 *ys[] = {y};
    tu_expect_invalid(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys, NULL),
                      "cake_cpu_forward_single_rank", "x[0]", TU_NULL, 0);
}


/* ---- issue 11 ------------------------------------------------------------------------------ */

/* A transport whose exchange fails the way a timed-out one does, counting its calls. */
typedef struct failing {
    int exchanges, releases;
} failing;

static cake_status failing_exchange(void *state, int tag, const cake_transfer *sends,
                                    int num_sends, const cake_transfer *receives,
                                    int num_receives, double timeout_seconds) {
    (void)tag, (void)sends, (void)num_sends, (void)receives, (void)num_receives;
    (void)timeout_seconds;
    ((failing *)state)->exchanges++;
    return CAKE_ERROR_TIMEOUT;
}

static void failing_release(void *state) { ((failing *)state)->releases++; }

static cake_status never_exchange(void *state, int tag, const cake_transfer *sends, int num_sends,
                                  const cake_transfer *receives, int num_receives,
                                  double timeout_seconds) {
    (void)state, (void)tag, (void)sends, (void)num_sends, (void)receives, (void)num_receives;
    (void)timeout_seconds;
    fail_msg("the transport was called where nothing is exchanged");
    return CAKE_ERROR_INTERNAL;
}

static int all_u16(const cake_bf16 *a, size_t count, cake_bf16 value) {
    for (size_t i = 0; i < count; i++)
        if (a[i] != value) return 0;
    return 1;
}

/* The fuzz_args harness expected INVALID_ARGUMENT from cake_ctx_create for every bad ISA (found
 * by CI on a processor without AVX-512): the library answers UNSUPPORTED for a real ISA the
 * processor lacks, INVALID_ARGUMENT for a value outside the enum, each naming options->cpu.isa,
 * with *out untouched and the transport not released; every ISA it has creates a context. */
static void test_ctx_isa_outcomes(void **state) {
    (void)state;
    const int64_t cu[] = {0, 12};
    cake_partition *part;
    TU_OK(cake_partition_create_contiguous(cu, 1, 1, &part));
    const int isas[] = {-1, CAKE_CPU_ISA_AUTO, CAKE_CPU_ISA_GENERIC, CAKE_CPU_ISA_AVX2,
                        CAKE_CPU_ISA_AVX512, CAKE_CPU_ISA_AVX512_BF16, CAKE_CPU_ISA_COUNT, 99};
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        const cake_cpu_isa isa = (cake_cpu_isa)isas[i];
        const int real = isas[i] >= 0 && isas[i] < CAKE_CPU_ISA_COUNT;
        tu_set_ctx("cake_ctx_create with options->cpu.isa = %d", isas[i]);
        failing f = {0, 0};
        const cake_transport t = {failing_exchange, failing_release, &f, NULL};
        const cake_ctx_options opt = {.cpu = {1, isa}};
        cake_ctx *sentinel = (cake_ctx *)&f, *ctx = sentinel;
        const cake_status st = cake_ctx_create(part, 0, &t, &opt, &ctx);
        if (real && cake_cpu_isa_supported(isa)) {
            TU_CHECK(st == CAKE_SUCCESS && ctx != sentinel, "%s: %s", cake_cpu_isa_name(isa),
                     cake_last_error());
            cake_ctx_destroy(ctx);
            TU_CHECK(f.releases == 1, "the transport was released %d times", f.releases);
            continue;
        }
        const cake_status want = real ? CAKE_ERROR_UNSUPPORTED : CAKE_ERROR_INVALID_ARGUMENT;
        TU_CHECK(st == want, "got %s (%s), want %s", cake_status_string(st), cake_last_error(),
                 cake_status_string(want));
        TU_CHECK(strncmp(cake_last_error(), "options->cpu.isa:", 17) == 0,
                 "the message does not name options->cpu.isa: \"%s\"", cake_last_error());
        TU_CHECK(ctx == sentinel, "*out written on failure");
        TU_CHECK(f.releases == 0 && f.exchanges == 0, "the transport was used on failure");
    }
    cake_partition_destroy(part);
}

/* Issue 11, bug 1: the forward wrote the +0.0 rows and the rows it holds itself into `history`
 * (an output) before the exchange, so a failed or timed-out exchange left them written, though
 * nothing may be written on failure. Rank 0 of two, whose history pool has rows of all three
 * kinds: +0.0 (fragment [0, 2)), its own (rows 6, 7 for [9, 12)) and rank 1's. */
static void test_failed_exchange_leaves_history(void **state) {
    (void)state;
    tu_set_ctx("a failed exchange leaves history, y, dx and dw as they were");
    const int64_t cu[] = {0, 12}, counts[] = {3, 2}, C = 8;
    const cake_range ranges[] = {{0, 2}, {6, 8}, {9, 12}, {2, 6}, {8, 9}};
    cake_partition *part;
    TU_OK(cake_partition_create_ranges(cu, 1, 2, counts, ranges, &part));
    leaks_ignored(1);
    for (int backward = 0; backward <= 1; backward++) {
        failing f = {0, 0};
        const cake_transport t = {failing_exchange, failing_release, &f, NULL};
        const cake_ctx_options opt = {.cpu = {1, CAKE_CPU_ISA_AUTO}};
        cake_ctx *ctx;
        TU_OK(cake_ctx_create(part, 0, &t, &opt, &ctx));
        const int64_t S = cake_ctx_local_rows(ctx), pool = cake_ctx_pool_rows(ctx);
        assert_int_equal(S, 7);
        assert_int_equal(pool, 9);
        cake_bf16 *x = tu_malloc(sizeof *x * (size_t)(S * C));
        cake_bf16 *out = tu_malloc(sizeof *out * (size_t)(S * C)); /* y or dx */
        cake_bf16 *history = tu_malloc(sizeof *history * (size_t)(pool * C));
        float w[4 * 8], dw[4 * 8];
        tu_rng r;
        tu_rng_init(&r, 1101);
        tu_fill_bf16(&r, TU_MODERATE, x, S * C);
        tu_fill_weights(&r, TU_MODERATE, w, 4 * C);
        for (int64_t k = 0; k < S * C; k++) out[k] = 0xAAAA;
        for (int64_t k = 0; k < pool * C; k++) history[k] = 0xAAAA;
        memset(dw, SENTINEL, sizeof dw);
        const cake_status st =
            backward ? cake_backward(ctx, C, x, w, NULL, history, x, out, dw)
                     : cake_forward(ctx, C, x, w, NULL, out, history, NULL);
        TU_CHECK(st == CAKE_ERROR_TIMEOUT, "%s: got %s (%s), want timeout",
                 backward ? "backward" : "forward", cake_status_string(st), cake_last_error());
        TU_CHECK(f.exchanges == 1, "%d exchanges, want 1", f.exchanges);
        TU_CHECK(all_u16(history, (size_t)(pool * C), 0xAAAA),
                 "%s: history written by a call whose exchange failed",
                 backward ? "backward" : "forward");
        TU_CHECK(all_u16(out, (size_t)(S * C), 0xAAAA), "%s written by a call whose exchange "
                 "failed", backward ? "dx" : "y");
        TU_CHECK(untouched(dw, sizeof dw), "dw written by a call whose exchange failed");
        /* Broken from here on: refused before anything is written or exchanged. */
        const cake_status again = cake_forward(ctx, C, x, w, NULL, out, history, NULL);
        TU_CHECK(again == CAKE_ERROR_COMMUNICATION && f.exchanges == 1,
                 "after the failure: %s, %d exchanges", cake_status_string(again), f.exchanges);
        TU_CHECK(all_u16(history, (size_t)(pool * C), 0xAAAA), "history written by a refused call");
        cake_ctx_destroy(ctx);
        TU_CHECK(f.releases == 1, "transport released %d times", f.releases);
        free(x);
        free(out);
        free(history);
    }
    leaks_ignored(0);
    cake_partition_destroy(part);
}

/* One forward through `ctx` with `handle`: T rows of C = 8 channels, x from `seed`, y and
 * history pre-filled with 0xAAAA (left there on failure). */
static cake_status forward_with(cake_ctx *ctx, cake_recompute_handle *handle, uint64_t seed,
                                cake_bf16 *y, cake_bf16 *history) {
    const int64_t C = 8, S = cake_ctx_local_rows(ctx), pool = cake_ctx_pool_rows(ctx);
    cake_bf16 *x = tu_malloc(sizeof *x * (size_t)(S * C));
    float w[4 * 8];
    tu_rng r;
    tu_rng_init(&r, seed);
    tu_fill_bf16(&r, TU_MODERATE, x, S * C);
    tu_fill_weights(&r, TU_MODERATE, w, 4 * C);
    for (int64_t k = 0; k < S * C; k++) y[k] = 0xAAAA;
    for (int64_t k = 0; k < pool * C; k++) history[k] = 0xAAAA;
    const cake_status st = cake_forward(ctx, C, x, w, NULL, y, history, handle);
    free(x);
    return st;
}

/* Issue 11, bug 4: the "conv" entry of a recompute handle recorded only T, the pool rows and
 * the rank, so an entry filled through another partition of the same T (other cu_seqlens, the
 * same number of fragments) was taken for this one and gave wrong y. It records the partition's
 * hash now, and the message gives the values that differ. */
static void test_handle_from_other_partition_refused(void **state) {
    (void)state;
    tu_set_ctx("recompute handle filled through another partition of the same T");
    const int64_t cu_a[] = {0, 50, 100}, cu_b[] = {0, 40, 100};
    cake_partition *pa, *pa2, *pb;
    TU_OK(cake_partition_create_contiguous(cu_a, 2, 1, &pa));
    TU_OK(cake_partition_create_contiguous(cu_a, 2, 1, &pa2)); /* the same partition again */
    TU_OK(cake_partition_create_contiguous(cu_b, 2, 1, &pb));
    const cake_transport t = {never_exchange, NULL, NULL, NULL};
    const cake_ctx_options opt = {.cpu = {1, CAKE_CPU_ISA_AUTO}};
    cake_ctx *a, *a2, *b;
    TU_OK(cake_ctx_create(pa, 0, &t, &opt, &a));
    TU_OK(cake_ctx_create(pa2, 0, &t, &opt, &a2));
    TU_OK(cake_ctx_create(pb, 0, &t, &opt, &b));
    assert_int_equal(cake_ctx_pool_rows(a), cake_ctx_pool_rows(b)); /* what used to hide it */
    const int64_t S = 100, pool = cake_ctx_pool_rows(a);
    cake_bf16 *y = tu_malloc(sizeof *y * (size_t)(S * 8));
    cake_bf16 *history = tu_malloc(sizeof *history * (size_t)(pool * 8));
    cake_recompute_handle *handle;
    TU_OK(cake_recompute_handle_create(&handle));
    TU_OK(forward_with(a, handle, 1102, y, history));
    const cake_status st = forward_with(b, handle, 1102, y, history);
    const char *msg = cake_last_error();
    tu_expect_invalid(st, "cake_forward through another partition", "recompute_handle",
                      TU_NO_VALUE, 0);
    TU_CHECK(strstr(msg, "filled through another context") && strstr(msg, "partition hash 0x") &&
                 strstr(msg, " vs 0x") && !strstr(msg, "rank 0 vs"),
             "the message does not give the two partition hashes (and only them): \"%s\"", msg);
    TU_CHECK(all_u16(y, (size_t)(S * 8), 0xAAAA) && all_u16(history, (size_t)(pool * 8), 0xAAAA),
             "the refused call wrote y or history");
    TU_CHECK(cake_recompute_handle_contains(handle, "conv"), "the refused call emptied the handle");
    /* The same partition built again hashes alike: its context may read the entry. */
    TU_OK(forward_with(a2, handle, 1102, y, history));
    cake_ctx_stats stats;
    TU_OK(cake_ctx_get_stats(a2, &stats));
    TU_CHECK(stats.forwards_from_handle == 1, "the equal partition's forward was not served "
             "from the handle");
    cake_recompute_handle_destroy(handle);
    cake_ctx_destroy(a);
    cake_ctx_destroy(a2);
    cake_ctx_destroy(b);
    cake_partition_destroy(pa);
    cake_partition_destroy(pa2);
    cake_partition_destroy(pb);

    /* The same partition, another rank: both ranks of {0, 4, 8} split at 4 exchange nothing. */
    tu_set_ctx("recompute handle filled through another rank's context");
    const int64_t cu[] = {0, 4, 8};
    cake_partition *p2;
    TU_OK(cake_partition_create_contiguous(cu, 2, 2, &p2));
    cake_ctx *r0, *r1;
    TU_OK(cake_ctx_create(p2, 0, &t, &opt, &r0));
    TU_OK(cake_ctx_create(p2, 1, &t, &opt, &r1));
    TU_OK(cake_recompute_handle_create(&handle));
    TU_OK(forward_with(r0, handle, 1103, y, history));
    const cake_status st2 = forward_with(r1, handle, 1103, y, history);
    msg = cake_last_error();
    tu_expect_invalid(st2, "cake_forward through rank 1", "recompute_handle", TU_NO_VALUE, 0);
    TU_CHECK(strstr(msg, "rank 0 vs 1") && !strstr(msg, "partition hash"),
             "the message does not give the two ranks (and only them): \"%s\"", msg);
    cake_recompute_handle_destroy(handle);
    cake_ctx_destroy(r0);
    cake_ctx_destroy(r1);
    cake_partition_destroy(p2);
    free(y);
    free(history);
}

/* The variable's value as it was, so a test can put it back. */
typedef struct saved_env {
    const char *name;
    char *value; /* NULL: unset */
} saved_env;

static saved_env env_save(const char *name) {
    const char *v = getenv(name);
    saved_env s = {name, v ? strdup(v) : NULL};
    return s;
}

static void env_restore(saved_env *s) {
    if (s->value) setenv(s->name, s->value, 1);
    else unsetenv(s->name);
    free(s->value);
}

/* A call that must fail on the variable: CAKE_ERROR_INVALID_ARGUMENT, a message that names it
 * and quotes the value. */
static void expect_env_refused(cake_status st, const char *call, const char *name,
                               const char *value) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", value);
    const char *msg = cake_last_error();
    TU_CHECK(st == CAKE_ERROR_INVALID_ARGUMENT && tu_msg_names(msg, name) && strstr(msg, quoted),
             "%s with %s=%s: %s, \"%s\"; want invalid argument naming %s and %s", call, name,
             quoted, cake_status_string(st), msg, name, quoted);
}

/* Issue 11, bug 5: CAKE_TIMEOUT_SECONDS=abc or -5 meant no timeout (a run the user thinks is
 * protected hangs), CAKE_NUM_THREADS=abc the default, CAKE_CHECK=true off. Each variable now
 * takes its documented forms only (cake.h) and anything else fails at context creation, naming
 * the variable and the value; the single-rank calls read CAKE_NUM_THREADS per call and refuse a
 * bad one before writing anything. */
static void test_env_values_parsed_strictly(void **state) {
    (void)state;
    static const struct {
        const char *name;
        const char *bad[16], *good[8];
    } vars[] = {
        {"CAKE_TIMEOUT_SECONDS",
         {"abc", "-5", "", "true", "1.5x", "nan", "inf", "-inf", " 1", "1 ", "1e999", "0x10",
          "1,5", "+", NULL},
         {"0", "0.5", "30", "1e3", "2.5e-1", NULL}},
        {"CAKE_NUM_THREADS",
         {"abc", "-5", "", "true", "4x", "0", "4097", "99999999999999999999", "nan", "inf",
          "1.5", " 2", "2 ", "+2", "0x10", NULL},
         {"1", "2", "4096", NULL}},
        {"CAKE_CHECK", {"true", "yes", "on", "", "2", "-1", "01", "1 ", " 1", "1.0", NULL},
         {"0", "1", NULL}},
    };
    const int64_t cu[] = {0, 5, 5, 11}, C = 8;
    cake_partition *part;
    TU_OK(cake_partition_create_contiguous(cu, 3, 1, &part));
    const cake_transport t = {never_exchange, NULL, NULL, NULL};
    cake_bf16 x[11 * 8] = {0}, y[11 * 8], dx[11 * 8];
    float w[4 * 8] = {0}, dw[4 * 8];
    const cake_bf16 *xs[] = {x};
    const float *ws[] = {w};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx};
    float *dws[] = {dw};
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
        saved_env saved[3] = {env_save("CAKE_TIMEOUT_SECONDS"), env_save("CAKE_NUM_THREADS"),
                              env_save("CAKE_CHECK")};
        for (int k = 0; k < 3; k++) unsetenv(saved[k].name);
        const char *name = vars[v].name;
        for (int b = 0; vars[v].bad[b]; b++) {
            const char *value = vars[v].bad[b];
            tu_set_ctx("%s=\"%s\"", name, value);
            setenv(name, value, 1);
            for (int null_options = 0; null_options <= 1; null_options++) {
                const cake_ctx_options opt = {.cpu = {0, CAKE_CPU_ISA_AUTO}};
                cake_ctx *sentinel = (cake_ctx *)&part, *ctx = sentinel;
                expect_env_refused(cake_ctx_create(part, 0, &t, null_options ? NULL : &opt, &ctx),
                                   "cake_ctx_create", name, value);
                TU_CHECK(ctx == sentinel, "cake_ctx_create wrote *out on failure");
            }
            if (strcmp(name, "CAKE_NUM_THREADS") == 0) {
                memset(y, SENTINEL, sizeof y);
                memset(dx, SENTINEL, sizeof dx);
                memset(dw, SENTINEL, sizeof dw);
                expect_env_refused(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys,
                                                                NULL),
                                   "cake_cpu_forward_single_rank", name, value);
                const cake_cpu_options zero = {0, CAKE_CPU_ISA_AUTO};
                expect_env_refused(cake_cpu_backward_single_rank(cu, 3, 1, &C, xs, ws, NULL, xs,
                                                                 dxs, dws, &zero),
                                   "cake_cpu_backward_single_rank", name, value);
                TU_CHECK(untouched(y, sizeof y) && untouched(dx, sizeof dx) &&
                             untouched(dw, sizeof dw),
                         "an output was written by a call refused on %s", name);
                /* An explicit thread count does not read the variable. */
                const cake_cpu_options two = {2, CAKE_CPU_ISA_AUTO};
                TU_OK(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys, &two));
            }
            unsetenv(name);
        }
        for (int g = 0; vars[v].good[g]; g++) {
            tu_set_ctx("%s=\"%s\"", name, vars[v].good[g]);
            setenv(name, vars[v].good[g], 1);
            cake_ctx *ctx = NULL;
            TU_OK(cake_ctx_create(part, 0, &t, NULL, &ctx));
            TU_OK(forward_with(ctx, NULL, 1104, y, dx));
            cake_ctx_destroy(ctx);
            TU_OK(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys, NULL));
            unsetenv(name);
        }
        for (int k = 0; k < 3; k++) env_restore(&saved[k]);
    }
    cake_partition_destroy(part);
}

/* Issue 11, bug 5, the plan-level calls: cake_cpu_forward / cake_cpu_backward given
 * num_threads = 0 read CAKE_NUM_THREADS at each call and took an invalid value for the default;
 * they fail on it now, naming the variable and the value, and write nothing. */
static void test_env_num_threads_plan_level(void **state) {
    (void)state;
    const int64_t cu[] = {0, 5, 5, 11}, C = 8;
    cake_partition *part;
    cake_plan *plan;
    TU_OK(cake_partition_create_contiguous(cu, 3, 1, &part));
    TU_OK(cake_plan_create(part, 0, &plan));
    const int64_t pool = cake_plan_pool_rows(plan);
    cake_bf16 x[11 * 8] = {0}, y[11 * 8], dx[11 * 8], hist[6 * 8] = {0}, fut[6 * 8] = {0};
    float w[4 * 8] = {0}, dw[4 * 8];
    assert_true(pool <= 6);
    const cake_bf16 *xs[] = {x}, *hs[] = {hist}, *fs[] = {fut};
    const float *ws[] = {w};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx};
    float *dws[] = {dw};
    saved_env saved = env_save("CAKE_NUM_THREADS");
    static const char *const bad[] = {"abc", "-5", "", "0", "4097", "2x", "nan"};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        tu_set_ctx("plan-level calls with CAKE_NUM_THREADS=\"%s\"", bad[b]);
        setenv("CAKE_NUM_THREADS", bad[b], 1);
        memset(y, SENTINEL, sizeof y);
        memset(dx, SENTINEL, sizeof dx);
        memset(dw, SENTINEL, sizeof dw);
        const cake_cpu_options zero = {0, CAKE_CPU_ISA_AUTO};
        expect_env_refused(cake_cpu_forward(plan, 1, &C, xs, ws, NULL, hs, ys, NULL),
                           "cake_cpu_forward", "CAKE_NUM_THREADS", bad[b]);
        expect_env_refused(cake_cpu_backward(plan, 1, &C, xs, ws, NULL, hs, xs, fs, dxs, dws,
                                             &zero),
                           "cake_cpu_backward", "CAKE_NUM_THREADS", bad[b]);
        TU_CHECK(untouched(y, sizeof y) && untouched(dx, sizeof dx) && untouched(dw, sizeof dw),
                 "an output was written by a call refused on CAKE_NUM_THREADS");
        const cake_cpu_options two = {2, CAKE_CPU_ISA_AUTO};
        TU_OK(cake_cpu_forward(plan, 1, &C, xs, ws, NULL, hs, ys, &two));
    }
    env_restore(&saved);
    cake_plan_destroy(plan);
    cake_partition_destroy(part);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_future_rows_near_int64_max),
        cmocka_unit_test(test_ranges_row_count_overflow),
        cmocka_unit_test(test_weight_bytes_overflow),
        cmocka_unit_test(test_single_rank_checks_before_allocating),
        cmocka_unit_test(test_ctx_isa_outcomes),
        cmocka_unit_test(test_failed_exchange_leaves_history),
        cmocka_unit_test(test_handle_from_other_partition_refused),
        cmocka_unit_test(test_env_values_parsed_strictly),
        cmocka_unit_test(test_env_num_threads_plan_level),
        cmocka_unit_test(test_single_rank_pool_overflow), /* last: it corrupts the heap */
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
