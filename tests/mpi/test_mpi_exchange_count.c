/* Exchanges are counted three ways: a transport wrapped around the MPI one (calls per tag and
 * the transfers of each call), MPI's profiling interface (MPI_Isend / MPI_Irecv per tag) and
 * cake_ctx_get_stats. Expected: a multi call makes exactly one data exchange per direction on a
 * rank that has halo rows to send or receive (derived here from the partition alone) and none
 * otherwise, with one message per peer; n single calls make n; a forward from a filled recompute
 * handle makes no transport call at all with check mode off, and only the check round with it
 * on. The wrapper's release runs exactly once, from cake_ctx_destroy. */
#include "mpi_common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TRIALS 42 /* x 5 launch sizes; $CAKE_MPI_TRIALS overrides */

enum { TAG_HISTORY = 11, TAG_FUTURE = 12, TAG_CHECK = 13, NUM_TAGS = 3 }; /* cake_mpi.h */
static const char *const tag_name[NUM_TAGS] = {"history", "future", "check"};

/* ---- MPI's profiling interface: every message the library posts ------------------------- */

static long g_isend[NUM_TAGS], g_irecv[NUM_TAGS];

static int tag_index(int tag)
{
    return tag >= TAG_HISTORY && tag <= TAG_CHECK ? tag - TAG_HISTORY : -1;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    if (tag_index(tag) >= 0)
        g_isend[tag_index(tag)]++;
    return PMPI_Isend(buf, count, type, dest, tag, comm, request);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    if (tag_index(tag) >= 0)
        g_irecv[tag_index(tag)]++;
    return PMPI_Irecv(buf, count, type, source, tag, comm, request);
}

/* ---- the counting transport ------------------------------------------------------------- */

typedef struct counting {
    cake_transport inner; /* the MPI transport */
    int P;
    long calls[NUM_TAGS], other_tags;
    /* The transfers of the latest data call: bytes per peer, -1 where none. */
    int64_t *send_bytes, *recv_bytes;
    int num_sends, num_receives;
    long bad_transfers; /* to itself, out of range, twice to one peer, no data */
    int released;
} counting;

static void record(int64_t *bytes, int P, const cake_transfer *t, int count, counting *c)
{
    for (int p = 0; p < P; p++)
        bytes[p] = -1;
    for (int i = 0; i < count; i++) {
        if (t[i].peer < 0 || t[i].peer >= P || t[i].peer == mc_rank || bytes[t[i].peer] >= 0 ||
            t[i].bytes <= 0 || !t[i].data) {
            c->bad_transfers++;
            continue;
        }
        bytes[t[i].peer] = t[i].bytes;
    }
}

static cake_status counting_exchange(void *state, int tag, const cake_transfer *sends,
                                     int num_sends, const cake_transfer *receives,
                                     int num_receives, double timeout_seconds)
{
    counting *c = state;
    int k = tag_index(tag);
    if (k < 0)
        c->other_tags++;
    else
        c->calls[k]++;
    if (k == 0 || k == 1) {
        record(c->send_bytes, c->P, sends, num_sends, c);
        record(c->recv_bytes, c->P, receives, num_receives, c);
        c->num_sends = num_sends;
        c->num_receives = num_receives;
    }
    return c->inner.exchange(c->inner.state, tag, sends, num_sends, receives, num_receives,
                             timeout_seconds);
}

static void counting_release(void *state)
{
    counting *c = state;
    c->released++;
    if (c->inner.release)
        c->inner.release(c->inner.state);
}

/* ---- what the partition says each rank exchanges ---------------------------------------- */

/* slots[dir][k * P + o]: halo slots (3 per fragment and direction) of rank k's fragments that
 * rank o != k holds; distinct[..]: the different rows among them. From SPEC 2 alone. */
typedef struct needs {
    int64_t *slots[2], *distinct[2];
} needs;

static void needs_compute(needs *nd, const mc_trial *t, int P)
{
    const int64_t T = t->T;
    int64_t *owner = tu_malloc((size_t)T * sizeof *owner);
    int64_t *seen = tu_malloc((size_t)T * sizeof *seen);
    int64_t *seq_of = tu_seq_of_rows(t->cu, t->num_seqs);
    for (int k = 0; k < P; k++)
        for (int64_t i = 0; i < t->tp.local_rows[k]; i++)
            owner[t->tp.l2g[k][i]] = k;
    for (int dir = 0; dir < 2; dir++) {
        nd->slots[dir] = calloc((size_t)P * (size_t)P, sizeof(int64_t));
        nd->distinct[dir] = calloc((size_t)P * (size_t)P, sizeof(int64_t));
        for (int64_t g = 0; g < T; g++)
            seen[g] = -1;
        for (int k = 0; k < P; k++) {
            const int64_t *l2g = t->tp.l2g[k], S = t->tp.local_rows[k];
            for (int64_t a = 0, b; a < S; a = b) { /* fragment [a, b) */
                b = a + 1;
                while (b < S && l2g[b] == l2g[b - 1] + 1 && seq_of[l2g[b]] == seq_of[l2g[a]])
                    b++;
                const int64_t q = seq_of[l2g[a]], s0 = t->cu[q], s1 = t->cu[q + 1];
                for (int j = 0; j < CAKE_HALO_ROWS; j++) {
                    int64_t g = dir == 0 ? l2g[a] - CAKE_HALO_ROWS + j : l2g[b - 1] + 1 + j;
                    if (g < s0 || g >= s1 || owner[g] == k)
                        continue;
                    nd->slots[dir][k * P + owner[g]]++;
                    if (seen[g] != k)
                        nd->distinct[dir][k * P + owner[g]]++;
                    seen[g] = k;
                }
            }
        }
    }
    free(owner);
    free(seen);
    free(seq_of);
}

static void needs_free(needs *nd)
{
    for (int dir = 0; dir < 2; dir++) {
        free(nd->slots[dir]);
        free(nd->distinct[dir]);
    }
}

/* 1 when this rank sends or receives anything in direction dir. */
static int exchanges(const needs *nd, int dir, int P)
{
    for (int o = 0; o < P; o++)
        if (nd->slots[dir][mc_rank * P + o] || nd->slots[dir][o * P + mc_rank])
            return 1;
    return 0;
}

/* ---- one operation, counted ------------------------------------------------------------- */

typedef struct snapshot {
    long calls[NUM_TAGS], isend[NUM_TAGS], irecv[NUM_TAGS];
    cake_ctx_stats stats;
} snapshot;

static void take(snapshot *s, const counting *c, const cake_ctx *ctx)
{
    memcpy(s->calls, c->calls, sizeof s->calls);
    memcpy(s->isend, g_isend, sizeof s->isend);
    memcpy(s->irecv, g_irecv, sizeof s->irecv);
    cake_ctx_get_stats(ctx, &s->stats);
}

typedef struct run {
    const mc_trial *t;
    const needs *nd;
    int P;
    int64_t row_bytes; /* bytes of one halo row of all tensors of the op */
    int n_op;          /* tensors in the op */
} run;

/* Rows a message of `bytes` carries; they must lie between the distinct rows and the slots. */
static void check_rows(const char *op, const char *what, int peer, int64_t bytes,
                       int64_t row_bytes, int64_t distinct, int64_t slots)
{
    MC_CHECK(bytes % row_bytes == 0 && bytes / row_bytes >= distinct && bytes / row_bytes <= slots,
             "%s: %s peer %d carries %" PRId64 " bytes, want %" PRId64 " .. %" PRId64
             " rows of %" PRId64 " bytes",
             op, what, peer, bytes, distinct, slots, row_bytes);
}

/* After an op: data calls of direction `dir` (-1: none) = `data_calls` x (1 if this rank
 * exchanges in it), `check_calls` check rounds; the transfers of the data call match the
 * partition, one MPI message per peer. */
static void expect_op(const char *op, const run *r, const counting *c, const cake_ctx *ctx,
                      const snapshot *before, int dir, int data_calls, int check_calls)
{
    snapshot now;
    take(&now, c, ctx);
    const int P = r->P, me = mc_rank;
    const int active = dir >= 0 && exchanges(r->nd, dir, P);
    long want_calls[NUM_TAGS] = {0, 0, P > 1 ? check_calls : 0};
    long want_isend[NUM_TAGS] = {0, 0, P > 1 ? (long)check_calls * (P - 1) : 0};
    long want_irecv[NUM_TAGS] = {0, 0, want_isend[2]};
    int send_peers = 0, recv_peers = 0;
    if (dir >= 0)
        for (int o = 0; o < P; o++) {
            send_peers += r->nd->slots[dir][o * P + me] > 0;
            recv_peers += r->nd->slots[dir][me * P + o] > 0;
        }
    if (active) {
        want_calls[dir] = data_calls;
        want_isend[dir] = (long)data_calls * send_peers;
        want_irecv[dir] = (long)data_calls * recv_peers;
    }
    for (int k = 0; k < NUM_TAGS; k++) {
        MC_CHECK(now.calls[k] - before->calls[k] == want_calls[k],
                 "%s: %ld %s exchanges through the transport, want %ld", op,
                 now.calls[k] - before->calls[k], tag_name[k], want_calls[k]);
        MC_CHECK(now.isend[k] - before->isend[k] == want_isend[k] &&
                     now.irecv[k] - before->irecv[k] == want_irecv[k],
                 "%s: MPI_Isend / MPI_Irecv with the %s tag: %ld / %ld, want %ld / %ld", op,
                 tag_name[k], now.isend[k] - before->isend[k], now.irecv[k] - before->irecv[k],
                 want_isend[k], want_irecv[k]);
    }
    const cake_ctx_stats *a = &before->stats, *b = &now.stats;
    MC_CHECK(b->exchanges - a->exchanges == want_calls[0] + want_calls[1],
             "%s: stats.exchanges grew by %" PRId64 ", want %ld", op, b->exchanges - a->exchanges,
             want_calls[0] + want_calls[1]);
    MC_CHECK(b->check_rounds - a->check_rounds == want_calls[2],
             "%s: stats.check_rounds grew by %" PRId64 ", want %ld", op,
             b->check_rounds - a->check_rounds, want_calls[2]);
    if (!active || data_calls != 1)
        return;
    /* The transfers of the one data call. */
    int64_t sent = 0, received = 0;
    for (int o = 0; o < P; o++) {
        int64_t in_slots = r->nd->slots[dir][me * P + o], out_slots = r->nd->slots[dir][o * P + me];
        MC_CHECK((c->recv_bytes[o] >= 0) == (in_slots > 0) &&
                     (c->send_bytes[o] >= 0) == (out_slots > 0),
                 "%s: peer %d: receive %s, send %s; the partition says %" PRId64
                 " rows to receive, %" PRId64 " to send",
                 op, o, c->recv_bytes[o] >= 0 ? "posted" : "none",
                 c->send_bytes[o] >= 0 ? "posted" : "none", in_slots, out_slots);
        if (c->recv_bytes[o] > 0) {
            check_rows(op, "the message from", o, c->recv_bytes[o], r->row_bytes,
                       r->nd->distinct[dir][me * P + o], in_slots);
            MC_CHECK(cake_ctx_halo_rows_from(ctx, o, dir) * r->row_bytes == c->recv_bytes[o],
                     "%s: cake_ctx_halo_rows_from(%d) = %" PRId64 " rows, the message has %" PRId64
                     " bytes", op, o, cake_ctx_halo_rows_from(ctx, o, dir), c->recv_bytes[o]);
            received += c->recv_bytes[o];
        }
        if (c->send_bytes[o] > 0) {
            check_rows(op, "the message to", o, c->send_bytes[o], r->row_bytes,
                       r->nd->distinct[dir][o * P + me], out_slots);
            MC_CHECK(cake_ctx_halo_rows_to(ctx, o, dir) * r->row_bytes == c->send_bytes[o],
                     "%s: cake_ctx_halo_rows_to(%d) = %" PRId64 " rows, the message has %" PRId64
                     " bytes", op, o, cake_ctx_halo_rows_to(ctx, o, dir), c->send_bytes[o]);
            sent += c->send_bytes[o];
        }
    }
    MC_CHECK(b->messages_sent - a->messages_sent == send_peers &&
                 b->messages_received - a->messages_received == recv_peers,
             "%s: stats messages sent / received grew by %" PRId64 " / %" PRId64
             ", want %d / %d", op, b->messages_sent - a->messages_sent,
             b->messages_received - a->messages_received, send_peers, recv_peers);
    MC_CHECK(b->bytes_sent - a->bytes_sent == sent &&
                 b->bytes_received - a->bytes_received == received,
             "%s: stats bytes sent / received grew by %" PRId64 " / %" PRId64
             ", the transfers carry %" PRId64 " / %" PRId64, op, b->bytes_sent - a->bytes_sent,
             b->bytes_received - a->bytes_received, sent, received);
    /* rows_* sum over tensors: n_op times the rows of each message. */
    MC_CHECK((b->rows_sent - a->rows_sent) * r->row_bytes == r->n_op * sent &&
                 (b->rows_received - a->rows_received) * r->row_bytes == r->n_op * received,
             "%s: stats rows sent / received (summed over tensors) grew by %" PRId64 " / %" PRId64
             ", inconsistent with %" PRId64 " / %" PRId64 " bytes",
             op, b->rows_sent - a->rows_sent, b->rows_received - a->rows_received, sent, received);
}

/* ---- a trial ------------------------------------------------------------------------------ */

static cake_ctx *make_ctx(const mc_trial *t, counting *c, int check, double timeout)
{
    memset(c, 0, sizeof *c);
    c->P = mc_size;
    c->send_bytes = tu_malloc((size_t)mc_size * sizeof(int64_t));
    c->recv_bytes = tu_malloc((size_t)mc_size * sizeof(int64_t));
    cake_ctx *ctx = NULL;
    /* Designated fields: members the library may add (device exchange) stay NULL. */
    cake_transport wrapped = {
        .exchange = counting_exchange, .release = counting_release, .state = c};
    cake_ctx_options opt = {
        .check = check, .timeout_seconds = timeout, .cpu = {1, CAKE_CPU_ISA_AUTO}};
    if (!mc_ok(cake_mpi_transport_create(MPI_COMM_WORLD, &c->inner), "cake_mpi_transport_create") ||
        !mc_ok(cake_ctx_create(t->tp.lib, mc_rank, &wrapped, &opt, &ctx), "cake_ctx_create")) {
        if (c->inner.release)
            c->inner.release(c->inner.state);
        return NULL;
    }
    return ctx;
}

static void destroy_ctx(cake_ctx *ctx, counting *c)
{
    if (ctx) {
        MC_CHECK(c->released == 0, "the transport was released before cake_ctx_destroy");
        cake_ctx_destroy(ctx);
        MC_CHECK(c->released == 1, "cake_ctx_destroy released the transport %d times, want 1",
                 c->released);
    }
    MC_CHECK(c->bad_transfers == 0 && c->other_tags == 0,
             "%ld malformed transfers (to itself, out of range, repeated peer, empty), %ld calls "
             "with a tag other than 11, 12, 13", c->bad_transfers, c->other_tags);
    free(c->send_bytes);
    free(c->recv_bytes);
}

#define STEP(op, call, dir, data_calls, check_calls)                                              \
    do {                                                                                          \
        snapshot before_;                                                                         \
        take(&before_, &c, ctx);                                                                  \
        if (!mc_all(mc_ok((call), op)))                                                           \
            goto done;                                                                            \
        expect_op(op, &r, &c, ctx, &before_, dir, data_calls, check_calls);                       \
    } while (0)

/* Multi and single calls, with and without a recompute handle, on a context without check mode
 * (check = 0) or with it. */
static void run_ctx(const mc_trial *t, const needs *nd, int check, double timeout)
{
    const int n = t->n;
    counting c;
    cake_ctx *ctx = make_ctx(t, &c, check, timeout);
    cake_recompute_handle *handle = NULL;
    mc_local A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    if (!mc_all(ctx != NULL))
        goto done;
    mc_local_init(&A, t, mc_rank, cake_ctx_pool_rows(ctx));
    mc_local_init(&B, t, mc_rank, cake_ctx_pool_rows(ctx));
    run r = {t, nd, mc_size, 0, n};
    for (int i = 0; i < n; i++)
        r.row_bytes += (int64_t)sizeof(cake_bf16) * t->C[i];
    const int chk = check ? 1 : 0;

    STEP("forward_multi", cake_forward_multi(ctx, n, t->C, MC_CX(&A), MC_CW(&A), NULL, A.y,
                                             A.hist, NULL),
         0, 1, chk);
    STEP("backward_multi", cake_backward_multi(ctx, n, t->C, MC_CX(&A), MC_CW(&A), NULL,
                                               MC_CHIST(&A),
                                               MC_CDY(&A), A.dx, A.dw),
         1, 1, chk);
    if (!mc_ok(cake_recompute_handle_create(&handle), "cake_recompute_handle_create"))
        goto done;
    STEP("forward_multi filling a handle",
         cake_forward_multi(ctx, n, t->C, MC_CX(&B), MC_CW(&B), NULL, B.y, B.hist, handle), 0, 1,
             chk);
    mc_local_poison(&B);
    cake_ctx_stats s0, s1;
    cake_ctx_get_stats(ctx, &s0);
    STEP("forward_multi from the filled handle",
         cake_forward_multi(ctx, n, t->C, MC_CX(&B), MC_CW(&B), NULL, B.y, B.hist, handle), -1, 0,
             chk);
    cake_ctx_get_stats(ctx, &s1);
    MC_CHECK(s1.forwards_from_handle - s0.forwards_from_handle == 1 &&
                 s1.forward_calls - s0.forward_calls == 1,
             "forward from the handle: stats forwards_from_handle / forward_calls grew by %" PRId64
             " / %" PRId64 ", want 1 / 1",
             s1.forwards_from_handle - s0.forwards_from_handle,
             s1.forward_calls - s0.forward_calls);
    mc_count(mc_local_diff("forward from the handle vs without", &B, &A, 1, 0));
    STEP("backward_multi after the recompute",
         cake_backward_multi(ctx, n, t->C, MC_CX(&B), MC_CW(&B), NULL, MC_CHIST(&B), MC_CDY(&B),
                             B.dx,
                             B.dw),
         1, 1, chk);
    mc_count(mc_local_diff("backward after the recompute vs first backward", &B, &A, 0, 1));

    /* One tensor per call: one exchange each. */
    r.n_op = 1;
    for (int i = 0; i < n; i++) {
        char op[64];
        r.row_bytes = (int64_t)sizeof(cake_bf16) * t->C[i];
        snprintf(op, sizeof op, "single forward of tensor %d", i);
        STEP(op, cake_forward(ctx, t->C[i], B.x[i], B.w[i], NULL, B.y[i], B.hist[i], NULL), 0, 1,
             chk);
        snprintf(op, sizeof op, "single backward of tensor %d", i);
        STEP(op, cake_backward(ctx, t->C[i], B.x[i], B.w[i], NULL, B.hist[i], B.dy[i], B.dx[i],
                               B.dw[i]),
             1, 1, chk);
    }
    cake_ctx_stats s;
    cake_ctx_get_stats(ctx, &s);
    MC_CHECK(s.forward_calls == 3 + n && s.backward_calls == 2 + n,
             "stats forward / backward calls: %" PRId64 " / %" PRId64 ", want %d / %d",
             s.forward_calls, s.backward_calls, 3 + n, 2 + n);
done:
    cake_recompute_handle_destroy(handle);
    destroy_ctx(ctx, &c);
    mc_local_free(&A);
    mc_local_free(&B);
}

static void run_trial(int index)
{
    mc_trial t;
    /* Cheap trials: the counts depend on the partition, not on the size. */
    if (mc_trial_make(&t, 2, index, mc_size, -1, 600, 32) != 0)
        return;
    needs nd;
    needs_compute(&nd, &t, mc_size);
    const char *desc = t.desc;
    mc_case("%s; check mode off", desc);
    run_ctx(&t, &nd, 0, index % 2 ? 60.0 : 0.0);
    mc_case("%s; check mode on", desc);
    run_ctx(&t, &nd, 1, index % 2 ? 0.0 : 60.0);
    needs_free(&nd);
    mc_trial_free(&t);
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "test_mpi_exchange_count");
    const char *env = getenv("CAKE_MPI_TRIALS");
    int trials = env && *env ? atoi(env) : DEFAULT_TRIALS;
    for (int index = 0; index < trials; index++)
        run_trial(index);
    const char *verbose = getenv("CAKE_MPI_VERBOSE");
    if (verbose && *verbose == '1')
        printf("[cake-mpi] rank %d: MPI_Isend per tag 11/12/13: %ld %ld %ld\n", mc_rank,
               g_isend[0], g_isend[1], g_isend[2]);
    return mc_finish();
}
