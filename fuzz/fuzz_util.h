/* Shared pieces of the libFuzzer harnesses: a byte reader that never fails (an exhausted input
 * reads as zeros, so every prefix of an input is itself a valid input), hostile values, sentinel
 * buffers, and checks that abort with a message (libFuzzer then saves the input). */
#ifndef CAKE_FUZZ_UTIL_H
#define CAKE_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "cake.h"

#define FZ_SENTINEL 0xa5 /* every byte of an output before a call */

typedef struct fz_reader {
    const uint8_t *data;
    size_t size, pos;
} fz_reader;

uint8_t fz_u8(fz_reader *r);
uint16_t fz_u16(fz_reader *r);
uint32_t fz_u32(fz_reader *r);
uint64_t fz_u64(fz_reader *r);
/* Uniform-ish in [lo, hi] (lo <= hi) from as few bytes as the span needs. */
int64_t fz_range(fz_reader *r, int64_t lo, int64_t hi);
int fz_left(const fz_reader *r); /* 1 while unread bytes remain */

/* One of a fixed table of hostile 64-bit values (0, -1, INT64_MIN, INT64_MAX, powers of two
 * near the overflow edges, ...), or a raw 64-bit value. */
int64_t fz_hostile_i64(fz_reader *r);
int fz_hostile_int(fz_reader *r);

/* a + b, saturated at INT64_MAX / INT64_MIN. */
int64_t fz_sat_add(int64_t a, int64_t b);

/* 1 when $FUZZ_VERBOSE is set: harnesses then print each decoded call (to read a reproducer). */
int fz_verbose(void);

/* With $FUZZ_STATS set, counts one case of a class ("<call>: <argument>"); the counts are printed
 * to stderr at exit, for docs/RELIABILITY.md. printf-style. */
void fz_count(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Failed checks print what broke and abort: libFuzzer reports a crash and keeps the input. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#define FZ_CHECK(cond, ...)                                                                      \
    do {                                                                                         \
        if (!(cond)) fz_fail(__VA_ARGS__);                                                       \
    } while (0)

void *fz_malloc(size_t bytes); /* never NULL (aborts); bytes may be 0 */
/* A heap buffer of `bytes` bytes, every byte FZ_SENTINEL. */
void *fz_sentinel_buffer(size_t bytes);
/* 1 if every byte is FZ_SENTINEL. */
int fz_untouched(const void *buffer, size_t bytes);

/* The argument a message names: its text up to the first ':' with any "[i]" removed, so
 * "channels[1]: expected ..." gives "channels". Empty when there is no ':'. */
void fz_message_subject(const char *message, char *out, size_t size);

/* A failed call: the status is one of `allowed` (a bit per cake_status), the message is not
 * empty and names one of the `count` argument names in `names` (base names, no index). */
void fz_expect_failure(const char *call, cake_status status, unsigned allowed,
                       const char *const *names, int count);

/* Deterministic data: the same (stream, index) gives the same value in every harness run. */
uint64_t fz_hash(uint64_t stream, uint64_t index);
/* bf16 bits for value `index` of a stream: mostly moderate finite values, some zeros,
 * subnormals, infinities and NaNs (profile 0), or moderate only (profile 1). */
cake_bf16 fz_bf16(uint64_t stream, uint64_t index, int profile);
float fz_weight(uint64_t stream, uint64_t index, int profile);

/* Bitwise equality: every NaN output is the canonical NaN (SPEC 3), as in the reference. */
int fz_same_bf16(const cake_bf16 *a, const cake_bf16 *b, int64_t count, int64_t *first_diff);
int fz_same_f32(const float *a, const float *b, int64_t count, int64_t *first_diff);

/* The ISA paths this build and processor run (AUTO first); returns the count. */
int fz_supported_isas(cake_cpu_isa *out);

#endif
