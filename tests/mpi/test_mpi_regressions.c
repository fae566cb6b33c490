/* Regressions across ranks, one case per bug of issue 11 that needs several ranks (the ones one
 * process can show are in tests/test_regressions.c), each named after its bug:
 *  - check_mode_compares_partition: check mode compared T only, so ranks whose cu_seqlens or
 *    partition differ with the same T both succeeded with wrong y and dx; the call's params
 *    (activation, bias) were not compared either;
 *  - check_mode_numbers_refused_calls: a call one rank refused locally took no call number, so
 *    that rank's next call paired with the others' refused one and check mode saw nothing;
 *  - mpi_error_names_cause: an MPI failure gave a bare code ("MPI_Testall failed (18)"); it gives
 *    MPI_Error_string's text, the code, and for a truncated message the likely cause.
 * Every case ends with every rank alive and in step. With one rank there is nothing to check.
 * An argument runs only the cases of that name (test_mpi_regressions mpi_error_names_cause). */
#include "mpi_common.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0x5a5a

/* `msg` contains `word` (as is: words with spaces and punctuation are fine). */
static int has(const char *msg, const char *word) { return strstr(msg, word) != NULL; }

static int has_nocase(const char *msg, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = msg; *p; p++) {
        size_t k = 0;
        while (k < n && p[k] && tolower((unsigned char)p[k]) == tolower((unsigned char)word[k]))
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

/* The status must be `want` and the message must contain each NULL-terminated word. */
static void expect(const char *call, cake_status st, cake_status want, ...)
    __attribute__((sentinel));
static void expect(const char *call, cake_status st, cake_status want, ...)
{
    const char *msg = cake_last_error();
    if (getenv("CAKE_MPI_VERBOSE"))
        fprintf(stderr, "rank %d: %s: %s: %s\n", mc_rank, call, cake_status_string(st), msg);
    if (st != want) {
        mc_fail("%s: status %s, want %s; message \"%s\"", call, cake_status_string(st),
                cake_status_string(want), msg);
        return;
    }
    va_list ap;
    va_start(ap, want);
    for (const char *word = va_arg(ap, const char *); word; word = va_arg(ap, const char *))
        MC_CHECK(has(msg, word), "%s: message \"%s\" does not contain \"%s\"", call, msg, word);
    va_end(ap);
}

/* One tensor's buffers on this rank of a context: x, w, dy inputs, bias; y, history, dx, dw,
 * dbias outputs holding the sentinel. */
typedef struct bufs {
    int64_t S, pool, C;
    cake_bf16 *x, *dy, *y, *hist, *dx;
    float *w, *dw, *bias, *dbias;
} bufs;

static void bufs_init(bufs *b, const cake_ctx *ctx, int64_t C)
{
    b->S = cake_ctx_local_rows(ctx);
    b->pool = cake_ctx_pool_rows(ctx);
    b->C = C;
    const size_t rows = (size_t)(b->S * C) + 1, pool = (size_t)(b->pool * C) + 1;
    b->x = tu_malloc(rows * sizeof *b->x);
    b->dy = tu_malloc(rows * sizeof *b->dy);
    b->y = tu_malloc(rows * sizeof *b->y);
    b->dx = tu_malloc(rows * sizeof *b->dx);
    b->hist = tu_malloc(pool * sizeof *b->hist);
    b->w = tu_malloc((size_t)(4 * C) * sizeof *b->w);
    b->dw = tu_malloc((size_t)(4 * C) * sizeof *b->dw);
    b->bias = tu_malloc((size_t)C * sizeof *b->bias);
    b->dbias = tu_malloc((size_t)C * sizeof *b->dbias);
    for (int64_t k = 0; k < b->S * C; k++) {
        b->x[k] = mc_value(mc_seed, 0, MC_X, k / C, k % C);
        b->dy[k] = mc_value(mc_seed, 0, MC_DY, k / C, k % C);
    }
    for (int64_t k = 0; k < 4 * C; k++)
        b->w[k] = mc_weight(mc_seed, 0, k / 4, (int)(k % 4));
    for (int64_t c = 0; c < C; c++)
        b->bias[c] = 0.25f * (float)(c % 5);
    for (size_t k = 0; k < rows; k++)
        b->y[k] = b->dx[k] = SENTINEL;
    for (size_t k = 0; k < pool; k++)
        b->hist[k] = SENTINEL;
    memset(b->dw, 0x5a, (size_t)(4 * C) * sizeof *b->dw);
    memset(b->dbias, 0x5a, (size_t)C * sizeof *b->dbias);
}

static int bytes_are(const void *p, size_t bytes, uint8_t v)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != v)
            return 0;
    return 1;
}

/* The outputs still hold the sentinel. */
static int bufs_untouched(const bufs *b)
{
    const size_t rows = (size_t)(b->S * b->C) * 2, pool = (size_t)(b->pool * b->C) * 2;
    return bytes_are(b->y, rows, 0x5a) && bytes_are(b->dx, rows, 0x5a) &&
           bytes_are(b->hist, pool, 0x5a) && bytes_are(b->dw, (size_t)(16 * b->C), 0x5a) &&
           bytes_are(b->dbias, (size_t)(4 * b->C), 0x5a);
}

static void bufs_free(bufs *b)
{
    free(b->x);
    free(b->dy);
    free(b->y);
    free(b->dx);
    free(b->hist);
    free(b->w);
    free(b->dw);
    free(b->bias);
    free(b->dbias);
}

/* ---- check mode compares the partition and the params --------------------------------- */

typedef enum odd_kind {
    ODD_CU,         /* rank d: other cu_seqlens, the same T */
    ODD_KIND,       /* rank d: zigzag where the others use contiguous, the same cu_seqlens */
    ODD_ACTIVATION, /* rank d: SiLU where the others have none */
    ODD_BIAS,       /* rank d: a bias where the others have none */
    ODD_BACKWARD_ACTIVATION, /* as ODD_ACTIVATION, in the backward */
    ODD_COUNT
} odd_kind;
static const char *const odd_name[ODD_COUNT] = {"cu_seqlens", "partition kind", "activation",
                                                "bias", "activation in the backward"};
static const char *const odd_field[ODD_COUNT] = {
    "partition (hash of cu_seqlens and every rank's ranges)",
    "partition (hash of cu_seqlens and every rank's ranges)", "params->activation",
    "bias passed (params->bias)", "params->activation"};

static void check_mode_compares_partition(odd_kind kind, int d)
{
    const int P = mc_size, odd = mc_rank == d;
    mc_case("check_mode_compares_partition: rank %d differs in the %s", d, odd_name[kind]);
    /* T = 40 on every rank; rank d's cu_seqlens moves a sequence boundary for ODD_CU. */
    const int64_t cu_same[] = {0, 7, 19, 40}, cu_other[] = {0, 9, 19, 40};
    const int64_t *cu = kind == ODD_CU && odd ? cu_other : cu_same;
    cake_partition *part = NULL;
    cake_ctx *ctx = NULL;
    bufs b;
    memset(&b, 0, sizeof b);
    const cake_status made = kind == ODD_KIND && odd
                                 ? cake_partition_create_zigzag(cu, 3, P, &part)
                                 : cake_partition_create_contiguous(cu, 3, P, &part);
    const cake_ctx_options opt = {.check = 1, .timeout_seconds = 60.0, .cpu = {1, 0}};
    if (!mc_all(mc_ok(made, "partition") &&
                mc_ok(cake_ctx_create_mpi(MPI_COMM_WORLD, part, &opt, &ctx), "ctx create")))
        goto done;
    bufs_init(&b, ctx, 16);
    const float *const bias[] = {b.bias};
    float *const dbias[] = {b.dbias};
    cake_conv_params params = {CAKE_ACTIVATION_NONE, NULL, NULL};
    if (odd && (kind == ODD_ACTIVATION || kind == ODD_BACKWARD_ACTIVATION))
        params.activation = CAKE_ACTIVATION_SILU;
    if (odd && kind == ODD_BIAS) {
        params.bias = bias;
        params.dbias = dbias;
    }
    char rank_word[32];
    snprintf(rank_word, sizeof rank_word, "rank %d: ", d);
    const char *hex = kind == ODD_CU || kind == ODD_KIND ? "0x" : "";
    cake_status st;
    if (kind == ODD_BACKWARD_ACTIVATION) {
        /* The forward without params on every rank (all agree), then the backwards differ. */
        if (!mc_all(mc_ok(cake_forward(ctx, b.C, b.x, b.w, NULL, b.y, b.hist, NULL),
                          "matching forward")))
            goto done;
        for (int64_t k = 0; k < b.S * b.C; k++)
            b.y[k] = SENTINEL;
        st = cake_backward(ctx, b.C, b.x, b.w, &params, b.hist, b.dy, b.dx, b.dw);
    } else {
        st = cake_forward(ctx, b.C, b.x, b.w, &params, b.y, b.hist, NULL);
    }
    expect("the differing call", st, CAKE_ERROR_MISMATCH, odd_field[kind], rank_word, hex,
           (const char *)NULL);
    if (kind == ODD_BACKWARD_ACTIVATION)
        MC_CHECK(bytes_are(b.dx, (size_t)(b.S * b.C) * 2, 0x5a) &&
                     bytes_are(b.dw, (size_t)(16 * b.C), 0x5a),
                 "the refused backward wrote dx or dw");
    else
        MC_CHECK(bufs_untouched(&b), "the refused call wrote to its outputs");
    /* Every rank's value is listed. */
    for (int r = 0; r < P && r < 8; r++) {
        char word[32];
        snprintf(word, sizeof word, "rank %d: %s", r, hex);
        MC_CHECK(has(cake_last_error(), word), "the message \"%s\" does not list %s",
                 cake_last_error(), word);
    }
done:
    cake_ctx_destroy(ctx);
    cake_partition_destroy(part);
    bufs_free(&b);
}

/* ---- check mode numbers refused calls --------------------------------------------------- */

typedef enum refusal {
    REFUSE_CHANNELS, /* rank d: a forward with 12 channels (not a multiple of 8) */
    REFUSE_DW_NULL,  /* rank d: a backward with dw NULL */
    REFUSE_HANDLE,   /* rank d: a single forward with a handle a multi call filled */
    REFUSAL_COUNT
} refusal;
static const char *const refusal_name[REFUSAL_COUNT] = {
    "forward with 12 channels", "backward with dw NULL", "forward with another call's handle"};

static void check_mode_numbers_refused_calls(refusal kind, int d)
{
    const int odd = mc_rank == d;
    mc_case("check_mode_numbers_refused_calls: rank %d refuses a %s", d, refusal_name[kind]);
    const int64_t cu[] = {0, 5, 33};
    cake_partition *part = NULL;
    cake_ctx *ctx = NULL;
    cake_recompute_handle *handle = NULL;
    bufs b;
    memset(&b, 0, sizeof b);
    const cake_ctx_options opt = {.check = 1, .timeout_seconds = 60.0, .cpu = {1, 0}};
    if (!mc_all(mc_ok(cake_partition_create_contiguous(cu, 2, mc_size, &part), "partition") &&
                mc_ok(cake_ctx_create_mpi(MPI_COMM_WORLD, part, &opt, &ctx), "ctx create")))
        goto done;
    bufs_init(&b, ctx, 8);
    cake_status st = CAKE_SUCCESS;
    if (odd) {
        const char *name = "";
        if (kind == REFUSE_CHANNELS) {
            name = "channels[0]";
            st = cake_forward(ctx, 12, b.x, b.w, NULL, b.y, b.hist, NULL);
        } else if (kind == REFUSE_DW_NULL) {
            name = "dw[0]";
            st = cake_backward(ctx, b.C, b.x, b.w, NULL, b.hist, b.dy, b.dx, NULL);
        } else {
            /* Filled by a multi call through a one-rank context of its own (no messages). */
            const int64_t one[] = {0, 1};
            cake_partition *p1 = NULL;
            cake_ctx *c1 = NULL;
            MPI_Comm self;
            MPI_Comm_dup(MPI_COMM_SELF, &self);
            cake_bf16 x1[8] = {0}, y1[8], h1[3 * 8];
            const cake_bf16 *xs[] = {x1};
            const float *ws[] = {b.w};
            cake_bf16 *ys[] = {y1}, *hs[] = {h1};
            const int64_t C8 = 8;
            name = "recompute_handle";
            if (mc_ok(cake_recompute_handle_create(&handle), "handle") &&
                mc_ok(cake_partition_create_contiguous(one, 1, 1, &p1), "one-row partition") &&
                mc_ok(cake_ctx_create_mpi(self, p1, NULL, &c1), "one-rank ctx") &&
                mc_ok(cake_forward_multi(c1, 1, &C8, xs, ws, NULL, ys, hs, handle),
                      "multi forward filling the handle"))
                st = cake_forward(ctx, b.C, b.x, b.w, NULL, b.y, b.hist, handle);
            cake_ctx_destroy(c1);
            cake_partition_destroy(p1);
            MPI_Comm_free(&self);
        }
        expect("the locally refused call", st, CAKE_ERROR_INVALID_ARGUMENT, name,
               (const char *)NULL);
        MC_CHECK(bufs_untouched(&b), "the refused call wrote to its outputs");
    }
    /* The call every rank makes: rank d's is its second, the others' their first. */
    st = cake_forward(ctx, b.C, b.x, b.w, NULL, b.y, b.hist, NULL);
    char mine[48], theirs[48];
    snprintf(mine, sizeof mine, "rank %d: 1", d);
    snprintf(theirs, sizeof theirs, "rank %d: 0", d == 0 ? 1 : 0);
    expect("the next call", st, CAKE_ERROR_MISMATCH, "call number", mine, theirs,
           (const char *)NULL);
    MC_CHECK(bufs_untouched(&b), "the call refused by check mode wrote to its outputs");
done:
    cake_recompute_handle_destroy(handle);
    cake_ctx_destroy(ctx);
    cake_partition_destroy(part);
    bufs_free(&b);
}

/* ---- MPI errors name their cause -------------------------------------------------------- */

/* Rank 1 makes a forward of 8 channels where the others make one of 16 (check mode off): the
 * halo rows rank 0 sends it are longer than it expects, so its receive is truncated. On a
 * communicator that returns MPI errors, rank 1 must get CAKE_ERROR_COMMUNICATION with MPI's text,
 * the code and the likely cause; the other ranks get what they get (success with wrong rows,
 * which is what check mode is for). Over MPI_Waitall (no timeout) and MPI_Testall (a timeout). */
static void mpi_error_names_cause(double timeout)
{
    mc_case("mpi_error_names_cause: rank 1 expects shorter rows than rank 0 sends, timeout %g",
            timeout);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    /* MPICH raises the errors of MPI_Waitall and MPI_Testall on MPI_COMM_WORLD's handler, not
     * on the requests' communicator: make that one return errors too, for this case. */
    MPI_Errhandler world_handler;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int64_t cu[] = {0, 8 * (int64_t)mc_size};
    cake_partition *part = NULL;
    cake_ctx *ctx = NULL;
    bufs b;
    memset(&b, 0, sizeof b);
    const cake_ctx_options opt = {.check = 0, .timeout_seconds = timeout, .cpu = {1, 0}};
    if (!mc_all(mc_ok(cake_partition_create_contiguous(cu, 1, mc_size, &part), "partition") &&
                mc_ok(cake_ctx_create_mpi(comm, part, &opt, &ctx), "ctx create")))
        goto done;
    bufs_init(&b, ctx, mc_rank == 1 ? 8 : 16);
    const cake_status st = cake_forward(ctx, b.C, b.x, b.w, NULL, b.y, b.hist, NULL);
    if (mc_rank == 1) {
        const char *msg = cake_last_error();
        expect("the truncated receive", st, CAKE_ERROR_COMMUNICATION, "exchange:",
               "receive from rank 0", "MPI error code", "did not make the same call",
               "CAKE_CHECK=1", (const char *)NULL);
        MC_CHECK(has_nocase(msg, "truncat"), "the message \"%s\" does not give MPI's text", msg);
        MC_CHECK(bytes_are(b.hist, (size_t)(b.pool * b.C) * 2, 0x5a) &&
                     bytes_are(b.y, (size_t)(b.S * b.C) * 2, 0x5a),
                 "the failed forward wrote history or y");
        /* The context refuses further calls. */
        expect("a call after the failure", cake_forward(ctx, b.C, b.x, b.w, NULL, b.y, b.hist,
                                                         NULL),
               CAKE_ERROR_COMMUNICATION, "destroy this context", (const char *)NULL);
    } else {
        MC_CHECK(st == CAKE_SUCCESS || st == CAKE_ERROR_COMMUNICATION,
                 "rank %d: %s (%s)", mc_rank, cake_status_string(st), cake_last_error());
    }
done:
    MPI_Barrier(MPI_COMM_WORLD);
    cake_ctx_destroy(ctx);
    cake_partition_destroy(part);
    bufs_free(&b);
    MPI_Comm_free(&comm);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_handler);
    MPI_Errhandler_free(&world_handler);
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "test_mpi_regressions");
    const int P = mc_size;
    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN(name) (P >= 2 && (!only || strcmp(only, #name) == 0))
    const int odd_ranks[2] = {P - 1, 0};
    if (RUN(check_mode_compares_partition))
        for (int kind = 0; kind < ODD_COUNT; kind++)
            for (int k = 0; k < 2; k++)
                check_mode_compares_partition((odd_kind)kind, odd_ranks[k]);
    if (RUN(check_mode_numbers_refused_calls))
        for (int kind = 0; kind < REFUSAL_COUNT; kind++)
            for (int k = 0; k < 2; k++)
                check_mode_numbers_refused_calls((refusal)kind, odd_ranks[k]);
    if (RUN(mpi_error_names_cause)) {
        mpi_error_names_cause(0.0);
        mpi_error_names_cause(30.0);
    }
#undef RUN
    return mc_finish();
}
