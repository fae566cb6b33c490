/* Misuse across ranks, each case ending with every rank alive and in step:
 *  - a recompute handle reused by the other kind of call, another tensor count or other channel
 *    counts: CAKE_ERROR_INVALID_ARGUMENT naming recompute_handle, nothing written, and the handle
 *    and context still serve the right call (every rank misuses alike, so nothing hangs);
 *  - check mode: one rank differs (channel count, tensor count, entry point, handle passed or
 *    filled, in the forward or the backward): every rank gets CAKE_ERROR_MISMATCH naming the
 *    rank and field, nothing written, and the context keeps working;
 *  - timeouts: rank 0 skips a call the others make: they get CAKE_ERROR_TIMEOUT after about the
 *    set time, then CAKE_ERROR_COMMUNICATION from the same context, and MPI_Finalize still
 *    completes with the abandoned messages (small ones and ones above the eager limit). */
#include "mpi_common.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The status must be `want` and the message must contain each of the NULL-terminated words. */
static void expect_status(const char *call, cake_status st, cake_status want, ...)
    __attribute__((sentinel));
static void expect_status(const char *call, cake_status st, cake_status want, ...)
{
    const char *msg = cake_last_error();
    if (st != want) {
        mc_fail("%s: status %s, want %s; message \"%s\"", call, cake_status_string(st),
                cake_status_string(want), msg);
        return;
    }
    va_list ap;
    va_start(ap, want);
    for (const char *word = va_arg(ap, const char *); word; word = va_arg(ap, const char *))
        MC_CHECK(tu_msg_names(msg, word), "%s: message \"%s\" does not name \"%s\"", call, msg,
                 word);
    va_end(ap);
}

/* ---- recompute handle misuse ------------------------------------------------------------ */

/* A trial with n = 3 tensors of 8, 16 and 8..64 channels. */
static int three_tensor_trial(mc_trial *t, int index)
{
    if (mc_trial_make(t, 3, index, mc_size, -1, 300, 64) != 0)
        return -1;
    t->n = 3;
    t->C[0] = 8;
    t->C[1] = 16;
    t->C[2] = 8 * (1 + index % 8);
    char *n_at = strstr(t->desc, "; n = "); /* the description gave the random n and C */
    if (n_at)
        snprintf(n_at, sizeof t->desc - (size_t)(n_at - t->desc), "; n = 3, C = 8 16 %" PRId64,
                 t->C[2]);
    return 0;
}

static void handle_misuse(int index)
{
    mc_trial t;
    if (three_tensor_trial(&t, index) != 0)
        return;
    mc_case("handle misuse, %s", t.desc);
    const int64_t *C = t.C;
    cake_ctx *ctx = NULL;
    cake_recompute_handle *multi2 = NULL, *single = NULL;
    int64_t other_cu[2] = {0, 0};
    cake_partition *other_part = NULL;
    cake_ctx *other = NULL;
    mc_local ref, L;
    memset(&ref, 0, sizeof ref);
    memset(&L, 0, sizeof L);
    cake_ctx_options opt = {.check = index % 2, .timeout_seconds = 60.0, .cpu = {1, 0}};
    if (!mc_all(mc_ok(cake_ctx_create_mpi(MPI_COMM_WORLD, t.tp.lib, &opt, &ctx), "ctx create")))
        goto done;
    mc_local_init(&ref, &t, mc_rank, cake_ctx_pool_rows(ctx));
    mc_local_init(&L, &t, mc_rank, cake_ctx_pool_rows(ctx));
    /* Outputs of the correct calls, without a handle. */
    if (!mc_all(mc_ok(cake_forward_multi(ctx, 3, C, MC_CX(&ref), MC_CW(&ref), NULL, ref.y, ref.hist,
                                         NULL),
                      "reference forward_multi")))
        goto done;
    /* An unrelated key lives next to "conv" (SPEC 4) and must come through untouched. */
    const char kda[] = "state of the attention op";
    if (!mc_ok(cake_recompute_handle_create(&multi2), "handle create") ||
        !mc_ok(cake_recompute_handle_create(&single), "handle create") ||
        !mc_ok(cake_recompute_handle_set(multi2, "kda", kda, sizeof kda), "handle set kda"))
        goto done;
    /* multi2: filled by a multi call of tensors 0 and 1; single: by a single call of tensor 0. */
    if (!mc_all(mc_ok(cake_forward_multi(ctx, 2, C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist,
                                         multi2),
                      "forward_multi filling a handle") &&
                mc_ok(cake_forward(ctx, C[0], L.x[0], L.w[0], NULL, L.y[0], L.hist[0], single),
                      "forward filling a handle")))
        goto done;

    /* Each refused call, checked right away (the message is the last call's). */
    mc_local_poison(&L);
    cake_status st;
    mc_case("handle misuse, %s: single call, handle filled by a multi call", t.desc);
    st = cake_forward(ctx, C[0], L.x[0], L.w[0], NULL, L.y[0], L.hist[0], multi2);
    expect_status("single call", st, CAKE_ERROR_INVALID_ARGUMENT, "recompute_handle", "single",
                  "multi", (const char *)NULL);
    mc_case("handle misuse, %s: multi call, handle filled by a single call", t.desc);
    st = cake_forward_multi(ctx, 1, C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist, single);
    expect_status("multi call", st, CAKE_ERROR_INVALID_ARGUMENT, "recompute_handle", "single",
                  "multi", (const char *)NULL);
    mc_case("handle misuse, %s: 3 tensors, handle filled with 2", t.desc);
    st = cake_forward_multi(ctx, 3, C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist, multi2);
    expect_status("multi call", st, CAKE_ERROR_INVALID_ARGUMENT, "recompute_handle", "2", "3",
                  (const char *)NULL);
    /* Tensors 1, 2 against a handle of tensors 0, 1: the channel counts differ at index 0. */
    mc_case("handle misuse, %s: other channel counts, multi call", t.desc);
    st = cake_forward_multi(ctx, 2, C + 1, MC_CX(&L) + 1, MC_CW(&L) + 1, NULL, L.y + 1, L.hist + 1,
                            multi2);
    expect_status("multi call", st, CAKE_ERROR_INVALID_ARGUMENT, "recompute_handle",
                  "channels[0]", "8", "16", (const char *)NULL);
    mc_case("handle misuse, %s: another channel count, single call", t.desc);
    st = cake_forward(ctx, C[1], L.x[1], L.w[1], NULL, L.y[1], L.hist[1], single);
    expect_status("single call", st, CAKE_ERROR_INVALID_ARGUMENT, "recompute_handle", "8", "16",
                  (const char *)NULL);
    mc_case("handle misuse, %s: after the errors", t.desc);
    MC_CHECK(mc_local_untouched(&L), "a refused call wrote to its outputs");
    /* The entries are intact: the right calls are served from them and equal the reference. */
    cake_ctx_stats s0, s1;
    cake_ctx_get_stats(ctx, &s0);
    if (!mc_all(mc_ok(cake_forward_multi(ctx, 2, C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist,
                                         multi2),
                      "forward_multi from its own handle") &&
                mc_ok(cake_forward(ctx, C[0], L.x[0], L.w[0], NULL, L.y[0], L.hist[0], single),
                      "forward from its own handle")))
        goto done;
    cake_ctx_get_stats(ctx, &s1);
    MC_CHECK(s1.forwards_from_handle - s0.forwards_from_handle == 2,
             "%" PRId64 " forwards served from the handles, want 2",
             s1.forwards_from_handle - s0.forwards_from_handle);
    L.n = ref.n = 2;
    mc_count(mc_local_diff("forwards from the handles vs without", &L, &ref, 1, 0));
    L.n = ref.n = 3;
    const void *data = NULL;
    size_t bytes = 0;
    MC_CHECK(cake_recompute_handle_get(multi2, "kda", &data, &bytes) == CAKE_SUCCESS &&
                 bytes == sizeof kda && memcmp(data, kda, bytes) == 0,
             "the \"kda\" entry changed next to the \"conv\" entry");
    /* A handle filled through another context (another partition). Every rank is refused before
     * any message, so nothing hangs. */
    mc_case("handle misuse, %s: handle filled through another context", t.desc);
    other_cu[1] = t.T + 8;
    if (mc_ok(cake_partition_create_contiguous(other_cu, 1, mc_size, &other_part),
              "other partition") &&
        mc_all(mc_ok(cake_ctx_create_mpi(MPI_COMM_WORLD, other_part, &opt, &other), "other ctx"))) {
        const int64_t S = cake_ctx_local_rows(other), pool = cake_ctx_pool_rows(other);
        cake_bf16 *ox = tu_malloc((size_t)(S * C[0]) * sizeof *ox);
        cake_bf16 *oy = tu_malloc((size_t)(S * C[0]) * sizeof *oy);
        cake_bf16 *oh = tu_malloc((size_t)(pool * C[0]) * sizeof *oh);
        memset(ox, 0, (size_t)(S * C[0]) * sizeof *ox);
        memset(oy, 0x5a, (size_t)(S * C[0]) * sizeof *oy);
        st = cake_forward(other, C[0], S ? ox : NULL, L.w[0], NULL, S ? oy : NULL, pool ? oh : NULL,
                          single);
        expect_status("call through another context", st, CAKE_ERROR_INVALID_ARGUMENT,
                      "recompute_handle", (const char *)NULL);
        int untouched = 1;
        for (int64_t k = 0; k < S * C[0]; k++)
            untouched &= oy[k] == 0x5a5a;
        MC_CHECK(untouched, "the refused call through another context wrote to y");
        free(ox);
        free(oy);
        free(oh);
    }
    /* Emptied, the handle serves another call again. */
    if (mc_ok(cake_recompute_handle_erase(multi2, "conv"), "erase conv"))
        mc_all(mc_ok(cake_forward_multi(ctx, 3, C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist, multi2),
                     "forward_multi of 3 tensors with the emptied handle"));
done:
    cake_recompute_handle_destroy(multi2);
    cake_recompute_handle_destroy(single);
    cake_ctx_destroy(other);
    cake_partition_destroy(other_part);
    cake_ctx_destroy(ctx);
    mc_local_free(&ref);
    mc_local_free(&L);
    mc_trial_free(&t);
}

/* ---- check mode ------------------------------------------------------------------------- */

typedef enum odd_kind {
    ODD_CHANNELS_FORWARD, /* rank d: tensor j has 8 more channels in the forward */
    ODD_CHANNELS_BACKWARD,
    ODD_TENSORS,     /* rank d: one tensor fewer */
    ODD_ENTRY,       /* rank d: single call where the others make a multi call of one tensor */
    ODD_HANDLE,      /* rank d passes an empty handle, the others none */
    ODD_FILLED,      /* rank d passes a filled handle, the others an empty one */
    ODD_ENV,         /* as ODD_CHANNELS_FORWARD, check mode from $CAKE_CHECK */
    ODD_COUNT
} odd_kind;
static const char *const odd_name[ODD_COUNT] = {
    "channel count in the forward", "channel count in the backward", "tensor count",
    "entry point", "handle passed", "handle filled", "channel count, CAKE_CHECK=1"};

static void check_mode_case(int index, odd_kind kind, int d)
{
    mc_trial t;
    if (three_tensor_trial(&t, index) != 0)
        return;
    mc_case("check mode, rank %d differs in the %s; %s", d, odd_name[kind], t.desc);
    const int odd = mc_rank == d, j = index % 3;
    /* What each rank passes; the odd rank's buffers match its own channel counts. */
    mc_trial mine = t;
    if (odd && (kind == ODD_CHANNELS_FORWARD || kind == ODD_CHANNELS_BACKWARD || kind == ODD_ENV))
        mine.C[j] += 8;
    cake_ctx *ctx = NULL;
    cake_recompute_handle *handle = NULL;
    mc_local L, M;
    memset(&L, 0, sizeof L);
    memset(&M, 0, sizeof M);
    cake_ctx_options opt = {.check = kind != ODD_ENV, .timeout_seconds = 60.0, .cpu = {1, 0}};
    if (kind == ODD_ENV)
        setenv("CAKE_CHECK", "1", 1);
    cake_status st = cake_ctx_create_mpi(MPI_COMM_WORLD, t.tp.lib, &opt, &ctx);
    if (kind == ODD_ENV)
        unsetenv("CAKE_CHECK");
    if (!mc_all(mc_ok(st, "ctx create")))
        goto done;
    mc_local_init(&L, &t, mc_rank, cake_ctx_pool_rows(ctx));
    mc_local_init(&M, &mine, mc_rank, cake_ctx_pool_rows(ctx));
    if ((kind == ODD_HANDLE || kind == ODD_FILLED) &&
        !mc_ok(cake_recompute_handle_create(&handle), "handle create"))
        goto done;
    /* Matching calls first where the case needs them. */
    if (kind == ODD_FILLED) { /* every rank fills its handle, then only rank d keeps it */
        if (!mc_all(mc_ok(cake_forward_multi(ctx, 3, t.C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist,
                                             handle),
                          "forward_multi filling the handle")))
            goto done;
        if (!odd)
            mc_ok(cake_recompute_handle_erase(handle, "conv"), "erase conv");
    }
    if (kind == ODD_CHANNELS_BACKWARD &&
        !mc_all(mc_ok(cake_forward_multi(ctx, 3, t.C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist,
                                         NULL),
                      "forward_multi")))
        goto done;
    mc_local *use = odd ? &M : &L;
    mc_local_poison(use);
    switch (kind) {
    case ODD_CHANNELS_BACKWARD:
        st = cake_backward_multi(ctx, 3, mine.C, MC_CX(use), MC_CW(use), NULL, MC_CHIST(use),
                                 MC_CDY(use), use->dx, use->dw);
        break;
    case ODD_TENSORS:
        st = cake_forward_multi(ctx, odd ? 2 : 3, t.C, MC_CX(use), MC_CW(use), NULL, use->y,
                                use->hist,
                                NULL);
        break;
    case ODD_ENTRY:
        st = odd ? cake_forward(ctx, t.C[0], use->x[0], use->w[0], NULL, use->y[0], use->hist[0],
                                NULL)
                 : cake_forward_multi(ctx, 1, t.C, MC_CX(use), MC_CW(use), NULL, use->y, use->hist,
                                      NULL);
        break;
    case ODD_HANDLE:
        st = cake_forward_multi(ctx, 3, t.C, MC_CX(use), MC_CW(use), NULL, use->y, use->hist,
                                odd ? handle : NULL);
        break;
    case ODD_FILLED:
        st = cake_forward_multi(ctx, 3, t.C, MC_CX(use), MC_CW(use), NULL, use->y, use->hist,
                                handle);
        break;
    default:
        st = cake_forward_multi(ctx, 3, mine.C, MC_CX(use), MC_CW(use), NULL, use->y, use->hist,
                                NULL);
        break;
    }
    /* Every rank: the field, and the odd rank among every rank's value of it. */
    char rank_word[32], field[32];
    snprintf(rank_word, sizeof rank_word, "rank %d: ", d);
    const char *fields[ODD_COUNT] = {NULL, NULL, "tensor count", "entry point",
                                     "recompute handle passed", "recompute handle filled", NULL};
    if (fields[kind])
        snprintf(field, sizeof field, "%s", fields[kind]);
    else
        snprintf(field, sizeof field, "channels[%d]", j);
    expect_status("the differing call", st, CAKE_ERROR_MISMATCH, rank_word, field,
                  (const char *)NULL);
    MC_CHECK(mc_local_untouched(use), "the refused call wrote to its outputs");
    if (handle)
        MC_CHECK(cake_recompute_handle_contains(handle, "conv") == (kind == ODD_FILLED && odd),
                 "the refused call changed the handle's \"conv\" entry");
    /* Nothing was exchanged: the ranks are still in step and matching calls work. */
    mc_local_poison(&L);
    if (mc_all(mc_ok(cake_forward_multi(ctx, 3, t.C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist, NULL),
                     "matching forward_multi after the mismatch")) &&
        mc_all(mc_ok(cake_backward_multi(ctx, 3, t.C, MC_CX(&L), MC_CW(&L), NULL, MC_CHIST(&L),
                                         MC_CDY(&L), L.dx, L.dw),
                     "matching backward_multi after the mismatch"))) {
        tu_problem pb;
        tu_ref ref;
        mc_trial_problem(&t, &pb);
        tu_ref_compute(&ref, &pb);
        tu_rank_out o = mc_local_as_out(&L);
        mc_count(tu_check_rank("calls after the mismatch vs reference", &pb, &ref,
                               t.tp.l2g[mc_rank], &o, 0));
        tu_ref_free(&ref);
        tu_problem_free(&pb);
    }
done:
    cake_recompute_handle_destroy(handle);
    cake_ctx_destroy(ctx);
    mc_local_free(&L);
    mc_local_free(&M);
    mc_trial_free(&t);
}

/* ---- timeouts --------------------------------------------------------------------------- */

/* One sequence of 2P - 1 rows; rank 0 holds the even rows, rank r >= 1 row 2r - 1, so every
 * rank r >= 1 exchanges with rank 0 in both directions. One tensor of C channels. */
static int interleaved_trial(mc_trial *t, int64_t C)
{
    const int P = mc_size;
    memset(t, 0, sizeof *t);
    t->seed = mc_seed ^ UINT64_C(0x74696d656f7574);
    t->num_seqs = 1;
    t->T = 2 * (int64_t)P - 1;
    t->cu = tu_malloc(2 * sizeof *t->cu);
    t->cu[0] = 0;
    t->cu[1] = t->T;
    t->n = 1;
    t->C[0] = C;
    int64_t *counts = tu_malloc((size_t)P * sizeof *counts);
    cake_range *ranges = tu_malloc((size_t)(2 * P) * sizeof *ranges);
    int64_t nr = 0;
    counts[0] = P;
    for (int k = 0; k < P; k++)
        ranges[nr++] = (cake_range){2 * k, 2 * k + 1};
    for (int r = 1; r < P; r++) {
        counts[r] = 1;
        ranges[nr++] = (cake_range){2 * r - 1, 2 * r};
    }
    cake_status st = tu_partition_explicit(&t->tp, t->cu, t->num_seqs, P, counts, ranges);
    free(counts);
    free(ranges);
    snprintf(t->desc, sizeof t->desc, "interleaved partition, T = %" PRId64 ", C = %" PRId64,
             t->T, C);
    if (!mc_ok(st, "interleaved partition")) {
        free(t->cu);
        t->cu = NULL;
        return -1;
    }
    return 0;
}

typedef enum late_kind {
    LATE_FORWARD, /* rank 0 skips a forward */
    LATE_BACKWARD,
    LATE_CHECK,   /* rank 0 skips a forward in check mode: the check round times out */
    LATE_ENV,     /* as LATE_FORWARD, the limit from $CAKE_TIMEOUT_SECONDS */
    LATE_COUNT
} late_kind;
static const char *const late_name[LATE_COUNT] = {
    "forward", "backward", "forward in check mode", "forward, CAKE_TIMEOUT_SECONDS"};

/* Rank 0 skips a call that the others make; C above the eager limit leaves sends that can never
 * complete. Runs on its own communicator, since the abandoned messages stay on it. */
static void timeout_case(late_kind kind, int64_t C)
{
    const double limit = 0.5;
    mc_trial t;
    if (interleaved_trial(&t, C) != 0)
        return;
    mc_case("timeout: rank 0 skips a %s; %s", late_name[kind], t.desc);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    cake_ctx *ctx = NULL;
    mc_local L;
    memset(&L, 0, sizeof L);
    cake_ctx_options opt = {.check = kind == LATE_CHECK,
                            .timeout_seconds = kind == LATE_ENV ? 0.0 : limit,
                            .cpu = {1, 0}};
    if (kind == LATE_ENV)
        setenv("CAKE_TIMEOUT_SECONDS", "0.5", 1);
    cake_status st = cake_ctx_create_mpi(comm, t.tp.lib, &opt, &ctx);
    if (kind == LATE_ENV)
        unsetenv("CAKE_TIMEOUT_SECONDS");
    if (!mc_all(mc_ok(st, "ctx create")))
        goto done;
    mc_local_init(&L, &t, mc_rank, cake_ctx_pool_rows(ctx));
    /* No forward before the backward: with a 0.5 s limit, a matching call could time out on a
     * loaded machine; the history is never read. */
    if (mc_rank != 0) {
        double t0 = MPI_Wtime();
        st = kind == LATE_BACKWARD
                 ? cake_backward_multi(ctx, 1, t.C, MC_CX(&L), MC_CW(&L), NULL, MC_CHIST(&L),
                                       MC_CDY(&L), L.dx, L.dw)
                 : cake_forward_multi(ctx, 1, t.C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist, NULL);
        double elapsed = MPI_Wtime() - t0;
        expect_status("the call rank 0 skipped", st, CAKE_ERROR_TIMEOUT, (const char *)NULL);
        MC_CHECK(cake_last_error()[0] != '\0', "a timeout without a message");
        /* Not before the limit, and soon after it even with 8 ranks sharing 2 cores. */
        MC_CHECK(elapsed >= 0.9 * limit && elapsed < limit + 10.0,
                 "the timeout fired after %.3f s, limit %.1f s", elapsed, limit);
        /* Messages may still be in flight: the context refuses every further call. */
        st = cake_forward_multi(ctx, 1, t.C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist, NULL);
        expect_status("forward_multi after the timeout", st, CAKE_ERROR_COMMUNICATION,
                      (const char *)NULL);
        st = cake_backward(ctx, t.C[0], L.x[0], L.w[0], NULL, L.hist[0], L.dy[0], L.dx[0], L.dw[0]);
        expect_status("backward after the timeout", st, CAKE_ERROR_COMMUNICATION,
                      (const char *)NULL);
    }
done:
    /* Everyone meets again here; the abandoned messages must not hold up the barrier, the
     * destroy, MPI_Comm_free or MPI_Finalize. */
    MPI_Barrier(MPI_COMM_WORLD);
    cake_ctx_destroy(ctx);
    mc_local_free(&L);
    mc_trial_free(&t);
    MPI_Comm_free(&comm);
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "test_mpi_misuse");
    const int P = mc_size;
    int index = 0;
    for (int k = 0; k < 4; k++)
        handle_misuse(index++);
    /* Check mode and timeouts need a peer. */
    if (P >= 2) {
        const int odd_ranks[3] = {P - 1, 0, P / 2};
        for (int kind = 0; kind < ODD_COUNT; kind++)
            for (int k = 0; k < 3; k++)
                if (k < 2 || (P > 2 && odd_ranks[2] != P - 1))
                    check_mode_case(index++, (odd_kind)kind, odd_ranks[k]);
        timeout_case(LATE_FORWARD, 8);
        /* Rows of 4 KiB: messages above the shared-memory eager limit, never matched. */
        timeout_case(LATE_BACKWARD, 2048);
        timeout_case(LATE_CHECK, 8);
        timeout_case(LATE_ENV, 2048);
    }
    return mc_finish();
}
