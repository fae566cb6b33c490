/* Data for the large-tensor test: every value is a hash of (seed, array, global row, channel), so
 * a rank's rows, its pools and spot-check references are computed where needed without a global
 * copy of the batch; filling runs on all cores. */
#ifndef CAKE_TEST_LARGE_DATA_H
#define CAKE_TEST_LARGE_DATA_H

#include <stdint.h>

#include "cake.h"

#define LG_MAX_RANGES 8

/* One rank's rows: its ranges in local order (each with its first local row). */
typedef struct lg_rows {
    int64_t num_ranges;
    cake_range range[LG_MAX_RANGES];
    int64_t local_start[LG_MAX_RANGES + 1]; /* the last entry is S_local */
} lg_rows;

void lg_rows_init(lg_rows *rows, const cake_range *ranges, int64_t num_ranges);
int64_t lg_global_row(const lg_rows *rows, int64_t local_row);

enum { LG_X = 1, LG_DY = 2, LG_W = 3 };

/* Salted hash streams derived from the test seed. */
typedef struct lg_data {
    uint64_t salt[4];
    int64_t C;
} lg_data;

void lg_data_init(lg_data *d, uint64_t seed, int64_t C);
/* x or dy (which = LG_X / LG_DY) at global row g, channel c: moderate exponents, some zeros and
 * subnormals. */
cake_bf16 lg_value(const lg_data *d, int which, int64_t g, int64_t c);
/* w[c][k]. */
float lg_weight(const lg_data *d, int64_t c, int k);

/* out[t * C + c] = lg_value(which, global row of local row t, c) for t < S_local, on all cores. */
void lg_fill_local(const lg_data *d, int which, const lg_rows *rows, cake_bf16 *out);

/* Runs fn(ctx, begin, end) over [0, n) split across all online processors. */
void lg_parallel(int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);

/* Seconds since an arbitrary start (monotonic). */
double lg_now(void);

#endif
