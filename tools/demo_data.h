/* Synthetic inputs: every value is a function of (seed, tensor, field, global row, channel), so
 * each rank makes its local rows, its halo pools and (rank 0) the whole batch independently and
 * identically. */
#ifndef CAKE_DEMO_DATA_H
#define CAKE_DEMO_DATA_H

#include "cake.h"
#include "demo_layout.h"

#include <stdint.h>

typedef enum demo_field { DEMO_FIELD_X = 0, DEMO_FIELD_DY = 1 } demo_field;

/* rows [global_row, global_row + rows) of one field of tensor `tensor`, [rows, C] bf16. */
void demo_fill_rows(uint64_t seed, int tensor, demo_field field, int64_t global_row, int64_t rows,
                    int64_t C, cake_bf16 *out);
/* `rank`'s local rows, in the partition's order. */
void demo_fill_local(uint64_t seed, int tensor, demo_field field, const demo_ranges *r, int rank,
                     int64_t C, cake_bf16 *out);
/* w [C, 4] fp32, in [-0.5, 0.5). */
void demo_fill_weights(uint64_t seed, int tensor, int64_t C, float *w);
/* The pool cake.h defines for these fragments, from the global data: field X gives the history
 * pool (x before each fragment), DY the future pool (dy after it); rows outside the fragment's
 * sequence are +0.0. [3 * count, C] bf16. */
void demo_fill_pool(uint64_t seed, int tensor, demo_field field, const demo_fragment *fragments,
                    int64_t count, int64_t C, cake_bf16 *out);

#endif
