/* Internal helpers shared by the library's translation units. Not installed. */
#ifndef CAKE_INTERNAL_H
#define CAKE_INTERNAL_H

#include "cake.h"

#include <stdint.h>

#if defined(__GNUC__)
#define CAKE_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CAKE_PRINTF(fmt_index, first_arg)
#endif

/* Records the message of a failed call for cake_last_error() and returns `status`. */
cake_status cake_fail(cake_status status, const char *format, ...) CAKE_PRINTF(2, 3);
/* Clears the message at the start of a public call. */
void cake_clear_error(void);

/* Propagates a failure; the callee already set the message. */
#define CAKE_CHECK(expr)                                                                        \
    do {                                                                                        \
        cake_status cake_check_status_ = (expr);                                                \
        if (cake_check_status_ != CAKE_SUCCESS) return cake_check_status_;                      \
    } while (0)

/* a * b without overflow for non-negative operands; 0 on overflow. */
static inline int cake_mul_fits(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Index of the sequence that holds global row g: the last i with cu[i] <= g (empty sequences
 * repeat an offset, so this skips them). Requires 0 <= g < cu[num_seqs]. */
int64_t cake_sequence_of_row(const int64_t *cu_seqlens, int64_t num_seqs, int64_t g);

/* Where global row g lives: owner rank and local row. Requires 0 <= g < T. */
void cake_partition_owner(const cake_partition *partition, int64_t g, int32_t *rank,
                          int64_t *local_row);
const int64_t *cake_partition_cu_seqlens(const cake_partition *partition);
/* The ranges of `rank`, in order. */
const cake_range *cake_partition_ranges(const cake_partition *partition, int rank,
                                        int64_t *count);

const cake_fragment *cake_plan_fragments(const cake_plan *plan);

/* Threads and ISA of CPU options; `prefix` starts the argument names ("options->",
 * "options->cpu."). */
cake_status cake_check_cpu_options(const cake_cpu_options *options, const char *prefix);

/* cake_ctx_create for a transport made by the library over a communicator of `size` ranks:
 * the partition must have that many ranks. Takes ownership of the transport (released here
 * on failure). */
cake_status cake_ctx_create_owning(const cake_partition *partition, int rank, int size,
                                   const cake_transport *transport,
                                   const cake_ctx_options *options, cake_ctx **out);

#endif
