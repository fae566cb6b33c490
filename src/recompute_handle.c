/* A small keyed store. The "conv" entry is the library's (typed); other keys hold caller bytes. */
#include "recompute_handle.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *key;
    void *data;
    size_t bytes;
} entry;

struct cake_recompute_handle {
    entry *entries;
    size_t count, capacity;
    int has_conv;
    cake_conv_entry conv;
};

cake_status cake_recompute_handle_create(cake_recompute_handle **out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "recompute handle: out of memory");
    return CAKE_SUCCESS;
}

static void free_conv(cake_conv_entry *conv) {
    free(conv->channels);
    if (conv->pools && conv->free_pools) conv->free_pools(conv->pools, conv->stream);
    memset(conv, 0, sizeof *conv);
}

void cake_recompute_handle_destroy(cake_recompute_handle *h) {
    if (!h) return;
    for (size_t i = 0; i < h->count; i++) {
        free(h->entries[i].key);
        free(h->entries[i].data);
    }
    free(h->entries);
    if (h->has_conv) free_conv(&h->conv);
    free(h);
}

static cake_status check_key(const cake_recompute_handle *h, const char *key) {
    if (!h) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "handle: expected a pointer, got NULL");
    if (!key) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "key: expected a string, got NULL");
    return CAKE_SUCCESS;
}

static cake_status refuse_conv(const char *key) {
    if (strcmp(key, CAKE_CONV_KEY) == 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "key: \"conv\" is reserved for the entry cake_forward fills");
    return CAKE_SUCCESS;
}

static entry *find(const cake_recompute_handle *h, const char *key) {
    for (size_t i = 0; i < h->count; i++)
        if (strcmp(h->entries[i].key, key) == 0) return &h->entries[i];
    return NULL;
}

int cake_recompute_handle_contains(const cake_recompute_handle *h, const char *key) {
    if (!h || !key) return 0;
    if (strcmp(key, CAKE_CONV_KEY) == 0) return h->has_conv;
    return find(h, key) != NULL;
}

cake_status cake_recompute_handle_set(cake_recompute_handle *h, const char *key,
                                      const void *data, size_t bytes) {
    cake_clear_error();
    CAKE_CHECK(check_key(h, key));
    CAKE_CHECK(refuse_conv(key));
    if (bytes > 0 && !data)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "data: expected a pointer to %zu bytes, got NULL", bytes);
    void *copy = malloc(bytes > 0 ? bytes : 1);
    if (!copy) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "recompute handle: out of memory");
    if (bytes > 0) memcpy(copy, data, bytes);
    entry *e = find(h, key);
    if (e) {
        free(e->data);
        e->data = copy;
        e->bytes = bytes;
        return CAKE_SUCCESS;
    }
    if (h->count == h->capacity) {
        const size_t capacity = h->capacity ? 2 * h->capacity : 4;
        entry *grown = realloc(h->entries, capacity * sizeof *grown);
        if (!grown) {
            free(copy);
            return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "recompute handle: out of memory");
        }
        h->entries = grown;
        h->capacity = capacity;
    }
    char *key_copy = malloc(strlen(key) + 1);
    if (!key_copy) {
        free(copy);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "recompute handle: out of memory");
    }
    strcpy(key_copy, key);
    h->entries[h->count++] = (entry){key_copy, copy, bytes};
    return CAKE_SUCCESS;
}

cake_status cake_recompute_handle_get(const cake_recompute_handle *h, const char *key,
                                      const void **data, size_t *bytes) {
    cake_clear_error();
    CAKE_CHECK(check_key(h, key));
    CAKE_CHECK(refuse_conv(key));
    if (!data || !bytes)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "%s: expected a pointer, got NULL",
                         !data ? "data" : "bytes");
    const entry *e = find(h, key);
    if (!e)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "key: no entry \"%s\" in the handle", key);
    *data = e->data;
    *bytes = e->bytes;
    return CAKE_SUCCESS;
}

cake_status cake_recompute_handle_erase(cake_recompute_handle *h, const char *key) {
    cake_clear_error();
    CAKE_CHECK(check_key(h, key));
    if (strcmp(key, CAKE_CONV_KEY) == 0) {
        if (h->has_conv) free_conv(&h->conv);
        h->has_conv = 0;
        return CAKE_SUCCESS;
    }
    entry *e = find(h, key);
    if (!e)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "key: no entry \"%s\" in the handle", key);
    free(e->key);
    free(e->data);
    *e = h->entries[--h->count];
    return CAKE_SUCCESS;
}

cake_conv_entry *cake_handle_conv(cake_recompute_handle *h) {
    return h && h->has_conv ? &h->conv : NULL;
}

cake_status cake_handle_store_conv(cake_recompute_handle *h, const cake_conv_entry *entry) {
    if (h->has_conv) free_conv(&h->conv);
    h->conv = *entry;
    h->has_conv = 1;
    return CAKE_SUCCESS;
}
