/* fuzz_args: the recompute handle's key store and cake_ctx_create on hostile arguments. */
#include <math.h>
#include <string.h>

#include "fuzz_args.h"

int fz_releases;

cake_status fz_exchange_never(void *state, int tag, const cake_transfer *sends, int num_sends,
                              const cake_transfer *receives, int num_receives, double timeout) {
    (void)state, (void)sends, (void)receives, (void)timeout;
    fz_fail("the transport was called on a one-rank context (tag %d, %d sends, %d receives)", tag,
            num_sends, num_receives);
}

void fz_release(void *state) {
    (void)state;
    fz_releases++;
}

static const char *const keys[NUM_KEYS] = {"kda", "conv", "", "x", "kda2", NULL};
enum { KEY_CONV = 1, KEY_NULL = 5 };

void fz_check_handle(const handle_model *m) {
    FZ_CHECK(cake_recompute_handle_contains(m->h, "conv") == m->conv,
             "handle: contains(\"conv\") = %d, want %d", cake_recompute_handle_contains(m->h, "conv"),
             m->conv);
    for (int k = 0; k < NUM_KEYS; k++) {
        if (k == KEY_CONV || k == KEY_NULL) continue;
        FZ_CHECK(cake_recompute_handle_contains(m->h, keys[k]) == m->present[k],
                 "handle: contains(\"%s\") = %d, want %d", keys[k],
                 cake_recompute_handle_contains(m->h, keys[k]), m->present[k]);
        if (!m->present[k]) continue;
        const void *data = NULL;
        size_t bytes = 0;
        FZ_CHECK(cake_recompute_handle_get(m->h, keys[k], &data, &bytes) == CAKE_SUCCESS,
                 "handle: get(\"%s\"): %s", keys[k], cake_last_error());
        FZ_CHECK(bytes == m->bytes[k] && (bytes == 0 || memcmp(data, m->data[k], bytes) == 0),
                 "handle: entry \"%s\" holds %zu other bytes, want %zu", keys[k], bytes,
                 m->bytes[k]);
    }
}

void fz_handle_op(fz_reader *r, handle_model *handles) {
    const uint8_t b = fz_u8(r);
    handle_model *m = &handles[(b >> 2) % NUM_HANDLES];
    const int null_handle = (b >> 3) % 8 == 7;
    cake_recompute_handle *h = null_handle ? NULL : m->h;
    const int k = fz_u8(r) % NUM_KEYS;
    const char *key = keys[k];
    const char *names[3];
    int count = 0;
    if (null_handle) names[count++] = "handle";
    if (k == KEY_NULL) names[count++] = "key";
    const unsigned invalid = 1u << CAKE_ERROR_INVALID_ARGUMENT;
    switch (b % 4) {
    case 0: { /* set */
        uint8_t payload[MAX_ENTRY];
        size_t bytes = fz_u8(r) % (MAX_ENTRY + 1);
        for (size_t i = 0; i < bytes; i++) payload[i] = fz_u8(r);
        const int null_data = fz_u8(r) % 4 == 0;
        if (null_data && (fz_u8(r) & 1)) bytes = (size_t)fz_hostile_i64(r); /* no data to read */
        if (k == KEY_CONV) names[count++] = "key";
        if (null_data && bytes > 0) names[count++] = "data";
        const cake_status st = cake_recompute_handle_set(h, key, null_data ? NULL : payload, bytes);
        if (count) {
            for (int i = 0; i < count; i++) fz_count("cake_recompute_handle_set: bad %s", names[i]);
            fz_expect_failure("cake_recompute_handle_set", st, invalid, names, count);
        } else {
            FZ_CHECK(st == CAKE_SUCCESS, "set(\"%s\", %zu bytes): %s", key, bytes, cake_last_error());
            m->present[k] = 1;
            m->bytes[k] = bytes;
            memcpy(m->data[k], payload, bytes);
        }
        break;
    }
    case 1: { /* get */
        const int null_out = fz_u8(r) % 4;
        const void *sentinel = &names, *data = sentinel;
        size_t bytes = 12345;
        if (k == KEY_CONV || (k != KEY_NULL && !m->present[k])) names[count++] = "key";
        if (null_out == 1) names[count++] = "data";
        if (null_out == 2) names[count++] = "bytes";
        const cake_status st = cake_recompute_handle_get(h, key, null_out == 1 ? NULL : &data,
                                                         null_out == 2 ? NULL : &bytes);
        if (count) {
            for (int i = 0; i < count; i++) fz_count("cake_recompute_handle_get: bad %s", names[i]);
            fz_expect_failure("cake_recompute_handle_get", st, invalid, names, count);
            FZ_CHECK(data == sentinel && bytes == 12345, "get wrote its outputs on failure");
        } else {
            FZ_CHECK(st == CAKE_SUCCESS && bytes == m->bytes[k] &&
                         (bytes == 0 || memcmp(data, m->data[k], bytes) == 0),
                     "get(\"%s\"): wrong entry or %s", key, cake_last_error());
        }
        break;
    }
    case 2: { /* erase */
        if (k != KEY_CONV && k != KEY_NULL && !m->present[k]) names[count++] = "key";
        const cake_status st = cake_recompute_handle_erase(h, key);
        if (count) {
            for (int i = 0; i < count; i++) fz_count("cake_recompute_handle_erase: bad %s", names[i]);
            fz_expect_failure("cake_recompute_handle_erase", st, invalid, names, count);
        } else {
            FZ_CHECK(st == CAKE_SUCCESS, "erase(\"%s\"): %s", key, cake_last_error());
            if (k == KEY_CONV) m->conv = 0;
            else m->present[k] = 0;
        }
        break;
    }
    default: { /* contains */
        const int want = null_handle || k == KEY_NULL ? 0 : k == KEY_CONV ? m->conv : m->present[k];
        FZ_CHECK(cake_recompute_handle_contains(h, key) == want, "contains(\"%s\") != %d",
                 key ? key : "(null)", want);
    }
    }
    fz_check_handle(m);
}

void fz_ctx_create_op(fz_reader *r, const cake_partition *part) {
    const uint8_t b = fz_u8(r), o = fz_u8(r);
    cake_transport t = {fz_exchange_never, fz_release, NULL, NULL};
    cake_ctx_options opt = {0};
    opt.check = o & 1;
    opt.cpu.num_threads = 1 + (o >> 1) % 2;
    opt.cpu.isa = CAKE_CPU_ISA_AUTO;
    int rank = 0;
    const char *names[3];
    int count = 0;
    unsigned allowed = 1u << CAKE_ERROR_INVALID_ARGUMENT;
    switch (b % 10) {
    case 0: names[count++] = "partition"; part = NULL; break;
    case 1: names[count++] = "transport"; t.exchange = NULL; break;
    case 2: rank = fz_hostile_int(r); if (rank != 0) names[count++] = "rank"; break;
    case 3: {
        static const double bad[] = {-1.0, -1e-300, NAN, -INFINITY};
        opt.timeout_seconds = bad[fz_u8(r) % 4];
        names[count++] = "options->timeout_seconds";
        break;
    }
    case 4: opt.cpu.num_threads = fz_hostile_int(r); if (opt.cpu.num_threads < 0) names[count++] = "options->cpu.num_threads"; break;
    case 5: {
        opt.cpu.isa = (cake_cpu_isa)fz_hostile_int(r);
        if (opt.cpu.isa < 0 || opt.cpu.isa >= CAKE_CPU_ISA_COUNT) {
            names[count++] = "options->cpu.isa";
        } else if (!cake_cpu_isa_supported(opt.cpu.isa)) { /* a real ISA this processor lacks */
            names[count++] = "options->cpu.isa";
            allowed |= 1u << CAKE_ERROR_UNSUPPORTED;
        }
        break;
    }
    case 6: names[count++] = "out"; break;
    default: break; /* valid */
    }
    const int null_transport = b % 10 == 1 && (b & 0x80);
    int64_t dummy;
    cake_ctx *sentinel = (cake_ctx *)&dummy, *ctx = sentinel;
    const int before = fz_releases;
    const cake_status st = cake_ctx_create(part, rank, null_transport ? NULL : &t,
                                           (o & 0x80) && count == 0 ? NULL : &opt,
                                           b % 10 == 6 ? NULL : &ctx);
    if (count) {
        for (int i = 0; i < count; i++) fz_count("cake_ctx_create: bad %s", names[i]);
        fz_expect_failure("cake_ctx_create", st, allowed, names, count);
        FZ_CHECK(ctx == sentinel, "cake_ctx_create wrote *out on failure");
        FZ_CHECK(fz_releases == before, "cake_ctx_create released the transport on failure");
        return;
    }
    FZ_CHECK(st == CAKE_SUCCESS && ctx != sentinel, "cake_ctx_create: %s", cake_last_error());
    fz_count("cake_ctx_create: valid");
    FZ_CHECK(cake_ctx_local_rows(ctx) == cake_partition_total_rows(part), "ctx local rows");
    cake_ctx_destroy(ctx);
    FZ_CHECK(fz_releases == before + 1, "cake_ctx_destroy released the transport %d times",
             fz_releases - before);
}
