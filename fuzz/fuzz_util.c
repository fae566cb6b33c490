#include "fuzz_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t fz_u8(fz_reader *r) { return r->pos < r->size ? r->data[r->pos++] : 0; }
uint16_t fz_u16(fz_reader *r) { return (uint16_t)(fz_u8(r) | (uint16_t)fz_u8(r) << 8); }
uint32_t fz_u32(fz_reader *r) { return fz_u16(r) | (uint32_t)fz_u16(r) << 16; }
uint64_t fz_u64(fz_reader *r) { return fz_u32(r) | (uint64_t)fz_u32(r) << 32; }
int fz_left(const fz_reader *r) { return r->pos < r->size; }

int64_t fz_range(fz_reader *r, int64_t lo, int64_t hi) {
    const uint64_t span = (uint64_t)hi - (uint64_t)lo;
    uint64_t v = span < 0xff ? fz_u8(r) : span < 0xffff ? fz_u16(r) : span < 0xffffffffu ? fz_u32(r)
                                                                                     : fz_u64(r);
    if (span != UINT64_MAX) v %= span + 1;
    return (int64_t)((uint64_t)lo + v);
}

static const int64_t hostile[] = {
    0, 1, -1, 2, 3, 4, 7, 8, 12, 16, -8, 1000,
    INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, INT64_MAX - 2, INT64_MAX - 7,
    INT32_MAX, INT32_MIN, (int64_t)1 << 31, (int64_t)1 << 32,
    (int64_t)1 << 56, (int64_t)1 << 59, ((int64_t)1 << 59) + 8, (int64_t)1 << 60,
    ((int64_t)1 << 61) - 8, (int64_t)1 << 61, (int64_t)1 << 62, -((int64_t)1 << 62),
    INT64_MAX / 4, INT64_MAX / 16,
};
enum { HOSTILE_COUNT = sizeof hostile / sizeof hostile[0] };

int64_t fz_hostile_i64(fz_reader *r) {
    const uint8_t b = fz_u8(r);
    if (b < HOSTILE_COUNT) return hostile[b];
    if (b < 2 * HOSTILE_COUNT) return hostile[b - HOSTILE_COUNT] & ~(int64_t)7; /* multiples of 8 */
    return (int64_t)fz_u64(r);
}

int fz_hostile_int(fz_reader *r) {
    static const int values[] = {0, -1, 1, 2, INT32_MIN, INT32_MAX, INT32_MAX - 1, 1 << 16,
                                 1 << 20, 1 << 30, -1000, 4096};
    const uint8_t b = fz_u8(r);
    if (b < sizeof values / sizeof values[0]) return values[b];
    return (int)fz_u32(r);
}

int64_t fz_sat_add(int64_t a, int64_t b) {
    int64_t s;
    if (!__builtin_add_overflow(a, b, &s)) return s;
    return b > 0 ? INT64_MAX : INT64_MIN;
}

int fz_verbose(void) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    return verbose;
}

enum { MAX_CLASSES = 256 };
static struct { char *key; long long count; } classes[MAX_CLASSES];
static int num_classes;

static int by_key(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void print_counts(void) {
    qsort(classes, (size_t)num_classes, sizeof classes[0], by_key);
    for (int i = 0; i < num_classes; i++)
        fprintf(stderr, "fuzz-stats: %12lld  %s\n", classes[i].count, classes[i].key);
}

void fz_count(const char *fmt, ...) {
    static int enabled = -1;
    if (enabled < 0 && (enabled = getenv("FUZZ_STATS") != NULL)) atexit(print_counts);
    if (!enabled) return;
    char key[160];
    va_list args;
    va_start(args, fmt);
    vsnprintf(key, sizeof key, fmt, args);
    va_end(args);
    for (int i = 0; i < num_classes; i++)
        if (strcmp(classes[i].key, key) == 0) {
            classes[i].count++;
            return;
        }
    if (num_classes == MAX_CLASSES) return;
    classes[num_classes].key = strdup(key);
    classes[num_classes++].count = 1;
}

void fz_fail(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fputs("fuzz check failed: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    abort();
}

void *fz_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fz_fail("harness out of memory (%zu bytes)", bytes);
    return p;
}

void *fz_sentinel_buffer(size_t bytes) {
    void *p = fz_malloc(bytes);
    memset(p, FZ_SENTINEL, bytes);
    return p;
}

int fz_untouched(const void *buffer, size_t bytes) {
    const uint8_t *b = buffer;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != FZ_SENTINEL) return 0;
    return 1;
}

void fz_message_subject(const char *message, char *out, size_t size) {
    size_t n = 0;
    const char *colon = strchr(message, ':');
    if (colon)
        for (const char *p = message; p < colon && n + 1 < size; p++) {
            if (*p == '[') { /* skip the index */
                while (p < colon && *p != ']') p++;
                continue;
            }
            out[n++] = *p;
        }
    out[n] = '\0';
}

void fz_expect_failure(const char *call, cake_status status, unsigned allowed,
                       const char *const *names, int count) {
    const char *message = cake_last_error();
    FZ_CHECK(status != CAKE_SUCCESS, "%s: succeeded on bad input (expected to name one of %d "
             "arguments, first %s)", call, count, count ? names[0] : "?");
    FZ_CHECK((unsigned)status < 32 && (allowed >> status & 1u), "%s: status %s (%d), message \"%s\"",
             call, cake_status_string(status), (int)status, message);
    FZ_CHECK(message && message[0], "%s: failed (%s) with an empty message", call,
             cake_status_string(status));
    char subject[128];
    fz_message_subject(message, subject, sizeof subject);
    for (int i = 0; i < count; i++)
        if (strcmp(subject, names[i]) == 0) return;
    fprintf(stderr, "bad arguments were:");
    for (int i = 0; i < count; i++) fprintf(stderr, " %s", names[i]);
    fz_fail("\n%s: the message names \"%s\", not a bad argument: \"%s\"", call, subject, message);
}

uint64_t fz_hash(uint64_t stream, uint64_t index) {
    uint64_t z = stream * 0x9e3779b97f4a7c15ull + index + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

cake_bf16 fz_bf16(uint64_t stream, uint64_t index, int profile) {
    const uint64_t h = fz_hash(stream, index);
    const uint16_t sign = (uint16_t)(h >> 63) << 15, mant = (uint16_t)(h & 0x7f);
    const unsigned pick = (unsigned)(h >> 8) % 64;
    if (profile == 0) {
        if (pick == 0) return sign;                    /* +-0 */
        if (pick == 1) return sign | mant;             /* subnormal (or zero) */
        if (pick == 2) return sign | 0x7f80;           /* infinity */
        if (pick == 3) return sign | 0x7fc0 | mant;    /* NaN */
        if (pick == 4) return sign | 0x7f7f;           /* the largest finite */
    }
    const uint16_t exponent = (uint16_t)(127 - 12 + (h >> 16) % 25); /* 2^-12 .. 2^12 */
    return sign | (uint16_t)(exponent << 7) | mant;
}

float fz_weight(uint64_t stream, uint64_t index, int profile) {
    const uint64_t h = fz_hash(stream ^ 0x5a5a5a5aull, index);
    if (profile == 0 && (h >> 8) % 64 == 0) return (h & 1) ? -0.0f : 0.0f;
    const float m = (float)(h >> 40) / (float)(1 << 24); /* [0, 1): 24 significant bits */
    return ldexpf((h >> 63) ? -m : m, (int)((h >> 32) % 9) - 4);
}

int fz_same_bf16(const cake_bf16 *a, const cake_bf16 *b, int64_t count, int64_t *first_diff) {
    for (int64_t i = 0; i < count; i++)
        if (a[i] != b[i]) {
            if (first_diff) *first_diff = i;
            return 0;
        }
    return 1;
}

int fz_same_f32(const float *a, const float *b, int64_t count, int64_t *first_diff) {
    for (int64_t i = 0; i < count; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (first_diff) *first_diff = i;
            return 0;
        }
    return 1;
}

int fz_supported_isas(cake_cpu_isa *out) {
    int n = 0;
    for (int isa = 0; isa < CAKE_CPU_ISA_COUNT; isa++)
        if (cake_cpu_isa_supported((cake_cpu_isa)isa)) out[n++] = (cake_cpu_isa)isa;
    return n;
}
