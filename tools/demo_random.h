/* Counter-based random numbers: a value depends only on the seed and its coordinates (stream,
 * row, channel), so any rank can make any global row without making the others. */
#ifndef CAKE_DEMO_RANDOM_H
#define CAKE_DEMO_RANDOM_H

#include <stdint.h>

/* splitmix64's finaliser: a bijection that scrambles every input bit. */
static inline uint64_t demo_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A key for stream `stream` under `seed`; streams: see demo_data.c and demo_layout.c. */
static inline uint64_t demo_key(uint64_t seed, uint64_t stream) {
    return demo_mix(demo_mix(seed) ^ (stream * 0xd1b54a32d192ed03ull));
}

/* The i-th number of the stream with key `key`. */
static inline uint64_t demo_at(uint64_t key, uint64_t i) {
    return demo_mix(key ^ demo_mix(i));
}

/* Uniform in [0, n) for n >= 1 (the modulo bias is irrelevant here). */
static inline uint64_t demo_below(uint64_t key, uint64_t i, uint64_t n) {
    return demo_at(key, i) % n;
}

#endif
