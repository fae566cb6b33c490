/* Sizes and field offsets of every public struct the Python binding mirrors with ctypes
 * (python/cake/_lib.py), as one JSON object: {"struct": {"size": n, "fields": {"name": offset,
 * ...}}, ...}. python/tests/test_struct_layout.py compiles this file with the system C compiler
 * (no library needed) and compares with the ctypes structs, so a field added to cake.h and not
 * to the binding (or the reverse) fails a test instead of corrupting memory. */
#include <stddef.h>
#include <stdio.h>

#include "cake.h"

static int first_struct = 1, first_field;

static void begin(const char *name, size_t size) {
    printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "{" : ",", name, size);
    first_struct = 0;
    first_field = 1;
}

static void field(const char *name, size_t offset) {
    printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
    first_field = 0;
}

static void end(void) { printf("}}"); }

#define BEGIN(type) begin(#type, sizeof(type))
#define FIELD(type, member) field(#member, offsetof(type, member))

int main(void) {
    BEGIN(cake_range);
    FIELD(cake_range, start);
    FIELD(cake_range, end);
    end();

    BEGIN(cake_halo_row);
    FIELD(cake_halo_row, global_row);
    FIELD(cake_halo_row, local_row);
    FIELD(cake_halo_row, rank);
    FIELD(cake_halo_row, is_local);
    end();

    BEGIN(cake_fragment);
    FIELD(cake_fragment, local_start);
    FIELD(cake_fragment, length);
    FIELD(cake_fragment, global_start);
    FIELD(cake_fragment, seq_index);
    FIELD(cake_fragment, seq_start);
    FIELD(cake_fragment, seq_end);
    FIELD(cake_fragment, history);
    FIELD(cake_fragment, future);
    end();

    BEGIN(cake_transfer);
    FIELD(cake_transfer, peer);
    FIELD(cake_transfer, data);
    FIELD(cake_transfer, bytes);
    end();

    BEGIN(cake_transport);
    FIELD(cake_transport, exchange);
    FIELD(cake_transport, release);
    FIELD(cake_transport, state);
    FIELD(cake_transport, exchange_device);
    end();

    BEGIN(cake_cpu_options);
    FIELD(cake_cpu_options, num_threads);
    FIELD(cake_cpu_options, isa);
    end();

    BEGIN(cake_ctx_options);
    FIELD(cake_ctx_options, check);
    FIELD(cake_ctx_options, timeout_seconds);
    FIELD(cake_ctx_options, cpu);
    end();

    BEGIN(cake_ctx_stats);
    FIELD(cake_ctx_stats, forward_calls);
    FIELD(cake_ctx_stats, backward_calls);
    FIELD(cake_ctx_stats, exchanges);
    FIELD(cake_ctx_stats, check_rounds);
    FIELD(cake_ctx_stats, messages_sent);
    FIELD(cake_ctx_stats, messages_received);
    FIELD(cake_ctx_stats, rows_sent);
    FIELD(cake_ctx_stats, rows_received);
    FIELD(cake_ctx_stats, bytes_sent);
    FIELD(cake_ctx_stats, bytes_received);
    FIELD(cake_ctx_stats, rows_copied);
    FIELD(cake_ctx_stats, forwards_from_handle);
    end();

    BEGIN(cake_conv_params);
    FIELD(cake_conv_params, activation);
    FIELD(cake_conv_params, bias);
    FIELD(cake_conv_params, dbias);
    end();

    printf("\n}\n");
    return 0;
}
