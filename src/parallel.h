/* A parallel loop over independent work units on short-lived threads. Units are claimed from
 * an atomic counter; each unit's result must not depend on which thread runs it. */
#ifndef CAKE_PARALLEL_H
#define CAKE_PARALLEL_H

#include <stdint.h>

#include "cake.h"

typedef void (*cake_unit_fn)(void *context, int64_t unit);

/* Runs fn(context, u) for every u in [0, units) on up to `threads` threads (the caller's
 * included). If a thread cannot be started the others do its share. */
void cake_parallel_for(int threads, int64_t units, cake_unit_fn fn, void *context);

/* The threads of a CPU call: `requested` when > 0; for 0, $CAKE_NUM_THREADS (read now, and
 * an invalid value fails the call with the message of cake_env_threads), else the online
 * processors. */
cake_status cake_cpu_threads(int requested, int *threads);

#endif
