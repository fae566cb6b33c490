/* fuzz_args: shared state of one input. The tensor calls live in fuzz_args.c; the recompute
 * handle's key store and context creation in fuzz_args_handles.c. */
#ifndef CAKE_FUZZ_ARGS_H
#define CAKE_FUZZ_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "cake.h"
#include "fuzz_util.h"

enum { NUM_HANDLES = 2, NUM_KEYS = 6, MAX_ENTRY = 64, SLOTS = 8 };

/* What a handle must hold: the caller's entries, and whether and by which call "conv" was
 * filled. */
typedef struct handle_model {
    cake_recompute_handle *h;
    int present[NUM_KEYS];
    uint8_t data[NUM_KEYS][MAX_ENTRY];
    size_t bytes[NUM_KEYS];
    int conv, conv_multi, conv_n, conv_ctx;
    int64_t conv_channels[SLOTS];
} handle_model;

/* Transport callbacks for one-rank contexts: exchange must never run, release counts. */
extern int fz_releases;
cake_status fz_exchange_never(void *state, int tag, const cake_transfer *sends, int num_sends,
                              const cake_transfer *receives, int num_receives, double timeout);
void fz_release(void *state);

/* Every entry of the model is in the handle, with its bytes; "conv" as the model says. */
void fz_check_handle(const handle_model *m);
/* One random key-store operation (set, get, erase, contains) on a handle or NULL. */
void fz_handle_op(fz_reader *r, handle_model *handles);
/* One random cake_ctx_create call over `part` (one rank), valid or not. */
void fz_ctx_create_op(fz_reader *r, const cake_partition *part);

#endif
