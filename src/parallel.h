/* A parallel loop over independent work units on short-lived threads. Units are claimed from
 * an atomic counter; each unit's result must not depend on which thread runs it. */
#ifndef CAKE_PARALLEL_H
#define CAKE_PARALLEL_H

#include <stdint.h>

typedef void (*cake_unit_fn)(void *context, int64_t unit);

/* Runs fn(context, u) for every u in [0, units) on up to `threads` threads (the caller's
 * included). If a thread cannot be started the others do its share. */
void cake_parallel_for(int threads, int64_t units, cake_unit_fn fn, void *context);

/* 0 means $CAKE_NUM_THREADS if set to a positive number, else the online processors. */
int cake_resolve_threads(int requested);

#endif
