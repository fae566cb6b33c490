#include "demo_data.h"

#include "demo_random.h"

#include <string.h>

enum { STREAM_WEIGHTS = 3, STREAM_ROWS = 4 };

/* One 64-bit draw makes four channels: 16 bits each, giving sign, exponent 125..128 (|v| in
 * [0.25, 4), so products and sums keep many mantissa bits busy) and a random mantissa. */
static void fill_row(uint64_t row_key, int64_t C, cake_bf16 *out) {
    for (int64_t c = 0; c < C; c += 4) {
        uint64_t bits = demo_at(row_key, (uint64_t)(c >> 2));
        for (int k = 0; k < 4; k++, bits >>= 16) {
            const unsigned b = (unsigned)(bits & 0xffff);
            out[c + k] = (cake_bf16)((b & 0x8000) | ((125u + ((b >> 7) & 3)) << 7) | (b & 0x7f));
        }
    }
}

static uint64_t row_key(uint64_t seed, int tensor, demo_field field, int64_t g) {
    const uint64_t stream = STREAM_ROWS + 2 * (uint64_t)tensor + (uint64_t)field;
    return demo_at(demo_key(seed, stream), (uint64_t)g);
}

void demo_fill_rows(uint64_t seed, int tensor, demo_field field, int64_t global_row, int64_t rows,
                    int64_t C, cake_bf16 *out) {
    for (int64_t t = 0; t < rows; t++)
        fill_row(row_key(seed, tensor, field, global_row + t), C, out + t * C);
}

void demo_fill_local(uint64_t seed, int tensor, demo_field field, const demo_ranges *r, int rank,
                     int64_t C, cake_bf16 *out) {
    for (int side = 0; side < 2; side++) {
        const cake_range g = r->ranges[2 * rank + side];
        demo_fill_rows(seed, tensor, field, g.start, g.end - g.start, C, out);
        out += (g.end - g.start) * C;
    }
}

void demo_fill_weights(uint64_t seed, int tensor, int64_t C, float *w) {
    const uint64_t key = demo_key(seed, STREAM_WEIGHTS + 1000 * (uint64_t)tensor);
    for (int64_t i = 0; i < 4 * C; i++)
        w[i] = (float)((double)(demo_at(key, (uint64_t)i) >> 11) * 0x1p-53 - 0.5);
}

void demo_fill_pool(uint64_t seed, int tensor, demo_field field, const demo_fragment *fragments,
                    int64_t count, int64_t C, cake_bf16 *out) {
    for (int64_t f = 0; f < count; f++) {
        const demo_fragment *d = &fragments[f];
        for (int j = 0; j < CAKE_HALO_ROWS; j++) {
            const int64_t g = field == DEMO_FIELD_X ? d->global_start - CAKE_HALO_ROWS + j
                                                    : d->global_start + d->length + j;
            cake_bf16 *dst = out + (f * CAKE_HALO_ROWS + j) * C;
            if (g < d->seq_start || g >= d->seq_end)
                memset(dst, 0, sizeof *dst * (size_t)C); /* +0.0 outside the sequence */
            else
                fill_row(row_key(seed, tensor, field, g), C, dst);
        }
    }
}
